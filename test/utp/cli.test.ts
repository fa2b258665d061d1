import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { airlock } from '../helpers/cli.js';
import { SqliteStore } from '../../src/store/sqlite.js';
import { openWorkspace } from '../../src/workspace/workspace.js';
import { addOperator } from '../helpers/operator.js';
import { parsePolicy } from '../../src/policy/policy.js';

/** `airlock tools` and `airlock approvals` on a SQLite workspace. */

const ws = mkdtempSync(join(tmpdir(), 'airlock-cli-'));
const keys = join(ws, 'keys');
after(() => rmSync(ws, { recursive: true, force: true }));
/** The workspace's SQLite store, as a client that shares it writes it, for the length of `f`. */
async function withStore(f: (store: SqliteStore) => Promise<void>): Promise<void> {
  const store = new SqliteStore(join(ws, 'airlock.db'));
  await store.init();
  try {
    await f(store);
  } finally {
    await store.close();
  }
}

/** The registering operator's options (`keygen` made the key and listed it in the policy: see the first test). */
const ops = ['--operator', 'ops', '--key-dir', keys];

// The real command, as a user runs it (capturing process.stdout in this process would also swallow
// the test runner's own reports, which travel on it).
async function run(args: string[]): Promise<{ out: string; err: string; code: number }> {
  const r = airlock([...args, '--workspace', ws]);
  return { out: r.stdout, err: r.stderr, code: r.code ?? -1 };
}

test('tools add --builtin, list, add with JSON options from a file, remove', async () => {
  assert.equal((await run(['keygen', '--operator', 'ops', '--key-dir', keys])).code, 0);
  const a = await run(['tools', 'add', 'python.run', '--builtin', 'python.run', '--project', 'proj', '--channel', 'ch', ...ops]);
  assert.equal(a.code, 0, a.err);
  assert.match(a.out, /registered proj\/python.run on cg\.v1\.proj\.ch\.cmd\.tool\.python\.run, signed by ops \(key [0-9a-f]{16}\)/);
  // The pin it prints is a policy line other workspaces can take as it is.
  const pin = /^ {4}(tool_registrations: .*)$/m.exec(a.out)?.[1];
  const pinned = parsePolicy(`${readFileSync(join(ws, 'policy.yaml'), 'utf8')}${pin}\n`);
  assert.ok(pinned.ok, `${a.out} ${JSON.stringify(pinned)}`);
  assert.deepEqual(Object.keys(pinned.value.tool_registrations), ['proj/python.run']);
  const opts = join(ws, 'opts.json');
  writeFileSync(opts, JSON.stringify({ runner: 'command', argv: ['/usr/bin/wc', '-c', '{{file}}'], approval: { required: true, timeout_ms: 60000 } }));
  const b = await run(['tools', 'add', 'wc', '--project', 'proj', '--subject', 'cg.v1.proj.ch.cmd.tool.wc', '--parameters', '{"type":"object","properties":{"file":{"type":"string"}}}', '--options', `@${opts}`, '--after-execution', 'terminate', ...ops]);
  assert.equal(b.code, 0, b.err);
  const l = await run(['tools', 'list']);
  assert.match(l.out, /proj\/python.run\s+cg\.v1\.proj\.ch\.cmd\.tool\.python\.run\s+runner=python\s+after=suspend\s+signed=ops/);
  assert.match(l.out, /proj\/wc .*after=terminate\s+approval=required\s+signed=ops/);
  const j = JSON.parse((await run(['tools', 'list', '--json', '--project', 'proj'])).out);
  assert.deepEqual(j.map((t: { tool_name: string }) => t.tool_name), ['python.run', 'wc']);
  assert.equal((await run(['tools', 'remove', 'wc', '--project', 'proj'])).code, 0);
  assert.equal((await run(['tools', 'remove', 'wc', '--project', 'proj'])).code, 2);
});

