// npm run bench:monty — the Monty (lite) lane in service mode: one process with a warm pool of
// sandboxed workers (bwrap, seccomp, cgroup, uid nobody when root), a trivial program (`1 + 1`):
//   * p50/p99 of the lane function (runInMontyLane) and of a full Airlock run (runAction: validate,
//     sandbox, observe, judge, render, files written), sequential;
//   * the ns lane's p50 (a full run of /bin/true) in the same process, and the ratio;
//   * throughput: runs/s with the pool's workers all busy (the lane function, then full runs), full
//     runs with the workspace on TMPDIR's disk and in memory (/dev/shm) in alternated blocks: a full
//     run makes two new inodes in the workspace, and what that costs depends on the disk (its state
//     is printed first: src/workspace/disk.ts); the first 1,000 full runs and the last half of
//     BENCH_TPUT_RUNS (default 6,000) apart, as a process keeps getting faster for thousands of runs.
// Environment: BENCH_RUNS (sequential runs, default 1000), BENCH_NS_RUNS (default 100),
// BENCH_POOL (warm workers, default 2), BENCH_PARALLEL (runs in flight, default BENCH_POOL),
// BENCH_MAX_RUNS (runs per worker before it is replaced, default the pool's), BENCH_TPUT_RUNS.
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkText } from '../dist/src/contracts/index.js';
import { actionFromDescriptor } from '../dist/src/action/from-action-descriptor.js';
import { actionFromToolRequest } from '../dist/src/action/from-tool-request.js';
import { runAction } from '../dist/src/pipeline/run.js';
import { keepRunFoldersReady } from '../dist/src/pipeline/run-folder.js';
import { runInMontyLane } from '../dist/src/sandbox/lanes/monty.js';
import { closeMontyPools, configureMontyPools, montyPool } from '../dist/src/sandbox/lanes/monty-pool.js';
import { montyWorkerPath } from '../dist/src/sandbox/lanes/monty.js';
import { openWorkspace } from '../dist/src/workspace/workspace.js';
import { workspaceDisk } from '../dist/src/workspace/disk.js';
import { descriptor, montyRequest } from './sandbox-fixtures.mjs';
import { diskNote, fmt, timeEach } from './stats.mjs';

const N = Number(process.env.BENCH_RUNS ?? 1000);
const NS = Number(process.env.BENCH_NS_RUNS ?? 100);
const POOL = Number(process.env.BENCH_POOL ?? 2);
const PAR = Number(process.env.BENCH_PARALLEL ?? POOL);
const opts = configureMontyPools({ min: POOL, max: Math.max(POOL, PAR), ...(process.env.BENCH_MAX_RUNS ? { maxRunsPerWorker: Number(process.env.BENCH_MAX_RUNS) } : {}) });
const ws = openWorkspace(mkdtempSync(join(tmpdir(), 'airlock-bench-monty-')));
// The same runs with the workspace in memory, when /dev/shm is a tmpfs: what the disk takes from a full run.
const memWs = workspaceDisk('/dev/shm').fsType === 'tmpfs' ? openWorkspace(mkdtempSync('/dev/shm/airlock-bench-monty-')) : null;
const inputsDir = mkdtempSync(join(tmpdir(), 'airlock-bench-in-'));
const outBase = mkdtempSync(join(tmpdir(), 'airlock-bench-out-'));
const load = () => loadavg().map((x) => x.toFixed(2)).join(' ');
console.log(`load average at start: ${load()} (2-core VM shared with other sessions: figures vary from minute to minute)`);
console.log(await diskNote(ws.root));

const checkedMonty = checkText('TR-20261122-000000Z-bench-monty.md', montyRequest);
if (checkedMonty.problems.length) throw new Error(JSON.stringify(checkedMonty.problems));
const montyAction = actionFromToolRequest(checkedMonty.value);

async function full(text, name, from, workspace = ws) {
  const checked = checkText(name, text);
  if (checked.problems.length) throw new Error(JSON.stringify(checked.problems));
  const r = await runAction(from(checked.value), { workspace, inputsDir, scopeRoots: ['/var/tmp/airlock-bench'] });
  if (r.kind !== 'ran') throw new Error(JSON.stringify(r.problems));
  // Its folder stays until the bench ends: on an ext4 without a journal, every deletion makes the
  // next new inodes dearer for minutes, which a service (it deletes nothing per run) never pays.
  return r;
}
const montyFull = () => full(montyRequest, 'TR-20261122-000000Z-bench-monty.md', actionFromToolRequest);
const montyFullInMemory = () => full(montyRequest, 'TR-20261122-000000Z-bench-monty.md', actionFromToolRequest, memWs);
const nsFull = () => full(descriptor, 'bench.json', actionFromDescriptor);
let outN = 0;
/** The lane function alone: what a service calls between its own request handling and the judge. */
async function montyLane() {
  const outDir = join(outBase, String(++outN));
  const r = await runInMontyLane(montyAction, { inputsDir, outDir });
  if (r.observation.status !== 'SUCCESS') throw new Error(r.observation.reason);
  return { cleanup: () => rmSync(outDir, { recursive: true, force: true }) };
}

