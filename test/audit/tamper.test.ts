import assert from 'node:assert/strict';
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { AuditError } from '../../src/audit/index.js';
import { headSeal, readSealKey, recordSeal } from '../../src/audit/seal.js';
import { logWith, readLinesOf, rehash, summary, writeLinesTo } from './helpers.js';

const throwsCode = (fn: () => unknown, code: string) => assert.throws(fn, (e: unknown) => e instanceof AuditError && e.code === code, `expected ${code}`);

test('an edited field (hash left as it was) is AUDIT_EDITED at that line and seq, nothing else', () => {
  const { file, log } = logWith(10);
  const lines = readLinesOf(file);
  lines[3] = lines[3]!.replace('"type":"ran"', '"type":"rejected"');
  writeLinesTo(file, lines);
  assert.deepEqual(summary(log.verify().problems), [{ code: 'AUDIT_EDITED', line: 4, seq: 4 }]);
});

test('an edited and re-hashed record is caught where the next record chained to it', () => {
  const { file, log } = logWith(10);
  const lines = readLinesOf(file);
  lines[3] = rehash(lines[3]!, (r) => (r.request_id = 'TR-forged'));
  writeLinesTo(file, lines);
  // The chain names the edited record; its seal, made over the old hash, no longer verifies either.
  assert.deepEqual(summary(log.verify().problems), [
    { code: 'AUDIT_EDITED', line: 4, seq: 4 },
    { code: 'AUDIT_UNSEALED', line: 4, seq: 4 },
  ]);
});

test('the last record edited and re-hashed is caught by the head file', () => {
  const { file, log } = logWith(10);
  const lines = readLinesOf(file);
  lines[9] = rehash(lines[9]!, (r) => (r.detail = { i: 99 }));
  writeLinesTo(file, lines);
  assert.deepEqual(summary(log.verify().problems), [
    { code: 'AUDIT_EDITED', line: 10, seq: 10 },
    { code: 'AUDIT_UNSEALED', line: 10, seq: 10 },
  ]);
  throwsCode(() => log.append({ type: 'ran' }), 'AUDIT_UNSEALED');
});

test('a change that keeps the parsed value (spacing, duplicate key) is still an edit', () => {
  const { file, log } = logWith(5);
  const lines = readLinesOf(file);
  lines[1] = lines[1]!.replace('{"detail"', '{ "detail"');
  lines[2] = lines[2]!.replace('{"detail"', '{"type":"approved","detail"');
  writeLinesTo(file, lines);
  assert.deepEqual(summary(log.verify().problems), [
    { code: 'AUDIT_EDITED', line: 2, seq: 2 },
    { code: 'AUDIT_EDITED', line: 3, seq: 3 },
  ]);
});

test('a deleted line in the middle is AUDIT_REMOVED naming the missing seq', () => {
  const { file, log } = logWith(10);
  const lines = readLinesOf(file);
  lines.splice(4, 1);
  writeLinesTo(file, lines);
  const problems = log.verify().problems;
  assert.deepEqual(summary(problems), [{ code: 'AUDIT_REMOVED', line: 5, seq: 5 }]);
  assert.match(problems[0]!.message, /seq 5 is missing between seq 4 \(line 4\) and seq 6 \(line 5\)/);
});

test('deleted first lines are AUDIT_REMOVED at the start', () => {
  const { file, log } = logWith(10);
  writeLinesTo(file, readLinesOf(file).slice(2));
  const problems = log.verify().problems;
  assert.deepEqual(summary(problems), [{ code: 'AUDIT_REMOVED', line: 1, seq: 1 }]);
  assert.match(problems[0]!.message, /seqs 1\.\.2 are missing/);
});

test('two swapped lines are AUDIT_REORDERED at one of them, not a removal', () => {
  const { file, log } = logWith(10);
  const lines = readLinesOf(file);
  [lines[2], lines[3]] = [lines[3]!, lines[2]!];
  writeLinesTo(file, lines);
  const problems = summary(log.verify().problems);
  assert.equal(problems.length, 1, JSON.stringify(problems));
  assert.equal(problems[0]!.code, 'AUDIT_REORDERED');
  assert.ok([3, 4].includes(problems[0]!.line));
});

test('a record moved to the front is the one named as reordered', () => {
  const { file, log } = logWith(10);
  const lines = readLinesOf(file);
  const moved = lines.splice(7, 1);
  writeLinesTo(file, [...moved, ...lines]);
  assert.deepEqual(summary(log.verify().problems), [{ code: 'AUDIT_REORDERED', line: 1, seq: 8 }]);
});

test('a copied line is AUDIT_DUPLICATE', () => {
  const { file, log } = logWith(6);
  const lines = readLinesOf(file);
  lines.splice(4, 0, lines[1]!);
  writeLinesTo(file, lines);
  assert.deepEqual(summary(log.verify().problems), [{ code: 'AUDIT_DUPLICATE', line: 5, seq: 2 }]);
});

