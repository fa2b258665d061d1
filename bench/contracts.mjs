// npm run bench:contracts — parse+validate throughput on one core, and `airlock check` start-up
// against `node -e 0`, measured in the same run.
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { checkText } from '../dist/src/contracts/index.js';
import { fmt, summary } from './stats.mjs';

const root = new URL('../', import.meta.url).pathname;
const firstMd = (dir) => readdirSync(root + dir).filter((f) => f.endsWith('.md')).sort()[0];
const reqName = firstMd('examples/requests');
const resName = firstMd('examples/results');
const docs = {
  request: { name: reqName, text: readFileSync(`${root}examples/requests/${reqName}`, 'utf8') },
  result: { name: resName, text: readFileSync(`${root}examples/results/${resName}`, 'utf8') },
};

const BATCH = 500;
const BATCHES = 60;
for (const [label, { name, text }] of Object.entries(docs)) {
  const first = checkText(name, text);
  if (first.problems.length > 0) throw new Error(`${name} is not valid: ${JSON.stringify(first.problems)}`);
  for (let i = 0; i < 3000; i++) checkText(name, text); // warm-up: let the JIT settle
  const rates = [];
  for (let b = 0; b < BATCHES; b++) {
    const t0 = performance.now();
    for (let i = 0; i < BATCH; i++) checkText(name, text);
    rates.push((BATCH / (performance.now() - t0)) * 1000);
  }
  const s = summary(rates);
  // For a rate, the slow tail is the low percentile: report p50 and the 1st percentile as "p99".
  const p99slow = [...rates].sort((a, b) => a - b)[Math.floor(rates.length * 0.01)];
  console.log(`parse+validate ${label.padEnd(7)} (${name}): median ${fmt(s.p50, 0)} docs/s, p99 (slowest 1%) ${fmt(p99slow, 0)} docs/s  [target >= 20000 for requests]`);
}

const RUNS = 40;
const time = (argv) => {
  const t0 = performance.now();
  const r = spawnSync(argv[0], argv.slice(1), { stdio: 'ignore' });
  if (r.status === null) throw new Error(`${argv.join(' ')} did not exit`);
  return performance.now() - t0;
};
const nodeArgv = [process.execPath, '-e', '0'];
const checkArgv = [`${root}bin/airlock`, 'check', `${root}examples/requests/${reqName}`];
const a = [];
const b = [];
for (let i = 0; i < 5; i++) { time(nodeArgv); time(checkArgv); }
for (let i = 0; i < RUNS; i++) { a.push(time(nodeArgv)); b.push(time(checkArgv)); } // interleaved: same conditions
const sa = summary(a);
const sb = summary(b);
console.log(`process: node -e 0            p50 ${fmt(sa.p50)} ms  p99 ${fmt(sa.p99)} ms  (n=${RUNS})`);
console.log(`process: airlock check 1 file p50 ${fmt(sb.p50)} ms  p99 ${fmt(sb.p99)} ms  (n=${RUNS})`);
console.log(`ratio airlock check / node -e 0 (p50): ${fmt(sb.p50 / sa.p50)}x  [target <= 1.5x]`);