test('tools list flags a row changed in the store after it was signed, and one nobody signed', async () => {
  await withStore(async (store) => {
    assert.equal((await run(['tools', 'add', 'guarded', '--builtin', 'echo', '--project', 'proj', '--channel', 'ch', '--options', '{"runner":"echo","approval":{"required":true}}', ...ops])).code, 0);
    const row = await store.getTool('proj', 'guarded');
    assert.ok(row?.signature);
    await store.upsertTool({ ...row, options: { runner: 'echo' } });
    await store.upsertTool({ ...row, tool_name: 'planted', target_subject: 'cg.v1.proj.ch.cmd.tool.planted', signature: null });
    // JSON null as the options: `tools list` failed on it (TypeError), so one planted row hid every other from the operator.
    await store.upsertTool({ ...row, tool_name: 'nulled', target_subject: 'cg.v1.proj.ch.cmd.tool.nulled', options: null as never, signature: null });
    // A name with a newline printed a line of its own: a fake row, `signed=ops`.
    await store.upsertTool({ ...row, tool_name: 'x\nproj/fake  cg.v1.proj.ch.cmd.tool.fake  runner=echo  after=suspend  signed=ops', signature: null });
    const r = await run(['tools', 'list', '--project', 'proj']);
    assert.equal(r.code, 0, r.err);
    const l = r.out;
    assert.match(l, /proj\/guarded .*REFUSED=UTPS_TOOL_TAMPERED/);
    assert.match(l, /proj\/planted .*REFUSED=UTPS_TOOL_UNSIGNED/);
    assert.match(l, /proj\/nulled .*runner=\? .*REFUSED=UTPS_TOOL_UNSIGNED/);
    assert.doesNotMatch(l, /^proj\/fake/m);
    assert.match(l, /proj\/x\\u000aproj\/fake .*REFUSED=UTPS_TOOL_UNSIGNED/);
  });
  assert.equal((await run(['tools', 'remove', 'guarded', '--project', 'proj'])).code, 0);
  assert.equal((await run(['tools', 'remove', 'planted', '--project', 'proj'])).code, 0);
  assert.equal((await run(['tools', 'remove', 'nulled', '--project', 'proj'])).code, 0);
  assert.equal((await run(['tools', 'remove', 'x\nproj/fake  cg.v1.proj.ch.cmd.tool.fake  runner=echo  after=suspend  signed=ops', '--project', 'proj'])).code, 0);
});

test('tools sign: shows a row as it stands (inert), asks, and signs exactly what it showed', async () => {
  await withStore(async (store) => {
    // A row from before signed registrations (or written by hand): unsigned, with a hostile description.
    await store.upsertTool({ project_id: 'proj', tool_name: 'legacy', description: 'ok\x1b[2K\u202eevil', parameters: { type: 'object' }, target_subject: 'cg.v1.proj.ch.cmd.tool.legacy', after_execution: 'suspend', options: { runner: 'echo' } });
    const asked = await run(['tools', 'sign', 'legacy', '--project', 'proj', ...ops]);
    assert.equal(asked.code, 2, 'no terminal, no --yes: nothing signed');
    assert.match(asked.err, /no terminal to ask on/);
    assert.match(asked.out, /approval by a person for each call: NOT required/);
    assert.match(asked.out, /"runner": "echo"/);
    assert.ok(!asked.out.includes('\x1b') && !asked.out.includes('\u202e'), 'the description cannot drive the terminal');
    assert.match(asked.out, /ok\\u001b\[2K\\u202eevil/);
    assert.equal((await store.getTool('proj', 'legacy'))?.signature, null);
    const yes = await run(['tools', 'sign', 'legacy', '--project', 'proj', '--yes', ...ops]);
    assert.equal(yes.code, 0, yes.err);
    assert.match(yes.out, /signed proj\/legacy as ops \(key [0-9a-f]{16}\)/);
    assert.match((await run(['tools', 'list', '--project', 'proj'])).out, /proj\/legacy .*signed=ops/);
    assert.equal((await run(['tools', 'sign', 'nope', '--project', 'proj', '--yes', ...ops])).code, 2);
  });
  assert.equal((await run(['tools', 'remove', 'legacy', '--project', 'proj'])).code, 0);
});

test('tools retire: a signed tombstone in the tool\'s place, listed as RETIRED', async () => {
  assert.equal((await run(['tools', 'add', 'old.tool', '--builtin', 'echo', '--project', 'proj', '--channel', 'ch', ...ops])).code, 0);
  const r = await run(['tools', 'retire', 'old.tool', '--project', 'proj', ...ops]);
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /retired proj\/old\.tool, signed by ops/);
  assert.match((await run(['tools', 'list', '--project', 'proj'])).out, /proj\/old\.tool .*runner=echo .*RETIRED\s+signed=ops/);
  assert.equal((await run(['tools', 'retire', 'never.was', '--project', 'proj', ...ops])).code, 2);
  assert.equal((await run(['tools', 'remove', 'old.tool', '--project', 'proj'])).code, 0);
});