test('the last N lines cut off are AUDIT_TRUNCATED (the head file remembers), and appends are refused', () => {
  const { file, log } = logWith(10);
  writeLinesTo(file, readLinesOf(file).slice(0, 7));
  const problems = log.verify().problems;
  assert.deepEqual(summary(problems), [{ code: 'AUDIT_TRUNCATED', line: 8, seq: 8 }]);
  assert.match(problems[0]!.message, /seqs 8\.\.10 were cut from the end/);
  throwsCode(() => log.append({ type: 'ran' }), 'AUDIT_TRUNCATED');
  // Emptied completely: still truncated.
  writeFileSync(file, '');
  assert.deepEqual(summary(log.verify().problems), [{ code: 'AUDIT_TRUNCATED', line: 1, seq: 1 }]);
  rmSync(file);
  assert.deepEqual(summary(log.verify().problems), [{ code: 'AUDIT_TRUNCATED', line: 1, seq: 1 }]);
  throwsCode(() => log.append({ type: 'ran' }), 'AUDIT_TRUNCATED');
});

test('a deleted head file is reported and stops appends; an old head copy is a mismatch', () => {
  const { file, log } = logWith(5);
  const head = join(dirname(file), 'audit.head.json');
  const old = readFileSync(head);
  log.append({ type: 'ran' });
  log.append({ type: 'ran' });
  writeFileSync(head, old);
  assert.deepEqual(summary(log.verify().problems), [{ code: 'AUDIT_HEAD_MISMATCH', line: 7, seq: 6 }]);
  throwsCode(() => log.append({ type: 'ran' }), 'AUDIT_HEAD_MISMATCH');
  rmSync(head);
  assert.deepEqual(summary(log.verify().problems), [{ code: 'AUDIT_HEAD_MISSING', line: 8 }]);
  throwsCode(() => log.append({ type: 'ran' }), 'AUDIT_HEAD_MISSING');
  writeFileSync(head, '{not json');
  assert.deepEqual(summary(log.verify().problems), [{ code: 'AUDIT_HEAD_BAD', line: 8 }]);
});

test('a head one record behind (crash between the line and the head) is fine and catches up', () => {
  const { file, log } = logWith(5);
  const head = join(dirname(file), 'audit.head.json');
  const old = readFileSync(head);
  log.append({ type: 'ran' });
  writeFileSync(head, old);
  assert.equal(log.verify().ok, true);
  assert.equal(log.append({ type: 'ran' }).seq, 7);
  assert.equal(JSON.parse(readFileSync(head, 'utf8')).seq, 7);
  assert.equal(log.verify().ok, true);
});

test('a line that is not JSON is AUDIT_BAD_JSON there, and does not also count as a removal', () => {
  const { file, log } = logWith(8);
  const lines = readLinesOf(file);
  lines[5] = '{"seq":6,"ts":'; // a complete line, but not JSON
  lines[2] = '\u00ff\u00fe garbage';
  writeLinesTo(file, lines);
  assert.deepEqual(summary(log.verify().problems), [
    { code: 'AUDIT_BAD_JSON', line: 3 },
    { code: 'AUDIT_BAD_JSON', line: 6, seq: 6 },
  ]);
  const bytes = readFileSync(file);
  writeFileSync(file, Buffer.concat([Buffer.from([0xff, 0xfe, 0x0a]), bytes]));
  assert.ok(log.verify().problems.some((p) => p.code === 'AUDIT_BAD_JSON' && p.line === 1 && /UTF-8/.test(p.message)));
});

test('CRLF line endings are an edit of every line', () => {
  const { file, log } = logWith(3);
  writeFileSync(file, readFileSync(file, 'utf8').replace(/\n/g, '\r\n'));
  assert.deepEqual(
    summary(log.verify().problems).map((p) => p.code),
    ['AUDIT_EDITED', 'AUDIT_EDITED', 'AUDIT_EDITED'],
  );
});

test('a partial last line: verify names it, append refuses, repair quarantines it (never deletes) and the chain goes on', () => {
  const { file, log } = logWith(10);
  const intact = readFileSync(file);
  const torn = '{"actor":"airlock","detail":{"i":11},"hash":"ab';
  appendFileSync(file, torn);
  const problems = log.verify().problems;
  assert.deepEqual(summary(problems), [{ code: 'AUDIT_PARTIAL_LINE', line: 11 }]);
  assert.match(problems[0]!.message, /--repair/);
  throwsCode(() => log.append({ type: 'ran' }), 'AUDIT_PARTIAL_LINE');
  const r = log.repair();
  assert.ok(r.quarantined);
  assert.equal(readFileSync(r.quarantined.file, 'utf8'), torn);
  assert.equal(r.quarantined.bytes, Buffer.byteLength(torn));
  assert.ok(readdirSync(dirname(file)).some((n) => /^audit\.partial-.*\.jsonl$/.test(n)));
  assert.equal(r.record?.type, 'audit_repaired');
  assert.equal(r.record?.seq, 11);
  assert.equal(r.record?.detail?.moved_to, r.quarantined.file.split('/').pop());
  assert.deepEqual(r.report.problems, []);
  assert.ok(readFileSync(file).subarray(0, intact.length).equals(intact), 'the records before the torn line are untouched');
  assert.equal(log.append({ type: 'ran' }).seq, 12);
  assert.equal(log.verify().ok, true);
  // Repair with nothing to do changes nothing.
  const before = readFileSync(file);
  const again = log.repair();
  assert.equal(again.quarantined, undefined);
  assert.ok(readFileSync(file).equals(before));
});

