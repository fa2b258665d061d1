// Issue 18: one host core for every door. An execution through each door (airlock run of a Tool
// Request and of an Action Descriptor, the folder gate, a UTP call) leaves exactly one `executed`
// audit record naming its door and its decision's source, a run record, and a log that verifies;
// a deleted policy.yaml makes every door refuse. Real CLI processes, real NATS, real sandbox.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { readRunRecord } from '../../src/host/record.js';
import { callTool } from '../../src/utp/client.js';
import { airlock } from '../helpers/cli.js';
import { descriptor } from '../helpers/descriptors.js';
import { writeRequest } from '../helpers/requests.js';
import { scopedWorkspace, testScopeDir } from '../helpers/workspace.js';
import { startHarness, type Harness } from '../utp/harness.js';

interface Rec {
  type: string;
  request_id?: string;
  action_id?: string;
  sandbox_id?: string;
  detail?: Record<string, unknown>;
}
const records = (ws: string): Rec[] => {
  const f = join(ws, 'audit', 'audit.jsonl');
  return existsSync(f) ? readFileSync(f, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Rec) : [];
};
const executed = (ws: string) => records(ws).filter((r) => r.type === 'executed');
const verified = (ws: string) => {
  const v = airlock(['audit', 'verify', '--workspace', ws]);
  assert.equal(v.code, 0, v.stdout + v.stderr);
};
const hello = { slug: 'hello', command: 'python3 hello.py', inputs: { 'hello.py': 'print("hello")\n' } };

let h: Harness;
before(async () => {
  h = await startHarness({ db: 'sqlite' });
});
after(async () => {
  await h?.stop();
});

test('airlock run of a Tool Request: one executed record (door cli, the person at the terminal), a run record, the log verifies', () => {
  const ws = scopedWorkspace().root;
  const req = writeRequest(hello);
  const r = airlock(['run', req.file, '--workspace', ws, '--json'], { env: { USER: 'carol' } });
  assert.equal(r.code, 0, r.stderr);
  const sbx = (JSON.parse(r.stdout) as { sandbox_id: string }).sandbox_id;
  const ex = executed(ws);
  assert.equal(ex.length, 1);
  assert.deepEqual([ex[0]?.request_id, ex[0]?.sandbox_id, ex[0]?.detail?.door, ex[0]?.detail?.decision_source], [req.id, sbx, 'cli', 'terminal:carol']);
  assert.match(String(ex[0]?.detail?.result_sha256), /^[0-9a-f]{64}$/);
  const record = readRunRecord(join(ws, 'runs', sbx));
  assert.equal(record?.door, 'cli');
  assert.equal(record?.action.id, req.id);
  assert.equal(record?.result_sha256, ex[0]?.detail?.result_sha256);
  verified(ws);
  const hist = airlock(['history', req.id, '--workspace', ws]);
  assert.match(hist.stdout, /ran through the cli door, approved by terminal:carol/);
});

test('airlock run of an Action Descriptor: one executed record (door cli) and a run record promotion works from', () => {
  const ws = scopedWorkspace().root;
  const root = testScopeDir('doors-');
  const d = descriptor(root, { action_type: 'COMMAND_EXECUTION', command: ['/bin/true'], effects: { filesystem: { create: [], modify: [], delete: [] }, network: false, system_state_change: false } });
  const file = join(root, '..', `${root.split('/').pop()}.json`);
  writeFileSync(file, JSON.stringify(d));
  const r = airlock(['run', file, '--workspace', ws, '--json']);
  assert.equal(r.code, 0, r.stderr);
  const ex = executed(ws);
  assert.equal(ex.length, 1);
  assert.deepEqual([ex[0]?.action_id, ex[0]?.detail?.door], [d.action_id, 'cli']);
  assert.ok(!existsSync(join(ws, 'runs', String(ex[0]?.sandbox_id), 'descriptor.json')), 'the core keeps the Action, not the front door\'s document');
  verified(ws);
});

