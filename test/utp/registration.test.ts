import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { generateOperatorKey } from '../../src/approval/keys.js';
import { pinLine } from '../../src/approval/tool-registration.js';
import { openAuditLog } from '../../src/audit/index.js';
import type { ToolRecord } from '../../src/store/types.js';
import { callTool } from '../../src/utp/client.js';
import { executeTool } from '../../src/utp/execute.js';
import { ToolRegistry } from '../../src/utp/registry.js';
import { loadPolicy } from '../../src/policy/load.js';
import { BUILTIN_TOOLS } from '../../src/utp/tools.js';
import { signTool } from '../helpers/operator.js';
import { eventually, sleep, startHarness, toolRow, type Harness } from './harness.js';

/**
 * Every client writes the store (its call cards), so a client can write `resource.tools` too: these
 * tests are that client. A worker runs a tool only when an operator its own policy.yaml lists signed
 * the row as it stands; anything else is answered failed / auth_failed, never run, logged and audited.
 */

const REFRESH_MS = 100;

for (const db of ['sqlite', 'postgres'] as const) {
  describe(`tool registrations written by a client (${db})`, () => {
    let h: Harness;
    before(async () => {
      h = await startHarness({ db, service: { refreshMs: REFRESH_MS } });
    });
    after(async () => {
      await h?.stop();
    });

    const call = (tool: string, args: Record<string, unknown> = {}) =>
      callTool({ nats: h.nc, store: h.store, subject: h.subject(tool), tool, agentId: 'agent-r', agentTurnId: `turn-${randomUUID()}`, turnEpoch: 1, arguments: args as never, timeoutMs: 15_000 });

    /** The call's answer is auth_failed with `code`, it did not run, and the refusal is in the log and the audit. */
    async function refused(tool: string, code: string): Promise<void> {
      const r = await call(tool, { v: 1 });
      assert.ok(r.ok, JSON.stringify(r));
      assert.equal(r.status, 'failed');
      assert.equal(r.content.error?.code, 'auth_failed', JSON.stringify(r.content.error));
      const codes = ((r.content.error?.detail as { problems?: { code: string }[] } | undefined)?.problems ?? []).map((p) => p.code);
      assert.deepEqual(codes, [code]);
      assert.ok(!h.runs.includes(r.toolCallId), 'the tool did not run');
      assert.ok(h.logs.some((l) => l.event === 'call-refused' && l.tool_call_id === r.toolCallId));
      const audited = openAuditLog(h.ws.auditFile).show().find((e) => e.type === 'refused' && e.detail?.tool_call_id === r.toolCallId);
      assert.deepEqual([audited?.detail?.stage, audited?.detail?.codes], ['registration', [code]]);
    }

    /** Waits until the worker's registry has re-read the store. */
    const refreshed = () => sleep(REFRESH_MS * 4);

    test('a tool row a client planted, unsigned, is never run', async () => {
      await h.store.upsertTool(toolRow(h.project, h.channel, 'planted', { options: { runner: 'echo' } }));
      await refreshed(); // a new subject: the worker's stream takes it at its next refresh
      await refused('planted', 'UTPS_TOOL_UNSIGNED');
      assert.ok(h.logs.some((l) => l.event === 'tool-refused' && l.tool_name === 'planted'));
    });

    test('a client that turns approval.required off on a signed tool gets no run without a person', async () => {
      const row = await h.store.getTool(h.project, 'echo.approve');
      assert.ok(row?.signature && (row.options as { approval?: { required?: boolean } }).approval?.required);
      await h.store.upsertTool({ ...row, options: { runner: 'echo', approval: { required: false } } });
      await refreshed();
      await refused('echo.approve', 'UTPS_TOOL_TAMPERED');
      assert.equal((await h.store.listApprovals()).filter((a) => a.tool_name === 'echo.approve' && a.state === 'pending').length, 0, 'it did not even ask');
    });

    test('a client that widens a signed tool (a new runner, a host scope) keeps the signature but not the tool', async () => {
      const row = await h.store.getTool(h.project, 'sandbox.exec');
      assert.ok(row);
      await h.store.upsertTool({ ...row, options: { runner: 'exec', effects: { scope: ['/home/someone'] } } });
      await refreshed();
      await refused('sandbox.exec', 'UTPS_TOOL_TAMPERED');
    });

    test('a row signed with a key the worker\'s policy does not list (the client made its own) is refused', async () => {
      const mallory = { name: 'mallory', keyDir: mkdtempSync(join(tmpdir(), 'airlock-keys-')) };
      const made = generateOperatorKey(mallory.name, mallory.keyDir);
      assert.ok(!('error' in made));
      await h.store.upsertTool(signTool(toolRow(h.project, h.channel, 'forged', { options: { runner: 'echo' } }), mallory));
      await refreshed();
      await refused('forged', 'UTPS_TOOL_UNTRUSTED_KEY');
    });

    test('an older signed registration put back in the store is refused as a rollback', async () => {
      const name = `rolled.${db}`;
      const v1 = signTool(toolRow(h.project, h.channel, name, { options: { runner: 'echo' } }), h.registrar, new Date(Date.now() - 60_000));
      await h.store.upsertTool(v1);
      await refreshed();
      const first = await call(name, { v: 1 });
      assert.ok(first.ok && first.status === 'success', JSON.stringify(first));
      await h.register(toolRow(h.project, h.channel, name, { options: { runner: 'echo', approval: { required: true, timeout_ms: 500 } } }));
      const loaded = () => h.logs.filter((l) => l.event === 'tool-registered' && l.tool_name === name).length;
      await eventually(() => (loaded() >= 2 ? true : undefined), 5000, 'the worker to load the new registration');
      await h.store.upsertTool(v1);
      await refreshed();
      await refused(name, 'UTPS_TOOL_ROLLBACK');
    });

    test('a retired tool is never run again, and its older registration put back is refused (tools remove only deletes)', async () => {
      const name = `retiring.${db}`;
      const row = toolRow(h.project, h.channel, name, { options: { runner: 'echo' } });
      const original = signTool(row, h.registrar, new Date(Date.now() - 60_000));
      await h.store.upsertTool(original);
      await refreshed();
      const before = await call(name, { v: 1 });
      assert.ok(before.ok && before.status === 'success', JSON.stringify(before));
      // `airlock tools retire`: the same row, a signed tombstone for options.
      await h.register({ ...row, options: { runner: 'echo', retired: true } });
      await refreshed();
      const r = await call(name, { v: 2 });
      assert.ok(r.ok, JSON.stringify(r));
      assert.equal(r.status, 'failed');
      assert.equal(r.content.error?.code, 'bad_request');
      assert.deepEqual(((r.content.error?.detail as { problems?: { code: string }[] }).problems ?? []).map((p) => p.code), ['UTPS_TOOL_RETIRED']);
      assert.ok(!h.runs.includes(r.toolCallId), 'not run');
      // A client writes the original signed row back (what `tools remove` could not prevent).
      await h.store.upsertTool(original);
      await refreshed();
      await refused(name, 'UTPS_TOOL_ROLLBACK');
    });

    test('the host core checks the registration too: an unsigned tool handed to it straight is refused', async () => {
      const t: ToolRecord = toolRow(h.project, h.channel, 'core.check', { ...BUILTIN_TOOLS['sandbox.exec'], options: { runner: 'exec' } });
      const e = await executeTool(t, { runner: 'exec' }, { argv: ['/bin/true'] }, { workspace: h.ws, signal: new AbortController().signal });
      assert.equal(e.status, 'failed');
      assert.equal(e.error?.code, 'auth_failed', JSON.stringify(e.error));
      assert.match(JSON.stringify(e.error), /UTPS_TOOL_UNSIGNED/);
      const retired = await executeTool(signTool({ ...t, options: { runner: 'exec', retired: true } }, h.registrar), { runner: 'exec' }, { argv: ['/bin/true'] }, { workspace: h.ws, signal: new AbortController().signal });
      assert.match(JSON.stringify(retired.error), /UTPS_TOOL_RETIRED/, 'a retired registration approves no run');
      const signed = await executeTool(signTool(t, h.registrar), { runner: 'exec' }, { argv: ['/bin/true'] }, { workspace: h.ws, signal: new AbortController().signal });
      assert.equal(signed.status, 'success', JSON.stringify(signed.error));
    });

    test('the host core does not take the registration of a tool that needs a person as its approval', async () => {
      const t = signTool(toolRow(h.project, h.channel, 'core.person', { ...BUILTIN_TOOLS['sandbox.exec'], options: { runner: 'exec', approval: { required: true } } }), h.registrar);
      // A door that reached the core without the person's signed approval (a bug, or a path that skipped it).
      const e = await executeTool(t, { runner: 'exec', approval: { required: true } }, { argv: ['/bin/true'] }, { workspace: h.ws, signal: new AbortController().signal });
      assert.equal(e.status, 'failed', JSON.stringify(e));
      assert.equal(e.error?.code, 'auth_failed', JSON.stringify(e.error));
      assert.match(JSON.stringify(e.error), /APPROVAL_UNSIGNED/);
    });
  });
}

