import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { openAirlock } from '../../src/api/host.js';
import { actionFromDescriptor } from '../../src/action/from-action-descriptor.js';
import { actionDescriptorContract } from '../../src/contracts/action-descriptor.js';
import { auditTypes, cli, descriptor, tree } from '../commit/helpers.js';
import { repoPath } from '../helpers/paths.js';
import { scopedWorkspace } from '../helpers/workspace.js';

/** openAirlock: the facade's methods are the CLI's commands on the same code, recorded as door `library`. */

const dir = mkdtempSync(join(tmpdir(), 'airlock-api-'));
after(() => rmSync(dir, { recursive: true, force: true }));
const ws = scopedWorkspace(join(dir, 'ws'));
const keys = join(dir, 'keys');
const airlock = openAirlock({ workspace: ws.root, operator: 'alice', keyDir: keys });
after(() => airlock.close());

test('run, promote and rollback an Action Descriptor through the facade', async () => {
  const root = tree({ 'logs/app.log': { text: 'old\n' }, 'logs/notes.txt': { text: 'keep\n' } });
  const file = join(dir, 'delete-logs.json');
  writeFileSync(file, JSON.stringify(descriptor(root)));
  const run = await airlock.run(file);
  assert.equal(run.kind, 'ran', JSON.stringify(run.kind === 'rejected' ? run.problems : ''));
  if (run.kind !== 'ran') return;
  assert.equal(run.sandboxResult.verdict.recommended_action, 'PROMOTE');
  const record = JSON.parse(readFileSync(join(run.runDir, 'record.json'), 'utf8')) as { door: string; decision: { source: string } };
  assert.deepEqual([record.door, record.decision.source], ['library', 'terminal:alice']);
  assert.ok(existsSync(join(root, 'logs/app.log')), 'a run changes nothing real');

  const p = await airlock.promote(run.sandboxId);
  assert.ok(p.ok && p.status === 'promoted', JSON.stringify(p));
  assert.ok(!existsSync(join(root, 'logs/app.log')));
  assert.ok(existsSync(join(root, 'logs/notes.txt')));
  const r = await airlock.rollback(run.sandboxId);
  assert.ok(r.ok, JSON.stringify(r));
  assert.equal(readFileSync(join(root, 'logs/app.log'), 'utf8'), 'old\n');
  const types = auditTypes(ws).map((a) => a.type);
  for (const t of ['executed', 'promoted', 'rolled_back']) assert.ok(types.includes(t), `audit lacks ${t}: ${types.join(', ')}`);
});

test('execute hands the evidence to the host core: a policy rule that does not cover the action is refused and audited', async () => {
  const parsed = actionDescriptorContract.parse(JSON.stringify(descriptor(tree({ 'a.log': { text: 'x' } }))));
  assert.ok(parsed.ok);
  const action = actionFromDescriptor(parsed.value);
  assert.ok(!('problems' in action));
  const out = await airlock.execute(action, { approval: { kind: 'policy-rule' } });
  assert.equal(out.kind, 'refused');
  assert.ok(out.kind === 'refused' && out.stage === 'approval' && out.problems.some((x) => x.code === 'APPROVAL_UNSIGNED'));
  const last = auditTypes(ws).at(-1);
  assert.equal(last?.type, 'refused');
  assert.equal(last?.detail?.door, 'library');
});

test('approve signs a Tool Request with the operator key and moves it into requests_in/, as airlock approve does', () => {
  const k = cli(['keygen', '--operator', 'alice', '--workspace', ws.root, '--key-dir', keys]);
  assert.equal(k.code, 0, k.stderr);
  const name = 'TR-20260209-160501Z-python-stats.md';
  const drafts = mkdtempSync(join(dir, 'drafts-'));
  for (const f of [name, 'stats.py', 'input.csv']) copyFileSync(repoPath(`examples/requests/${f}`), join(drafts, f));
  const out = airlock.approve(join(drafts, name));
  assert.ok(out.ok, JSON.stringify(out));
  assert.equal(out.file, join(ws.requestsIn, name));
  assert.ok(existsSync(`${out.file}.sig`));
  assert.ok(!existsSync(join(drafts, name)));
  assert.ok(auditTypes(ws).some((a) => a.type === 'approved'));
  const bad = airlock.approve(join(drafts, name));
  assert.ok(!bad.ok && bad.problems[0]?.code === 'RUN_NOT_RUNNABLE');
});

test('callTool without NATS is a coded problem, not a throw', async () => {
  const r = await airlock.callTool({ project: 'p', channel: 'c', tool: 'echo', agentId: 'a', agentTurnId: 't', turnEpoch: 1, arguments: {} });
  assert.ok(!r.ok && r.problems[0]?.code === 'UTPC_BAD_INPUT');
});
