// A/B of two builds' full Monty runs (a Tool Request whose program is `1 + 1`) inside one process, as
// a busy service gets them: back to back, each build with its own warm pool (2 workers, 500 runs each)
// and its run folders made ahead. The builds take turns in blocks of BLOCK runs, ROUNDS times (each
// order half the time), so the machine's drift hits both alike; removing the runs' folders waits for
// the end. Prints p50 / p90 / p99 and this process's CPU per run of each.
//   node bench/ab-monty.mjs <checkout A> <checkout B>     (BLOCK=100 ROUNDS=20 by default)
// Each checkout needs its dist/ built and bench/airlock-run.mjs (git worktree add, as in ab-sandbox.mjs).
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { fmt, percentile } from './stats.mjs';

const roots = process.argv.slice(2, 4).map((r) => resolve(r));
if (roots.length !== 2) throw new Error('usage: node bench/ab-monty.mjs <checkout A> <checkout B>');
const BLOCK = Number(process.env.BLOCK ?? 100);
const ROUNDS = Number(process.env.ROUNDS ?? 20);
const load = async (root, path) => import(pathToFileURL(`${root}/${path}`).href);

const builds = [];
for (const root of roots) {
  const { montyRun, removeWorkspace } = await load(root, 'bench/airlock-run.mjs');
  const { keepRunFoldersReady } = await load(root, 'dist/src/pipeline/run-folder.js');
  const { configureMontyPools, closeMontyPools, montyPool } = await load(root, 'dist/src/sandbox/lanes/monty-pool.js');
  const { montyWorkerPath } = await load(root, 'dist/src/sandbox/lanes/monty.js');
  configureMontyPools({ min: 2, max: 2 });
  montyPool(montyWorkerPath()).warm();
  keepRunFoldersReady(true);
  builds.push({ root, montyRun, removeWorkspace, closeMontyPools, keepRunFoldersReady, ms: [], cpuMs: 0 });
}
for (const b of builds) for (let i = 0; i < 200; i++) await b.montyRun(); // warm-up
for (let r = 0; r < ROUNDS; r++) {
  for (const b of r % 2 ? [...builds].reverse() : builds) {
    const c0 = process.cpuUsage();
    for (let i = 0; i < BLOCK; i++) {
      const t0 = performance.now();
      await b.montyRun();
      b.ms.push(performance.now() - t0);
    }
    const c = process.cpuUsage(c0);
    b.cpuMs += (c.user + c.system) / 1000;
    await sleep(20);
  }
}
for (const b of builds) {
  const s = [...b.ms].sort((x, y) => x - y);
  console.log(`${b.root}: full Monty run p50 ${fmt(percentile(s, 50), 3)} ms, p90 ${fmt(percentile(s, 90), 3)}, p99 ${fmt(percentile(s, 99), 3)}, this process's CPU ${fmt(b.cpuMs / b.ms.length, 3)} ms/run (n=${b.ms.length})`);
}
for (const b of builds) {
  b.keepRunFoldersReady(false);
  await b.closeMontyPools();
  b.removeWorkspace();
}
