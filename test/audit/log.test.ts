import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import fc from 'fast-check';
import { AuditError, GENESIS_HASH, openAuditLog, verifyLines } from '../../src/audit/index.js';
import { independentHash, logWith, readLinesOf, tempLogFile } from './helpers.js';

test('append then verify: seq 1.., ts, prev chain, hash over the canonical JSON, head file', () => {
  const file = tempLogFile();
  const log = openAuditLog(file);
  const a = log.append({ type: 'validated', request_id: 'TR-20260209-160501Z-x', actor: 'airlock serve', detail: { z: 1, a: [true, null, 'x'] } });
  const b = log.append({ type: 'approved', request_id: 'TR-20260209-160501Z-x', actor: 'alice' });
  const c = log.append({ type: 'ran', action_id: 'act-1', sandbox_id: 'sb-1', detail: { exit: 0 } });
  assert.deepEqual([a.seq, b.seq, c.seq], [1, 2, 3]);
  assert.equal(a.prev, GENESIS_HASH);
  assert.equal(b.prev, a.hash);
  assert.equal(c.prev, b.hash);
  assert.match(a.ts, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
  const lines = readLinesOf(file);
  assert.equal(lines.length, 3);
  // Stored as canonical JSON (sorted keys, no whitespace), hash recomputed independently.
  assert.ok(lines[0]!.startsWith('{"actor":"airlock serve","detail":{"a":[true,null,"x"],"z":1},"hash":'));
  for (const line of lines) {
    const r = JSON.parse(line) as Record<string, unknown>;
    assert.equal(r.hash, independentHash(r));
  }
  const head = JSON.parse(readFileSync(join(dirname(file), 'audit.head.json'), 'utf8')) as Record<string, unknown>;
  assert.deepEqual({ seq: head.seq, hash: head.hash, ts: head.ts }, { seq: 3, hash: c.hash, ts: c.ts });
  assert.match(String(head.seal), /^[0-9a-f]{64}$/, 'the head is sealed');
  assert.ok(lines.every((l) => /"seal":"[0-9a-f]{64}"/.test(l)), 'every record is sealed');
  const report = log.verify();
  assert.deepEqual(report.problems, []);
  assert.equal(report.ok, true);
  assert.equal(report.records, 3);
  assert.deepEqual([report.firstSeq, report.lastSeq], [1, 3]);
});

test('a fresh log verifies as empty; verify does not create files', () => {
  const file = tempLogFile();
  const report = openAuditLog(file).verify();
  assert.equal(report.ok, true);
  assert.equal(report.records, 0);
  assert.equal(existsSync(dirname(file)), false);
});

test('invalid events are refused before anything is written', () => {
  const { file, log } = logWith(1);
  const before = readFileSync(file, 'utf8');
  const bad: unknown[] = [
    { type: 'Not Snake' },
    { type: '' },
    { type: 'ran', request_id: 'has space' },
    { type: 'ran', request_id: '' },
    { type: 'ran', actor: 'evil\u001b[2J' },
    { type: 'ran', actor: 'rtl\u202eoverride' },
    { type: 'ran', extra: 1 },
    { type: 'ran', detail: [] },
    { type: 'ran', detail: { n: NaN } },
    { type: 'ran', detail: { f: () => 1 } },
    { type: 'ran', detail: { d: new Date() } },
    { type: 'ran', detail: { b: 1n } },
    { type: 'ran', detail: JSON.parse('{"a":' + '['.repeat(40) + ']'.repeat(40) + '}') },
  ];
  for (const e of bad) {
    assert.throws(() => log.append(e as never), (err: unknown) => err instanceof AuditError && err.code === 'AUDIT_BAD_EVENT', JSON.stringify(String((e as { type: unknown }).type)));
  }
  assert.equal(readFileSync(file, 'utf8'), before);
  assert.throws(() => log.append({ type: 'ran', detail: { big: 'x'.repeat(300 * 1024) } }), (err: unknown) => err instanceof AuditError && err.code === 'AUDIT_RECORD_TOO_LARGE');
  assert.equal(log.verify().ok, true);
});

test('undefined fields are dropped like JSON.stringify does; nested detail up to the depth limit round-trips', () => {
  const { log } = logWith(0);
  const deep: Record<string, unknown> = {};
  let cur = deep;
  for (let i = 0; i < 30; i++) cur = (cur.n = {}) as Record<string, unknown>;
  const r = log.append({ type: 'ran', request_id: undefined, detail: { a: undefined, deep, s: 'ünïcode \u2028 "q"' } });
  assert.equal('request_id' in r, false);
  assert.equal(r.detail && 'a' in r.detail, false);
  assert.equal(log.verify().ok, true);
});

test('secret-looking strings in detail are redacted before they reach the log', () => {
  const { file, log } = logWith(0);
  const token = 'ghp_' + 'A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8';
  const r = log.append({ type: 'rejected', detail: { stderr: `auth with ${token}`, list: ['ok', 'password=Sup3rS3cr3t!x'] } });
  assert.match(String(r.detail?.stderr), /^\[redacted: GitHub token\]$/);
  assert.deepEqual((r.detail?.list as string[])[0], 'ok');
  assert.match((r.detail?.list as string[])[1]!, /redacted/);
  const text = readFileSync(file, 'utf8');
  assert.equal(text.includes(token), false);
  assert.equal(text.includes('Sup3rS3cr3t'), false);
  assert.equal(log.verify().ok, true);
});

test('verifyLines never throws on arbitrary file content and names lines inside the file', () => {
  fc.assert(
    fc.property(fc.oneof(fc.string(), fc.uint8Array({ maxLength: 300 }).map((a) => Buffer.from(a).toString('latin1'))), (text) => {
      const buf = Buffer.from(text, 'utf8');
      const parts = buf.toString('utf8').split('\n');
      let offset = 0;
      const lines = parts.map((p, i) => {
        const bytes = Buffer.from(p, 'utf8');
        const l = { line: i + 1, offset, bytes, terminated: i < parts.length - 1, tooLong: false };
        offset += bytes.length + 1;
        return l;
      });
      if (lines.length > 0 && lines[lines.length - 1]!.bytes.length === 0) lines.pop();
      const r = verifyLines({ file: 'x', lines, head: { state: 'missing' }, anchor: { state: 'missing' }, key: null });
      for (const p of r.problems) assert.ok(p.line >= 1 && p.line <= lines.length + 1);
      assert.equal(r.ok, r.problems.length === 0);
    }),
    { numRuns: 300 },
  );
});

test('show filters by request, action, sandbox, type and time', () => {
  let t = Date.parse('2026-01-01T00:00:00.000Z');
  const log = openAuditLog(tempLogFile(), { now: () => new Date((t += 3_600_000)) });
  log.append({ type: 'validated', request_id: 'TR-a' }); // 01:00
  log.append({ type: 'approved', request_id: 'TR-a', actor: 'alice' }); // 02:00
  log.append({ type: 'ran', request_id: 'TR-a', action_id: 'act-a', sandbox_id: 'sb-1' }); // 03:00
  log.append({ type: 'validated', request_id: 'TR-b' }); // 04:00
  log.append({ type: 'ran', request_id: 'TR-b', action_id: 'act-b', sandbox_id: 'sb-2' }); // 05:00
  const seqs = (f: Parameters<typeof log.show>[0]) => log.show(f).map((r) => r.seq);
  assert.deepEqual(seqs({}), [1, 2, 3, 4, 5]);
  assert.deepEqual(seqs({ request: 'TR-a' }), [1, 2, 3]);
  assert.deepEqual(seqs({ action: 'act-b' }), [5]);
  assert.deepEqual(seqs({ sandbox: 'sb-1' }), [3]);
  assert.deepEqual(seqs({ type: 'validated' }), [1, 4]);
  assert.deepEqual(seqs({ since: new Date('2026-01-01T02:00:00Z'), until: new Date('2026-01-01T04:00:00Z') }), [2, 3, 4]);
  assert.deepEqual(seqs({ request: 'TR-b', type: 'ran', since: new Date('2026-01-01T04:30:00Z') }), [5]);
  assert.deepEqual(seqs({ request: 'nope' }), []);
});