/** One worker's registry (`src/utp/registry.ts`) on one SQLite deployment: restarts, sibling workers, rows a client garbled. */
describe('the registry of a worker (sqlite)', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ db: 'sqlite' });
  });
  after(async () => {
    await h?.stop();
  });
  /** A worker's registry on the harness's workspace, as `airlock serve` makes it. */
  const registry = (log: ConstructorParameters<typeof ToolRegistry>[1] = () => undefined) => new ToolRegistry(() => loadPolicy(h.ws.policyFile), log, h.ws.utpRegistrationsFile);
  /** A statement straight into the SQLite file, as a client that shares it can run any. */
  const writeRaw = (sql: string, ...args: unknown[]): void => {
    const db = new Database(join(h.ws.root, 'airlock.db'));
    try {
      db.prepare(sql).run(...args);
    } finally {
      db.close();
    }
  };

  test('a worker started after a newer registration was served still refuses the older one (the memory is in its workspace)', async () => {
    const row = toolRow(h.project, h.channel, 'remembered', { options: { runner: 'echo' } });
    const older = signTool(row, h.registrar, new Date(Date.now() - 60_000));
    const newer = signTool({ ...row, options: { runner: 'echo', approval: { required: true } } }, h.registrar);
    const logs: string[] = [];
    const first = registry((_l, event) => logs.push(event));
    first.replace([newer]);
    assert.ok(first.get(h.project, 'remembered')?.registrant, 'the newer one is served');
    // A restarted worker: a new registry reading the same workspace, the older row put back.
    const restarted = registry((_l, event) => logs.push(event));
    restarted.replace([older]);
    assert.deepEqual(restarted.get(h.project, 'remembered')?.refused?.map((p) => p.code), ['UTPS_TOOL_ROLLBACK']);
    assert.ok(logs.includes('tool-refused'));
  });

  test('a worker of another workspace, which never served the newer registration, refuses the older one once policy.yaml pins the tool (and so does the core)', async (t) => {
    const row = toolRow(h.project, h.channel, 'pinned', { ...BUILTIN_TOOLS['sandbox.exec'], options: { runner: 'exec' } });
    const older = signTool(row, h.registrar, new Date(Date.now() - 60_000));
    const newerAt = new Date();
    const newer = signTool({ ...row, options: { runner: 'exec', approval: { required: true } } }, h.registrar, newerAt);
    // Another workspace's worker: the same policy, its own (empty) rollback memory.
    const elsewhere = () => new ToolRegistry(() => loadPolicy(h.ws.policyFile), () => undefined, join(mkdtempSync(join(tmpdir(), 'airlock-other-ws-')), 'utp-registrations.json'));
    const unpinned = elsewhere();
    unpinned.replace([older]);
    assert.ok(unpinned.get(h.project, 'pinned')?.registrant, 'without a pin it cannot know (README, Not built yet)');
    const policy = readFileSync(h.ws.policyFile, 'utf8');
    t.after(() => writeFileSync(h.ws.policyFile, policy));
    writeFileSync(h.ws.policyFile, `${policy}${pinLine(row, newerAt.getTime())}\n`);
    const pinned = elsewhere();
    pinned.replace([older]);
    assert.deepEqual(pinned.get(h.project, 'pinned')?.refused?.map((p) => p.code), ['UTPS_TOOL_ROLLBACK']);
    assert.match(pinned.get(h.project, 'pinned')!.refused![0]!.message, /before .*tool_registrations/);
    pinned.replace([newer]);
    assert.ok(pinned.get(h.project, 'pinned')?.registrant, 'the pinned registration itself is served');
    // The host core reads the same pin: the older row approves no run.
    const e = await executeTool(older, { runner: 'exec' }, { argv: ['/bin/true'] }, { workspace: h.ws, signal: new AbortController().signal });
    assert.equal(e.error?.code, 'auth_failed', JSON.stringify(e));
    assert.match(JSON.stringify(e.error), /UTPS_TOOL_ROLLBACK/);
  });

  test('a worker refuses an older registration that another worker of its workspace already replaced (the memory is read at each refresh, not only at start)', async () => {
    const row = toolRow(h.project, h.channel, 'sibling', { options: { runner: 'echo' } });
    const older = signTool(row, h.registrar, new Date(Date.now() - 60_000));
    const newer = signTool({ ...row, options: { runner: 'echo', approval: { required: true } } }, h.registrar);
    // Two workers of one workspace (two `airlock serve` processes): A has served the older row.
    const a = registry();
    const c = registry();
    a.replace([older]);
    assert.ok(a.get(h.project, 'sibling')?.registrant, 'A serves the older one while it is the newest');
    // B serves the newer one (approval required); a client then puts the older row back before A's next refresh saw the newer.
    const b = registry();
    b.replace([newer]);
    assert.ok(b.get(h.project, 'sibling')?.registrant);
    a.replace([older]);
    assert.deepEqual(a.get(h.project, 'sibling')?.refused?.map((p) => p.code), ['UTPS_TOOL_ROLLBACK'], 'a refresh of A');
    // The on-demand path (a tool C has not listed yet) reads the memory too.
    assert.deepEqual(c.add(older).refused?.map((p) => p.code), ['UTPS_TOOL_ROLLBACK'], 'a lookup by C');
  });

  test('a planted row too deeply nested to hash is refused on its own: the refresh goes on (it threw, and `airlock serve` could not start)', async () => {
    const good = signTool(toolRow(h.project, h.channel, 'good', { options: { runner: 'echo' } }), h.registrar);
    // A real operator's signature copied from another row passes the key check; the row's hash is taken next.
    await h.store.upsertTool({ ...toolRow(h.project, h.channel, 'deep', {}), signature: good.signature });
    // The options as a client writes them, straight into the table (SQLite keeps the text; JSON.parse reads it back).
    const depth = 20_000;
    writeRaw('UPDATE tools SET options = ? WHERE project_id = ? AND tool_name = ?', '['.repeat(depth) + ']'.repeat(depth), h.project, 'deep');
    const rows = await h.store.listTools(h.project);
    const r = registry();
    r.replace([...rows.filter((t) => t.tool_name === 'deep'), good]);
    assert.deepEqual(r.get(h.project, 'deep')?.refused?.map((p) => p.code), ['UTPS_TOOL_TAMPERED']);
    assert.ok(r.get(h.project, 'good')?.registrant, 'the rows after it are still read');
  });

  test('a planted row whose options are not JSON is refused on its own: the store still lists every tool (it threw, and no refresh read any row)', async () => {
    await h.store.upsertTool(toolRow(h.project, h.channel, 'garbled', {}));
    writeRaw('UPDATE tools SET options = ?, parameters = ? WHERE project_id = ? AND tool_name = ?', '{"runner": "echo"', 'not json', h.project, 'garbled');
    const rows = await h.store.listTools(h.project);
    assert.ok(rows.some((t) => t.tool_name === 'echo'), 'the other rows are listed');
    const r = registry();
    r.replace(rows);
    assert.deepEqual(r.get(h.project, 'garbled')?.refused?.map((p) => p.code), ['UTPS_TOOL_UNSIGNED']);
    assert.equal(r.get(h.project, 'garbled')?.options, null, 'and invalid');
    assert.ok(r.get(h.project, 'echo')?.registrant, 'the signed rows are served');
  });

  test('an unreadable rollback memory is logged once, not at every refresh, and the signed rows are still served', async () => {
    writeFileSync(h.ws.utpRegistrationsFile, '{not json');
    const events: string[] = [];
    const r = registry((_l, event) => events.push(event));
    const rows = await h.store.listTools(h.project);
    writeFileSync(h.ws.utpRegistrationsFile, '{not json');
    r.replace(rows);
    writeFileSync(h.ws.utpRegistrationsFile, '{not json');
    r.replace(rows);
    assert.equal(events.filter((e) => e === 'registrations-memory-unreadable').length, 1);
    assert.ok(r.get(h.project, 'echo')?.registrant);
  });
});
