import assert from 'node:assert/strict';
import { copyFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { AuditError, openAuditLog } from '../../src/audit/index.js';
import { readLinesOf, summary, tempLogFile, writeLinesTo } from './helpers.js';

const DAY = 86_400_000;
const T0 = Date.parse('2026-01-01T00:00:00.000Z');

/** A log whose clock the test moves: 10 records on day 0, 5 on day 40. */
function agedLog() {
  let now = T0;
  const file = tempLogFile();
  const log = openAuditLog(file, { now: () => new Date(now) });
  for (let i = 1; i <= 10; i++) log.append({ type: 'ran', request_id: `TR-old-${i}` });
  now = T0 + 40 * DAY;
  for (let i = 1; i <= 5; i++) log.append({ type: 'ran', request_id: `TR-new-${i}` });
  return { file, log, setNow: (t: number) => (now = t) };
}

test('prune removes the records older than the retention from the start, anchors the chain, records itself', () => {
  const { file, log } = agedLog();
  const before = readLinesOf(file);
  const r = log.prune(30);
  assert.equal(r.pruned, 10);
  assert.deepEqual([r.fromSeq, r.toSeq], [1, 10]);
  assert.equal(r.record?.type, 'pruned');
  assert.equal(r.record?.seq, 16);
  assert.deepEqual(r.record?.detail, {
    from_seq: 1,
    to_seq: 10,
    to_hash: JSON.parse(before[9]!).hash,
    count: 10,
    oldest_ts: JSON.parse(before[0]!).ts,
    newest_ts: JSON.parse(before[9]!).ts,
    older_than_days: 30,
    cutoff: new Date(T0 + 10 * DAY).toISOString(),
  });
  const lines = readLinesOf(file);
  assert.deepEqual(lines.slice(0, 5), before.slice(10), 'the kept records are byte for byte the same');
  assert.equal(lines.length, 6);
  const anchor = JSON.parse(readFileSync(join(dirname(file), 'audit.anchor.json'), 'utf8'));
  assert.deepEqual({ seq: anchor.seq, count: anchor.count, total: anchor.pruned_total, previous: anchor.previous }, { seq: 10, count: 10, total: 10, previous: null });
  const report = log.verify();
  assert.deepEqual(report.problems, []);
  assert.deepEqual([report.records, report.firstSeq, report.lastSeq, report.anchor?.seq, report.anchor?.pruned_total], [6, 11, 16, 10, 10]);
  // The chain continues.
  assert.equal(log.append({ type: 'ran' }).seq, 17);
  assert.equal(log.verify().ok, true);
  // Nothing old enough: nothing happens.
  assert.deepEqual(log.prune(30), { pruned: 0 });
});

test('a second prune anchors on the first, and pruned_total adds up', () => {
  const { log, setNow } = agedLog();
  log.prune(30);
  setNow(T0 + 100 * DAY);
  log.append({ type: 'ran' }); // seq 17, day 100
  const r = log.prune(30); // seqs 11..16 (day 40) go, the first `pruned` record among them
  assert.equal(r.pruned, 6);
  assert.deepEqual(r.anchor?.previous, { seq: 10, hash: r.anchor?.previous?.hash });
  assert.equal(r.anchor?.pruned_total, 16);
  const report = log.verify();
  assert.deepEqual(report.problems, []);
  assert.deepEqual([report.firstSeq, report.lastSeq], [17, 18]);
});

test('pruning everything leaves only the pruned record, and the chain still continues', () => {
  const { log, setNow } = agedLog();
  setNow(T0 + 41 * DAY);
  const r = log.prune(0);
  assert.equal(r.pruned, 15);
  assert.equal(log.verify().ok, true);
  assert.equal(log.append({ type: 'ran' }).seq, 17);
  assert.equal(log.verify().ok, true);
});

test('tampering after a prune is still caught; cutting the start by hand with a forged anchor is AUDIT_ANCHOR_UNRECORDED', () => {
  const { file, log } = agedLog();
  log.prune(30);
  const lines = readLinesOf(file);
  writeLinesTo(file, lines.slice(1));
  assert.deepEqual(summary(log.verify().problems), [{ code: 'AUDIT_REMOVED', line: 1, seq: 11 }]);
  writeLinesTo(file, lines);
  assert.equal(log.verify().ok, true);

  // A fresh log, no prune: drop 3 records and write the anchor a prune would have written.
  const other = agedLog();
  const all = readLinesOf(other.file);
  const cut = JSON.parse(all[2]!);
  writeLinesTo(other.file, all.slice(3));
  writeFileSync(join(dirname(other.file), 'audit.anchor.json'), JSON.stringify({ seq: 3, hash: cut.hash, ts: cut.ts, count: 3, pruned_total: 3, pruned_at: cut.ts, previous: null }));
  assert.deepEqual(summary(other.log.verify().problems), [{ code: 'AUDIT_ANCHOR_UNRECORDED', line: 1 }]);
  // A damaged anchor file.
  writeFileSync(join(dirname(other.file), 'audit.anchor.json'), '[]');
  assert.ok(other.log.verify().problems.some((p) => p.code === 'AUDIT_ANCHOR_BAD'));
});

test('prune refuses a damaged log (it would destroy the evidence)', () => {
  const { file, log } = agedLog();
  const lines = readLinesOf(file);
  lines[2] = lines[2]!.replace('TR-old-3', 'TR-old-X');
  writeLinesTo(file, lines);
  assert.throws(() => log.prune(30), (e: unknown) => e instanceof AuditError && e.code === 'AUDIT_PRUNE_REFUSED' && e.problems.length === 1);
  assert.deepEqual(readLinesOf(file), lines);
  assert.throws(() => log.prune(-1), (e: unknown) => e instanceof AuditError && e.code === 'AUDIT_BAD_ARGUMENT');
  assert.throws(() => log.prune(NaN), (e: unknown) => e instanceof AuditError && e.code === 'AUDIT_BAD_ARGUMENT');
});

test('a prune killed after writing its anchor (old log still in place) verifies, and the next prune completes it', () => {
  const { file, log, setNow } = agedLog();
  const dir = dirname(file);
  copyFileSync(file, file + '.old');
  copyFileSync(join(dir, 'audit.head.json'), file + '.oldhead');
  log.prune(30);
  // Simulate the crash between step 2 (anchor) and step 3 (rename): the old log and head are back.
  copyFileSync(file + '.old', file);
  copyFileSync(file + '.oldhead', join(dir, 'audit.head.json'));
  writeFileSync(join(dir, 'audit.prune-tmp.jsonl'), 'left behind');
  assert.deepEqual(log.verify().problems, []);
  assert.equal(log.append({ type: 'ran' }).seq, 16);
  setNow(T0 + 41 * DAY);
  const r = log.prune(1000); // retention longer than any record: it still finishes the pending prune
  assert.equal(r.pruned, 10);
  assert.equal(r.anchor?.pruned_total, 10);
  assert.equal(r.anchor?.previous, null);
  assert.equal(existsSync(join(dir, 'audit.prune-tmp.jsonl')), false);
  const report = log.verify();
  assert.deepEqual(report.problems, []);
  assert.deepEqual([report.firstSeq, report.lastSeq], [11, 17]);
});
