// node bench/sandbox-runner.mjs (after `npx tsc -p tsconfig.json`) — the ns runner against a bare
// bwrap of /bin/true, both spawned from this one Node process, sequentially N times each; then
// runs/s with 2 in parallel. Full observation with the host tracer (the default: native/tracer.c +
// cgroup + /out diff), with the strace fallback (AIRLOCK_SYSCALL_TRACER=strace), and observation off
// (traceSyscalls: false: no side-effect observation) are reported separately and labelled.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { doctor } from '../dist/src/sandbox/doctor.js';
import * as runner from '../dist/src/sandbox/ns/runner.js';
import { fmt, summary } from './stats.mjs';

const N = Number(process.env.BENCH_N ?? 200);
const PAR_RUNS = Number(process.env.BENCH_PAR ?? 200);
const LIMITS = { wallMs: 5000, cpuMs: 3000, memoryBytes: 256 << 20, pids: 64, outBytes: 1 << 20, tmpBytes: 4 << 20, files: 10_000, stdoutBytes: 64 << 10, stderrBytes: 64 << 10 };

const caps = await doctor();
if (caps.blockers.length) throw new Error(`this host cannot run the ns lane: ${caps.blockers.join('; ')}`);
const bw = caps.bwrap.path;
const user = caps.isRoot && caps.sandboxHostUser ? { uid: caps.sandboxHostUser.uid, gid: caps.sandboxHostUser.gid } : {};
// The bare sandbox: the same namespaces, a read-only /usr and the merged-/usr symlinks, /proc, /dev.
const bareArgs = ['--unshare-user', '--unshare-pid', '--unshare-net', '--unshare-ipc', '--unshare-uts', '--die-with-parent', '--new-session', '--ro-bind', '/usr', '/usr', '--symlink', 'usr/lib', '/lib', '--symlink', 'usr/lib64', '/lib64', '--symlink', 'usr/bin', '/bin', '--proc', '/proc', '--dev', '/dev', '/bin/true'];
const bare = () =>
  new Promise((resolve, reject) => {
    const c = spawn(bw, bareArgs, { stdio: ['ignore', 'pipe', 'pipe'], env: {}, ...user });
    c.stdout.resume();
    c.stderr.resume();
    c.on('error', reject);
    c.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`bare bwrap exited ${code}`))));
  });

const base = mkdtempSync(join(tmpdir(), 'airlock-bench-'));
let k = 0;
const ns = (trace, via = 'tracer') => async () => {
  if (via === 'strace') process.env.AIRLOCK_SYSCALL_TRACER = 'strace';
  else delete process.env.AIRLOCK_SYSCALL_TRACER;
  const o = await runner.runNs({ argv: ['/bin/true'], outDir: join(base, String(k++)), limits: LIMITS, traceSyscalls: trace });
  if (o.status !== 'SUCCESS') throw new Error(`runNs: ${o.status} ${o.reason}`);
  if (trace && o.sideEffects === null) throw new Error(`runNs: no side effects with tracing on: ${o.sideEffectsUnavailable}`);
  const want = via === 'strace' ? 'strace' : 'airlock-tracer';
  if (trace && o.host.syscallTracer !== want) throw new Error(`runNs: observed by ${o.host.syscallTracer}, not ${want} (is native/tracer.c built? are we root?)`);
};

// CPU ms used by this process and its reaped children (all sandbox processes): robust on a noisy host.
const cpuMs = () => {
  const f = readFileSync('/proc/self/stat', 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) * 10; // clock ticks (100 Hz)
};

async function sequential(label, fn) {
  for (let i = 0; i < 10; i++) await fn(); // warm-up (page cache, pools, JIT)
  await (runner.sandboxIdle?.() ?? Promise.resolve());
  const t = [];
  const c0 = cpuMs();
  for (let i = 0; i < N; i++) {
    const t0 = performance.now();
    await fn();
    t.push(performance.now() - t0);
  }
  await (runner.sandboxIdle?.() ?? Promise.resolve());
  return { label, ...summary(t), cpu: (cpuMs() - c0) / N };
}

async function parallel(label, fn, width = 2) {
  let left = PAR_RUNS;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: width }, async () => {
    while (left-- > 0) await fn();
  }));
  await (runner.sandboxIdle?.() ?? Promise.resolve());
  return { label, rate: (PAR_RUNS / (performance.now() - t0)) * 1000 };
}

const rows = [];
rows.push(await sequential('bare bwrap', bare));
rows.push(await sequential('runNs, full observation (tracer)', ns(true)));
rows.push(await sequential('runNs, full observation (strace)', ns(true, 'strace')));
rows.push(await sequential('runNs, observation off', ns(false)));
const b = rows[0];
console.log(`ns runner vs bare bwrap of /bin/true, ${N} sequential runs each (host: ${caps.kernel}, bwrap ${caps.bwrap.version}, cgroup v${caps.cgroup.version ?? '-'}, strace ${caps.strace?.version ?? 'none'})`);
for (const r of rows) console.log(`  ${r.label.padEnd(38)} p50 ${fmt(r.p50).padStart(7)} ms  p99 ${fmt(r.p99).padStart(7)} ms  min ${fmt(r.min).padStart(6)}  cpu/run ${fmt(r.cpu, 1).padStart(5)} ms  ratio p50 ${fmt(r.p50 / b.p50)}x`);
const par = [await parallel('bare bwrap', bare), await parallel('runNs, full observation (tracer)', ns(true)), await parallel('runNs, full observation (strace)', ns(true, 'strace')), await parallel('runNs, observation off', ns(false))];
console.log(`runs/s with 2 in parallel (${PAR_RUNS} runs):`);
for (const p of par) console.log(`  ${p.label.padEnd(38)} ${fmt(p.rate, 1)} runs/s`);
rmSync(base, { recursive: true, force: true });
