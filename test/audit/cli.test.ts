import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { appendFileSync, mkdtempSync, readdirSync, rmSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { openAuditLog, type AuditRecord, type VerifyReport } from '../../src/audit/index.js';
import { readLinesOf, writeLinesTo } from './helpers.js';

const harness = join(dirname(fileURLToPath(import.meta.url)), 'cli-harness.js');
const airlockAudit = (args: string[], env: NodeJS.ProcessEnv = {}) => {
  const r = spawnSync(process.execPath, [harness, 'audit', ...args], { encoding: 'utf8', env: { ...process.env, ...env } });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
};

function workspace() {
  const ws = mkdtempSync(join(tmpdir(), 'airlock-ws-'));
  const file = join(ws, 'audit', 'audit.jsonl');
  let t = Date.parse('2026-02-09T10:00:00.000Z');
  const log = openAuditLog(file, { now: () => new Date((t += 60_000)) });
  log.append({ type: 'validated', request_id: 'TR-1' });
  log.append({ type: 'approved', request_id: 'TR-1', actor: 'alice' });
  log.append({ type: 'ran', request_id: 'TR-1', action_id: 'act-1', sandbox_id: 'sb-1', detail: { note: 'esc \u001b[31m red \u009b' } });
  log.append({ type: 'validated', request_id: 'TR-2' });
  return { ws, file, log };
}

test('audit verify: exit 0 and a one-line summary when intact; --workspace and AIRLOCK_HOME both work', () => {
  const { ws } = workspace();
  const r = airlockAudit(['verify', '--workspace', ws]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /intact, 4 records \(seq 1\.\.4\)/);
  const viaEnv = airlockAudit(['verify', '--json'], { AIRLOCK_HOME: ws });
  assert.equal(viaEnv.code, 0);
  const report = JSON.parse(viaEnv.stdout) as VerifyReport;
  assert.equal(report.ok, true);
  assert.equal(report.records, 4);
});

test('audit verify: exit 2 naming line, seq and code when edited; --json carries the problems', () => {
  const { ws, file } = workspace();
  const lines = readLinesOf(file);
  lines[1] = lines[1]!.replace('alice', 'mallory');
  writeLinesTo(file, lines);
  const r = airlockAudit(['verify', '--workspace', ws]);
  assert.equal(r.code, 2);
  assert.match(r.stdout, /line 2 seq 2 {2}AUDIT_EDITED/);
  const j = airlockAudit(['verify', '--workspace', ws, '--json']);
  assert.equal(j.code, 2);
  assert.deepEqual((JSON.parse(j.stdout) as VerifyReport).problems.map((p) => [p.code, p.line, p.seq]), [['AUDIT_EDITED', 2, 2]]);
});

test('audit verify: exit 3 when the log is unreadable, 2 when the workspace does not exist; empty workspace is exit 0', () => {
  const { ws, file } = workspace();
  rmSync(file);
  mkdirSync(file);
  const r = airlockAudit(['verify', '--workspace', ws]);
  assert.equal(r.code, 3);
  assert.match(r.stdout, /AUDIT_UNREADABLE/);
  const none = airlockAudit(['verify', '--workspace', join(ws, 'nope')]);
  assert.equal(none.code, 2);
  assert.match(none.stderr, /no workspace at/);
  const empty = mkdtempSync(join(tmpdir(), 'airlock-ws-'));
  const e = airlockAudit(['verify', '--workspace', empty]);
  assert.equal(e.code, 0);
  assert.match(e.stdout, /no records yet/);
});

test('audit verify --repair moves a partial last line to a quarantine file and exits 0', () => {
  const { ws, file } = workspace();
  appendFileSync(file, '{"actor":"torn');
  assert.equal(airlockAudit(['verify', '--workspace', ws]).code, 2);
  const r = airlockAudit(['verify', '--workspace', ws, '--repair']);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stderr, /moved an incomplete last record \(14 bytes/);
  assert.ok(readdirSync(dirname(file)).some((n) => n.startsWith('audit.partial-')));
});

test('audit show: filters, text output is terminal-safe, --json is the records; a bad --since is a usage error (2)', () => {
  const { ws } = workspace();
  const all = airlockAudit(['show', '--workspace', ws]);
  assert.equal(all.code, 0);
  assert.equal(all.stdout.trim().split('\n').length, 4);
  assert.equal(all.stdout.includes('\u001b') || all.stdout.includes('\u009b'), false, 'control characters are escaped');
  assert.ok(all.stdout.includes('\\u001b'), 'shown as an escape instead');
  const req = JSON.parse(airlockAudit(['show', '--workspace', ws, '--request', 'TR-1', '--json']).stdout) as AuditRecord[];
  assert.deepEqual(req.map((r) => r.seq), [1, 2, 3]);
  const act = JSON.parse(airlockAudit(['show', '--workspace', ws, '--action', 'act-1', '--json']).stdout) as AuditRecord[];
  assert.deepEqual(act.map((r) => r.seq), [3]);
  const sb = JSON.parse(airlockAudit(['show', '--workspace', ws, '--sandbox', 'sb-1', '--json']).stdout) as AuditRecord[];
  assert.deepEqual(sb.map((r) => r.seq), [3]);
  const timed = JSON.parse(airlockAudit(['show', '--workspace', ws, '--since', '2026-02-09T10:02:00Z', '--until', '2026-02-09T10:03:00.000Z', '--json']).stdout) as AuditRecord[];
  assert.deepEqual(timed.map((r) => r.seq), [2, 3]);
  const typed = airlockAudit(['show', '--workspace', ws, '--type', 'approved']);
  assert.match(typed.stdout, /^#2 2026-02-09T10:02:00\.000Z approved request=TR-1 actor="alice"\n$/);
  assert.match(airlockAudit(['show', '--workspace', ws, '--request', 'none']).stdout, /no matching records/);
  const bad = airlockAudit(['show', '--workspace', ws, '--since', 'yesterday']);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /ISO date/);
});