test('a torn first record (crash on the very first append) is repaired too', () => {
  const { file, log } = logWith(0);
  mkdirSync(dirname(file), { recursive: true });
  appendFileSync(file, '{"actor":"x"');
  assert.deepEqual(summary(log.verify().problems), [{ code: 'AUDIT_PARTIAL_LINE', line: 1 }]);
  const r = log.repair();
  assert.ok(r.quarantined && existsSync(r.quarantined.file));
  assert.equal(r.record?.seq, 1);
  assert.equal(log.verify().ok, true);
});

test('repair on a log with other problems: moves the partial line, appends nothing onto the damaged chain, says why', () => {
  const { file, log } = logWith(6);
  writeLinesTo(file, readLinesOf(file).slice(0, 4));
  appendFileSync(file, '{"partial');
  const r = log.repair();
  assert.ok(r.quarantined);
  assert.equal(r.record, undefined);
  assert.match(r.recordError ?? '', /AUDIT_TRUNCATED/);
  assert.deepEqual(summary(r.report.problems), [{ code: 'AUDIT_TRUNCATED', line: 5, seq: 5 }]);
});

test('a record appended by hand, correctly hashed and chained (head file untouched), is caught, and never sealed in by the next append', () => {
  // Before seals, the "head one record behind means a crash" allowance accepted this, and the next
  // real append made it part of the chain for good.
  const { file, log } = logWith(4);
  const lines = readLinesOf(file);
  const last = JSON.parse(lines[3]!) as { seq: number; hash: string; ts: string };
  const forged = rehash(JSON.stringify({ seq: last.seq + 1, ts: last.ts, type: 'approved', actor: 'alice', request_id: 'TR-forged', prev: last.hash, hash: '' }), () => undefined);
  writeLinesTo(file, [...lines, forged]);
  assert.deepEqual(summary(log.verify().problems), [{ code: 'AUDIT_UNSEALED', line: 5, seq: 5 }]);
  throwsCode(() => log.append({ type: 'ran' }), 'AUDIT_UNSEALED');
  assert.equal(readLinesOf(file).length, 5, 'nothing was appended after it');
});

test('a whole log and head rewritten consistently without the host key is caught by the seals', () => {
  const { file, log } = logWith(5);
  const lines = readLinesOf(file);
  let prev = '0'.repeat(64);
  const forged = lines.map((l) => {
    const out = rehash(l, (r) => {
      r.prev = prev;
      if (r.seq === 3) r.type = 'approved';
    });
    prev = (JSON.parse(out) as { hash: string }).hash;
    return out;
  });
  writeLinesTo(file, forged);
  const end = JSON.parse(forged[4]!) as { seq: number; hash: string; ts: string };
  writeFileSync(join(dirname(file), 'audit.head.json'), JSON.stringify({ seq: end.seq, hash: end.hash, ts: end.ts }));
  const codes = log.verify().problems.map((p) => p.code);
  assert.ok(codes.length > 0 && codes.every((c) => c === 'AUDIT_UNSEALED'), codes.join(', '));
});

test('LIMIT (documented): whoever can read the host seal key can rewrite the whole log consistently', () => {
  // The key is outside the workspace (docs/audit.md): someone who has it (root, or the key's owner)
  // can re-seal a rewritten log. The test pins that limitation down honestly.
  const keyFile = join(mkdtempSync(join(tmpdir(), 'airlock-seal-')), 'k');
  const { file, log } = logWith(5, { sealKeyFile: keyFile });
  const key = readSealKey(keyFile)!;
  const lines = readLinesOf(file);
  let prev = '0'.repeat(64);
  const forged = lines.map((l) => {
    const out = rehash(l, (r) => {
      r.prev = prev;
      delete r.seal;
      if (r.seq === 3) r.type = 'approved';
    });
    const r = JSON.parse(out) as Record<string, unknown>;
    r.seal = recordSeal(key, r.hash as string);
    prev = r.hash as string;
    return rehash(JSON.stringify(r), () => undefined);
  });
  writeLinesTo(file, forged);
  const end = JSON.parse(forged[4]!) as { seq: number; hash: string; ts: string };
  writeFileSync(join(dirname(file), 'audit.head.json'), JSON.stringify({ seq: end.seq, hash: end.hash, ts: end.ts, seal: headSeal(key, end.seq, end.hash), key_id: key.id }));
  assert.deepEqual(log.verify().problems, []);
});

test('a log file that cannot be read is AUDIT_UNREADABLE', () => {
  const { file, log } = logWith(2);
  rmSync(file);
  // A directory where the log should be: open works, read fails (EISDIR), as an I/O error would.
  mkdirSync(file);
  assert.deepEqual(summary(log.verify().problems), [{ code: 'AUDIT_UNREADABLE', line: 1 }]);
});
