// npm run bench:user — the ns lane as an ordinary user: the host tracer against the strace fallback
// (what such a user had before the tracer served them), alternated run by run in one process.
//   1. `runNs` of /bin/true (the ns runner: staging, sandbox, observation, diff; not the judge or the
//      result), BENCH_RUNS times each (default 100), and bare bwrap of it (bare-bwrap.mjs)
//      between them: the caller's time per run, p50/p99, and the ratios.
//   2. python opening BENCH_OPENS files for writing in /tmp (default 2,000), 5 runs each: the program's
//      own wall time, p50, and per observed open. /tmp, not /out: without root /out is a folder on the
//      host's disk, whose file creation would be measured with the tracer (root's /out is a tmpfs, as
//      /tmp is for everyone; bench:observed-calls is root's figure).
// Run as root, it runs itself again as `nobody` (runuser) from a folder of its own.
import { spawnSync } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bareBwrap } from './bare-bwrap.mjs';
import { fmt, summary } from './stats.mjs';

if (process.getuid() === 0) {
  const home = mkdtempSync(join(tmpdir(), 'airlock-bench-user-'));
  chownSync(home, 65534, 65534);
  const path = [dirname(process.execPath), '/usr/bin', '/bin'].join(':');
  const env = ['BENCH_RUNS', 'BENCH_OPENS'].filter((k) => process.env[k]).map((k) => `${k}=${process.env[k]}`);
  const r = spawnSync('runuser', ['-u', 'nobody', '--', 'env', '-i', `PATH=${path}`, `HOME=${home}`, `TMPDIR=${home}`, ...env, process.execPath, fileURLToPath(import.meta.url)], { stdio: 'inherit', cwd: home });
  rmSync(home, { recursive: true, force: true });
  process.exit(r.status ?? 1);
}

const { runNs, sandboxIdle } = await import('../dist/src/sandbox/ns/runner.js');
const RUNS = Number(process.env.BENCH_RUNS ?? 100);
const OPENS = Number(process.env.BENCH_OPENS ?? 2_000);
const limits = { wallMs: 60_000, cpuMs: 60_000, memoryBytes: 256 << 20, pids: 64, outBytes: 64 << 20, tmpBytes: 4 << 20, files: OPENS + 100, stdoutBytes: 64 << 10, stderrBytes: 64 << 10 };
const outs = mkdtempSync(join(tmpdir(), 'airlock-bench-user-out-'));
const tracers = ['airlock-tracer', 'strace'];
let k = 0;

/** One run under `tracer`: [the caller's ms, the program's own ms]. */
async function run(tracer, argv) {
  if (tracer === 'strace') process.env.AIRLOCK_SYSCALL_TRACER = 'strace';
  else delete process.env.AIRLOCK_SYSCALL_TRACER;
  const outDir = join(outs, String(k++));
  const t0 = performance.now();
  const o = await runNs({ argv, outDir, limits, traceSyscalls: true });
  const ms = performance.now() - t0;
  if (o.status !== 'SUCCESS') throw new Error(`${tracer}: ${o.status} ${o.reason ?? ''} ${o.stderr.bytes.toString()}`);
  if (o.host.syscallTracer !== tracer) throw new Error(`observed by ${o.host.syscallTracer}, not ${tracer}: ${o.sideEffectsUnavailable ?? ''}`);
  await sandboxIdle();
  rmSync(outDir, { recursive: true, force: true });
  return [ms, o.resources.wallMs];
}

console.log(`as uid ${process.getuid()}: each tracer alternated run by run`);
const bare = async () => {
  const t0 = performance.now();
  await bareBwrap();
  return performance.now() - t0;
};
const lanes = ['bare bwrap', ...tracers];
const once = async (l) => (l === 'bare bwrap' ? bare() : (await run(l, ['/bin/true']))[0]);
for (const l of lanes) await once(l); // warm-up
const trueMs = Object.fromEntries(lanes.map((l) => [l, []]));
for (let i = 0; i < RUNS; i++) for (let j = 0; j < lanes.length; j++) trueMs[lanes[(i + j) % lanes.length]].push(await once(lanes[(i + j) % lanes.length]));
const p50 = {};
for (const l of lanes) {
  const s = summary(trueMs[l]);
  p50[l] = s.p50;
  console.log(`/bin/true, ${(l === 'bare bwrap' ? 'bare bwrap' : `runNs, ${l}`).padEnd(22)} p50 ${fmt(s.p50)} ms, p99 ${fmt(s.p99)} ms (${s.n} runs)`);
}
console.log(`/bin/true, p50: host tracer ${fmt(p50['airlock-tracer'] / p50['bare bwrap'])}x bare bwrap, strace ${fmt(p50.strace / p50['bare bwrap'])}x; strace / host tracer ${fmt(p50.strace / p50['airlock-tracer'])}x`);

const code = `for i in range(${OPENS}): open(f"/tmp/f{i}", "w").close()`;
const openMs = { 'airlock-tracer': [], strace: [] };
for (let i = 0; i < 5; i++) for (const t of i % 2 ? [...tracers].reverse() : tracers) openMs[t].push((await run(t, ['/usr/bin/python3', '-c', code]))[1]);
for (const t of tracers) {
  const s = summary(openMs[t]);
  p50[t] = s.p50;
  console.log(`${OPENS} opens in /tmp, ${t.padEnd(14)} program p50 ${fmt(s.p50, 0)} ms, ${fmt((s.p50 * 1000) / OPENS, 1)} µs per observed open (runs: ${openMs[t].map((x) => fmt(x, 0)).join(', ')})`);
}
console.log(`${OPENS} opens: strace / host tracer, p50: ${fmt(p50.strace / p50['airlock-tracer'])}x`);
rmSync(outs, { recursive: true, force: true });