test('tools add signs only with a key the workspace policy trusts, and needs an operator', async () => {
  const none = await run(['tools', 'add', 'z', '--builtin', 'echo', '--project', 'proj', '--channel', 'ch']);
  assert.equal(none.code, 2);
  assert.match(none.err, /--operator/);
  const other = mkdtempSync(join(tmpdir(), 'airlock-cli-ws2-'));
  try {
    // mallory's key exists and is trusted by another workspace, not by this one.
    assert.equal(airlock(['keygen', '--operator', 'mallory', '--key-dir', keys, '--workspace', other]).code, 0);
    const r = await run(['tools', 'add', 'z', '--builtin', 'echo', '--project', 'proj', '--channel', 'ch', '--operator', 'mallory', '--key-dir', keys]);
    assert.equal(r.code, 2);
    assert.match(r.err, /UTPS_TOOL_UNTRUSTED_KEY/);
    const missing = await run(['tools', 'add', 'z', '--builtin', 'echo', '--project', 'proj', '--channel', 'ch', '--operator', 'nobody', '--key-dir', keys]);
    assert.equal(missing.code, 2);
    assert.match(missing.err, /no private key for operator nobody/);
    assert.match((await run(['tools', 'list', '--project', 'proj'])).out, /^(?!.*proj\/z )/s, 'nothing was registered');
  } finally {
    rmSync(other, { recursive: true, force: true });
  }
});

test('tools add refuses a bad record with the rule codes', async () => {
  const r = await run(['tools', 'add', 'x', '--project', 'proj', '--subject', 'cg.v1.other.ch.cmd.tool.x', '--options', '{"runner":"teleport"}', '--parameters', '{"type":"array"}', ...ops]);
  assert.equal(r.code, 2);
  assert.match(r.err, /UTPS_TOOL_SUBJECT/);
  assert.match(r.err, /UTPS_TOOL_OPTIONS/);
  assert.match(r.err, /UTPS_TOOL_PARAMETERS/);
  const reserved = await run(['tools', 'add', 'y', '--project', 'proj', '--subject', 'cg.v1.proj.ch.cmd.tool.airlock.cancel', '--options', '{"runner":"echo"}', ...ops]);
  assert.equal(reserved.code, 2);
  assert.match(reserved.err, /reserved/);
  const bad = await run(['tools', 'add', 'y', '--project', 'proj', '--channel', 'ch', '--options', '{not json', ...ops]);
  assert.equal(bad.code, 2);
  assert.match(bad.err, /JSON_SYNTAX/);
});

test('approvals: list pending, approve (signed with the operator key), reject, a decided one cannot be decided again', async () => {
  const alice = addOperator(openWorkspace(ws).policyFile, 'alice');
  const now = Date.now();
  await withStore(async (store) => {
    for (const id of ['apr-1', 'apr-2', 'apr-old']) {
      const call = { approval_id: id, project_id: 'proj', tool_name: 'wc', subject: 'cg.v1.proj.ch.cmd.tool.wc', agent_id: 'agent-1', agent_turn_id: 't', turn_epoch: 1, tool_call_id: `c-${id}`, tool_call_card_id: `card-${id}`, arguments: { file: '/etc/hosts' }, tool_sha256: '0'.repeat(64) };
      await store.createApproval({ id, agent_turn_id: 't', tool_call_id: `c-${id}`, project_id: 'proj', tool_name: 'wc', summary: { arguments: { file: '/etc/hosts' }, ...(id === 'apr-old' ? {} : { call }) }, expires_at: now + 60_000 });
    }
  });
  const l = await run(['approvals']);
  assert.match(l.out, /apr-1\s+pending\s+proj\/wc/);
  assert.match(l.out, /\/etc\/hosts/);
  const noKey = await run(['approvals', 'approve', 'apr-1', '--operator', 'bob', '--key-dir', alice.keyDir]);
  assert.equal(noKey.code, 2);
  assert.match(noKey.err, /no private key for operator bob/);
  const ap = await run(['approvals', 'approve', 'apr-1', '--operator', 'alice', '--key-dir', alice.keyDir]);
  assert.equal(ap.code, 0, ap.err);
  assert.match(ap.out, /signed by alice/);
  const old = await run(['approvals', 'approve', 'apr-old', '--operator', 'alice', '--key-dir', alice.keyDir]);
  assert.equal(old.code, 2);
  assert.match(old.err, /APPROVAL_CALL_UNKNOWN/);
  const r = await run(['approvals', 'reject', 'apr-2', '--reason', 'no']);
  assert.equal(r.code, 0);
  const again = await run(['approvals', 'approve', 'apr-2', '--operator', 'alice', '--key-dir', alice.keyDir]);
  assert.equal(again.code, 2);
  assert.match(again.err, /already rejected/);
  assert.equal((await run(['approvals', 'reject', 'apr-old'])).code, 0);
  assert.match((await run(['approvals', 'list'])).out, /nothing waits/);
  const all = JSON.parse((await run(['approvals', 'list', '--all', '--json'])).out);
  assert.deepEqual(all.map((a: { id: string; state: string }) => [a.id, a.state]), [['apr-1', 'approved'], ['apr-2', 'rejected'], ['apr-old', 'rejected']]);
  assert.ok(all[0].signature && JSON.parse(all[0].signature).operator === 'alice', 'the signature is stored with the approval');
});
