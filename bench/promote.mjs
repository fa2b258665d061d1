// npm run bench:promote — the cost of diff, promote and rollback over a declared scope of 10,000
// files when 10 of them change, against the same scope with 1,000 changes. Each iteration is a real
// COMMAND_EXECUTION run through runFile (sandbox, overlay diff, judge), then promote, then rollback
// (which puts the tree back for the next iteration). Library API, one process, no CLI start-up.
// BENCH_ITER (default 7) iterations per size; with few samples p99 is the worst sample.
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { runFile } from '../dist/src/cli/run-file.js';
import { openWorkspace } from '../dist/src/workspace/workspace.js';
import { promote } from '../dist/src/commit/promote.js';
import { rollback } from '../dist/src/commit/rollback.js';
import { fmt, summary } from './stats.mjs';

const ITER = Number(process.env.BENCH_ITER ?? 7);
const FILES = 10_000;
const DIRS = 100;

mkdirSync('/var/tmp/airlock-bench', { recursive: true });
const root = mkdtempSync('/var/tmp/airlock-bench/promote-');
chmodSync(root, 0o777);
for (let d = 0; d < DIRS; d++) {
  const dir = join(root, `d${d}`);
  mkdirSync(dir, { mode: 0o777 });
  chmodSync(dir, 0o777);
  for (let f = 0; f < FILES / DIRS; f++) {
    const p = join(dir, `f${f}.txt`);
    writeFileSync(p, `file ${d}/${f}\n`);
    chmodSync(p, 0o666);
  }
}
const ws = openWorkspace(mkdtempSync(join(tmpdir(), 'airlock-bench-promote-')));
// The default policy allows no scope: this bench's tree lies under /var/tmp/airlock-bench.
writeFileSync(ws.policyFile, readFileSync(ws.policyFile, 'utf8').replace('scope_roots: []', 'scope_roots: [/var/tmp/airlock-bench]'));
const descDir = mkdtempSync(join(tmpdir(), 'airlock-bench-desc-'));

function descriptorFor(changes) {
  return {
    descriptor_version: '1.0',
    action_id: randomUUID(),
    created_at: '2026-11-22T00:00:00Z',
    created_by: 'ai',
    intent_summary: `Append a line to ${changes} files.`,
    action_type: 'COMMAND_EXECUTION',
    risk_level: 'LOW',
    scope: { filesystem: { paths: [root], recursive: true }, network: { required: false }, ui: { required: false } },
    resources: { max_cpu_ms: 60000, max_memory_mb: 512, max_disk_mb: 256, max_duration_ms: 120000 },
    preconditions: {},
    effects: { filesystem: { create: [], modify: [`${root}/d*/f*.txt`], delete: [] }, network: false, system_state_change: false },
    sandbox: { required: true, sandbox_type: 'namespace', allow_network: false, max_runs: 1 },
    rollback: { supported: true, rollback_type: 'filesystem_snapshot', rollback_scope: 'declared_effects_only' },
    confirmation: { required: false, reason: '', cooldown_on_repeat: false },
    audit: { log: true, log_level: 'SUMMARY', retain_days: 30 },
    command: ['/bin/sh', '-c', `cd ${root} && i=0; while [ $i -lt ${changes} ]; do echo more >> d$((i % ${DIRS}))/f$((i / ${DIRS})).txt; i=$((i+1)); done`],
  };
}

async function measure(changes) {
  const t = { diff: [], promote: [], rollback: [], total: [] };
  for (let i = 0; i < ITER; i++) {
    const file = join(descDir, `a-${changes}-${i}.json`);
    writeFileSync(file, JSON.stringify(descriptorFor(changes)));
    const t0 = performance.now();
    const out = await runFile(file, { workspace: ws });
    const t1 = performance.now();
    if (out.kind !== 'ran') throw new Error(`run rejected: ${JSON.stringify(out.problems)}`);
    if (out.sandboxResult.verdict.recommended_action !== 'PROMOTE') throw new Error(`verdict ${out.sandboxResult.verdict.recommended_action}: ${out.sandboxResult.verdict.reasons.join('; ')}`);
    if (out.sandboxResult.filesystem_diff.modified.length !== changes) throw new Error(`expected ${changes} modified, got ${out.sandboxResult.filesystem_diff.modified.length}`);
    const p = await promote(ws, out.sandboxId);
    const t2 = performance.now();
    if (!p.ok) throw new Error(`promote: ${JSON.stringify(p.problems)}`);
    const r = await rollback(ws, out.sandboxId);
    const t3 = performance.now();
    if (!r.ok) throw new Error(`rollback: ${JSON.stringify(r.problems)}`);
    t.diff.push(t1 - t0);
    t.promote.push(t2 - t1);
    t.rollback.push(t3 - t2);
    t.total.push(t3 - t0);
  }
  return Object.fromEntries(Object.entries(t).map(([k, v]) => [k, summary(v)]));
}

const small = await measure(10);
const large = await measure(1000);
const row = (name, s) => `${name.padEnd(10)} p50 ${fmt(s.p50, 1).padStart(8)} ms   p99 ${fmt(s.p99, 1).padStart(8)} ms`;
console.log(`scope: ${FILES} files in ${DIRS} directories; ${ITER} iterations per size (p99 = worst sample)`);
for (const [label, res] of [['10 changes', small], ['1000 changes', large]]) {
  console.log(`\n${label}`);
  for (const k of ['diff', 'promote', 'rollback', 'total']) console.log(row(k, res[k]));
}
console.log('\nper-change cost (p50, 1000 vs 10 changes):');
for (const k of ['promote', 'rollback']) {
  const fixed = small[k].p50;
  const perChange = (large[k].p50 - small[k].p50) / 990;
  console.log(`${k.padEnd(10)} ${fmt(perChange, 3)} ms per change; 10-change run ${fmt(fixed, 1)} ms (${fmt(small[k].p50 / 10, 2)} ms per change at 10)`);
}
const ratio = (k) => large[k].p50 / small[k].p50;
console.log(`\nratio 1000/10 changes (p50): diff ${fmt(ratio('diff'), 1)}x, promote ${fmt(ratio('promote'), 1)}x, rollback ${fmt(ratio('rollback'), 1)}x`);
console.log(
  ratio('promote') > 20 && small.promote.p50 < 200
    ? 'promotion and rollback follow the number of changes (a 10-change promotion over 10,000 files costs milliseconds, not a scan of the scope)'
    : 'WARNING: promotion cost does not scale with the number of changes as expected',
);
rmSync(root, { recursive: true, force: true });
rmSync(ws.root, { recursive: true, force: true });