test('the folder gate: one executed record (door gate, the signing operator\'s key)', () => {
  const ws = mkdtempSync(join(tmpdir(), 'airlock-doors-gate-'));
  const keys = mkdtempSync(join(tmpdir(), 'airlock-doors-keys-'));
  assert.equal(airlock(['init', ws]).code, 0);
  assert.equal(airlock(['keygen', '--operator', 'alice', '--workspace', ws, '--key-dir', keys]).code, 0);
  const req = writeRequest(hello, mkdtempSync(join(ws, 'drafts', 'd-')));
  const a = airlock(['approve', req.file, '--operator', 'alice', '--workspace', ws, '--key-dir', keys, '--yes']);
  assert.equal(a.code, 0, a.stderr);
  const s = airlock(['serve', '--workspace', ws, '--once']);
  assert.equal(s.code, 0, s.stderr);
  const ex = executed(ws);
  assert.equal(ex.length, 1);
  assert.equal(ex[0]?.detail?.door, 'gate');
  assert.match(String(ex[0]?.detail?.decision_source), /^key:alice:[0-9a-f]{16}$/);
  verified(ws);
});

test('a UTP call: one executed record (door utp, the registered tool)', async () => {
  const before = executed(h.ws.root).length;
  const r = await callTool({ nats: h.nc, store: h.store, subject: h.subject('sandbox.exec'), tool: 'sandbox.exec', agentId: 'agent-d', agentTurnId: `turn-${randomUUID()}`, turnEpoch: 1, arguments: { argv: ['/bin/echo', 'hi'] }, timeoutMs: 60_000 });
  assert.ok(r.ok && r.status === 'success', JSON.stringify(r));
  const ex = executed(h.ws.root).slice(before);
  assert.equal(ex.length, 1);
  assert.equal(ex[0]?.detail?.door, 'utp');
  assert.match(String(ex[0]?.detail?.decision_source), new RegExp(`^tool:${h.project}/sandbox\\.exec@key:registrar:[0-9a-f]{16}$`), 'the tool and the operator who registered it');
  verified(h.ws.root);
});

test('a deleted policy.yaml makes every door refuse (POLICY_MISSING), and nothing runs', async () => {
  // airlock run
  const ws = scopedWorkspace().root;
  rmSync(join(ws, 'policy.yaml'));
  const req = writeRequest(hello);
  const r = airlock(['run', req.file, '--workspace', ws]);
  assert.equal(r.code, 2, r.stderr);
  assert.match(r.stderr, /POLICY_MISSING/);
  assert.ok(!existsSync(join(ws, 'policy.yaml')), 'the policy is not silently recreated');
  // the gate
  const gws = mkdtempSync(join(tmpdir(), 'airlock-doors-gate-'));
  const keys = mkdtempSync(join(tmpdir(), 'airlock-doors-keys-'));
  assert.equal(airlock(['init', gws]).code, 0);
  assert.equal(airlock(['keygen', '--operator', 'alice', '--workspace', gws, '--key-dir', keys]).code, 0);
  const greq = writeRequest(hello, mkdtempSync(join(gws, 'drafts', 'd-')));
  assert.equal(airlock(['approve', greq.file, '--operator', 'alice', '--workspace', gws, '--key-dir', keys, '--yes']).code, 0);
  rmSync(join(gws, 'policy.yaml'));
  airlock(['serve', '--workspace', gws, '--once']);
  const reasons = readdirSync(join(gws, 'quarantine')).find((n) => n.endsWith('.reasons.json'));
  assert.ok(reasons, 'the request was quarantined');
  assert.match(readFileSync(join(gws, 'quarantine', reasons), 'utf8'), /POLICY_MISSING/);
  assert.equal(executed(gws).length, 0);
  // a UTP call
  const policy = h.ws.policyFile;
  renameSync(policy, `${policy}.aside`);
  try {
    const u = await callTool({ nats: h.nc, store: h.store, subject: h.subject('sandbox.exec'), tool: 'sandbox.exec', agentId: 'agent-d', agentTurnId: `turn-${randomUUID()}`, turnEpoch: 1, arguments: { argv: ['/bin/echo', 'hi'] }, timeoutMs: 60_000 });
    assert.ok(u.ok && u.status === 'failed', JSON.stringify(u));
    assert.equal(u.content.error?.code, 'internal_error');
    assert.match(JSON.stringify(u.content.error?.detail), /POLICY_MISSING/);
  } finally {
    renameSync(`${policy}.aside`, policy);
  }
});
