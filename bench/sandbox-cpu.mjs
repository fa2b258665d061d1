// npm run bench:sandbox-cpu — where a sandbox run's CPU goes, over the whole machine.
// For each case, BENCH_CPU_RUNS runs (default 300) with BENCH_PAR in flight (default 2): runs/s, the
// machine's CPU per run from /proc/stat (user, system), the idle share, and this Node process's own
// CPU per run (the rest is bwrap and the program, the host tracer, the perl helper, kernel workers).
//   runner          runNs of /bin/true (no declared scope)
//   runner+scope    the same with one declared scope (a host overlay per run)
//   full            a full Airlock run (bench/sandbox-fixtures.mjs: validate, sandbox, observe, judge, render)
// Cases can be picked: `node bench/sandbox-cpu.mjs runner full`.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { actionFromDescriptor } from '../dist/src/action/from-action-descriptor.js';
import { checkText } from '../dist/src/contracts/index.js';
import { runAction } from '../dist/src/pipeline/run.js';
import * as runner from '../dist/src/sandbox/ns/runner.js';
import { openWorkspace } from '../dist/src/workspace/workspace.js';
import { descriptor, SCOPE_DIR } from './sandbox-fixtures.mjs';

const N = Number(process.env.BENCH_CPU_RUNS ?? 300);
const P = Number(process.env.BENCH_PAR ?? 2);
const LIMITS = { wallMs: 5000, cpuMs: 3000, memoryBytes: 256 << 20, pids: 64, outBytes: 1 << 20, tmpBytes: 4 << 20, files: 10_000, stdoutBytes: 64 << 10, stderrBytes: 64 << 10 };
const TICK_MS = 10; // /proc clock ticks are 1/100 s

const scratch = mkdtempSync(join(tmpdir(), 'airlock-bench-cpu-'));
const ws = openWorkspace(join(scratch, 'ws'));
const inputsDir = mkdtempSync(join(scratch, 'in-'));
let k = 0;
const ns = (scopes) => async () => {
  const o = await runner.runNs({ argv: ['/bin/true'], outDir: join(scratch, `out${k++}`), limits: LIMITS, scopes });
  if (o.status !== 'SUCCESS') throw new Error(`runNs: ${o.status} ${o.reason}`);
};
const full = async () => {
  const checked = checkText('bench.json', descriptor);
  const r = await runAction(actionFromDescriptor(checked.value), { workspace: ws, inputsDir, scopeRoots: ['/var/tmp/airlock-bench'] });
  if (r.kind !== 'ran') throw new Error(JSON.stringify(r.problems));
  // Its folder stays until the bench ends (bench/airlock-run.mjs says why).
};
const cases = { runner: ns([]), 'runner+scope': ns([{ hostPath: SCOPE_DIR }]), full };

const machine = () => readFileSync('/proc/stat', 'utf8').split('\n')[0].split(/\s+/).slice(1).map(Number); // user nice system idle iowait irq softirq
const picked = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(cases);
console.log(`${N} runs of /bin/true per case, ${P} in flight`);
for (const name of picked) {
  const fn = cases[name];
  if (!fn) throw new Error(`unknown case ${name} (${Object.keys(cases).join(', ')})`);
  for (let i = 0; i < 20; i++) await fn(); // warm-up: doctor, /etc copy, tracer, JIT
  await runner.sandboxIdle();
  const c0 = process.cpuUsage();
  const m0 = machine();
  const t0 = performance.now();
  let next = 0;
  await Promise.all(Array.from({ length: P }, async () => { while (next++ < N) await fn(); }));
  const seconds = (performance.now() - t0) / 1000;
  await runner.sandboxIdle();
  const m1 = machine();
  const node = process.cpuUsage(c0);
  const d = m1.map((x, i) => x - m0[i]);
  const busy = d[0] + d[1] + d[2] + d[5] + d[6];
  const per = (ticks) => ((ticks * TICK_MS) / N).toFixed(2);
  console.log(`${name.padEnd(13)} ${(N / seconds).toFixed(1).padStart(6)} runs/s  machine CPU/run ${per(busy)} ms (user ${per(d[0] + d[1])}, system ${per(d[2] + d[5] + d[6])})  idle ${(d[3] / (busy + d[3] + d[4])).toFixed(2)}`);
  console.log(`  of which this Node process ${((node.user + node.system) / 1000 / N).toFixed(2)} ms (user ${(node.user / 1000 / N).toFixed(2)}, system ${(node.system / 1000 / N).toFixed(2)})`);
}
rmSync(scratch, { recursive: true, force: true });
process.exit(0);
