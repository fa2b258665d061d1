// A/B of the full gated run against another build, in alternating rounds inside one process (bare
// bwrap, then a full Airlock run, R times): the same-run ratio of p50s, one line per invocation.
// Alternate invocations of two checkouts from a shell loop, e.g.
//   git worktree add --detach ../airlock-old <commit> && (cd ../airlock-old && ln -s "$PWD/../<this>/node_modules" . && npm run -s build)
//   for i in 1 2 3 4 5 6; do for w in ../airlock-old .; do node bench/ab-sandbox.mjs $w 60; done; done
// AB_HELD=n holds n launchers ahead of need, as a service does (pipeline/warm.ts).
// The other checkout needs bench/airlock-run.mjs (older ones: copy this one's and drop what its API lacks).
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { bareBwrap } from './bare-bwrap.mjs';
import { fmt, inRounds, summary } from './stats.mjs';

const root = resolve(process.argv[2] ?? '.');
const R = Number(process.argv[3] ?? 60);
const { nsRun, removeWorkspace } = await import(pathToFileURL(`${root}/bench/airlock-run.mjs`).href);
const { sandboxIdle } = await import(pathToFileURL(`${root}/dist/src/sandbox/ns/runner.js`).href);
if (process.env.AB_HELD) (await import(pathToFileURL(`${root}/dist/src/sandbox/ns/held.js`).href)).keepLaunchersHeld(Number(process.env.AB_HELD));
for (let i = 0; i < 10; i++) {
  await nsRun();
  await bareBwrap();
}
await sandboxIdle();
const [rb, ra] = (await inRounds(R, [() => bareBwrap(), nsRun])).map(summary);
console.log(`${root} bare p50 ${fmt(rb.p50)} ms, full run p50 ${fmt(ra.p50)} ms, ratio ${fmt(ra.p50 / rb.p50)}x`);
await sandboxIdle();
removeWorkspace();
process.exit(0);