/** Runs/s of `fn` with `par` runs in flight, `n` runs in all (cleanups, if any, after the clock stops). */
async function throughput(fn, n, par) {
  const done = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: par }, async () => { while (next++ < n) done.push(await fn()); }));
  const rate = (n / (performance.now() - t0)) * 1000;
  for (const r of done) r?.cleanup?.();
  return rate;
}

// Warm up: the pool's workers, the ns lane's host tracer and staging, JIT.
const pool = montyPool(montyWorkerPath());
pool.warm();
keepRunFoldersReady(true); // a service's run folders, made ahead (pipeline/warm.ts)
const first = await montyFull();
console.log(`check: monty run -> ${first.sandboxResult.execution.status}, verdict ${first.sandboxResult.verdict.recommended_action}; worker sandbox: ${first.observation.monty.isolation.sandbox ? `bwrap ${first.observation.host.bwrapVersion}, host uid ${first.observation.host.hostUid}, seccomp, cgroup v${first.observation.host.cgroupVersion}` : 'NONE'}`);
for (let i = 0; i < 200; i++) (await montyLane()).cleanup();
for (let i = 0; i < 10; i++) await nsFull();
for (let i = 0; i < 50; i++) await montyFull();
console.log(`pool: min ${opts.min}, max ${opts.max}, ${opts.maxRunsPerWorker} runs per worker; workers ${JSON.stringify(pool.stats().map((s) => s.state))}`);

const lane = await timeEach(montyLane, N);
const mFull = await timeEach(montyFull, N);
const ns = await timeEach(nsFull, NS);
console.log(`monty lane function, trivial program   p50 ${fmt(lane.p50, 3)} ms  p99 ${fmt(lane.p99, 3)} ms  (n=${N})`);
console.log(`monty full run (runAction)              p50 ${fmt(mFull.p50, 3)} ms  p99 ${fmt(mFull.p99, 3)} ms  (n=${N})  [target p50 <= 2 ms]`);
console.log(`ns full run of /bin/true (runAction)    p50 ${fmt(ns.p50, 3)} ms  p99 ${fmt(ns.p99, 3)} ms  (n=${NS})`);
console.log(`ratio p50 monty full / ns full: ${fmt(mFull.p50 / ns.p50, 3)}  (1/${fmt(ns.p50 / mFull.p50, 1)})  [target <= 0.1]; lane function / ns full: ${fmt(lane.p50 / ns.p50, 3)}`);
const tLane = await throughput(montyLane, Math.max(N, 2000), PAR);
// Full runs on the disk and in memory in alternated blocks of 500. A service's process keeps getting
// cheaper per run for its first several thousand runs (V8 still optimising, its heap still sizing
// itself), so the blocks go on to BENCH_TPUT_RUNS per workspace and both the first 1,000 and the
// last half are printed: a service spends its life in the second.
const TPUT = Number(process.env.BENCH_TPUT_RUNS ?? 6000);
const blocks = { disk: [], memory: [] };
for (let b = 0; b < TPUT / 500; b++) {
  blocks.disk.push(await throughput(montyFull, 500, PAR));
  if (memWs) blocks.memory.push(await throughput(montyFullInMemory, 500, PAR));
}
const rate = (xs) => xs.length / xs.reduce((a, r) => a + 1 / r, 0); // runs/s over blocks of equal runs
const early = (xs) => rate(xs.slice(0, 2));
const steady = (xs) => rate(xs.slice(Math.floor(xs.length / 2)));
console.log(`throughput, ${PAR} in flight on ${POOL} warm workers: lane function ${fmt(tLane, 0)} runs/s; full runs, first 1,000 of ${TPUT}: ${fmt(early(blocks.disk), 0)} runs/s, last ${TPUT / 2}: ${fmt(steady(blocks.disk), 0)} runs/s  [target >= 1000 runs/s]`);
if (memWs) console.log(`  full runs with the workspace in memory (/dev/shm), blocks alternated with the above: first 1,000 ${fmt(early(blocks.memory), 0)} runs/s, last ${TPUT / 2} ${fmt(steady(blocks.memory), 0)} runs/s`);
console.log(`  blocks of 500 in order, disk: ${blocks.disk.map((r) => fmt(r, 0)).join(' ')}${memWs ? `; memory: ${blocks.memory.map((r) => fmt(r, 0)).join(' ')}` : ''}`);
console.log(`load average at end: ${load()}`);
await closeMontyPools();
rmSync(ws.root, { recursive: true, force: true });
if (memWs) rmSync(memWs.root, { recursive: true, force: true });
rmSync(outBase, { recursive: true, force: true });
rmSync(inputsDir, { recursive: true, force: true });
