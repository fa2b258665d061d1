import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { chmodSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import Database from 'better-sqlite3';
import { headers as natsHeaders, type Msg, type Subscription } from 'nats';
import { parseCard, type ToolResultCard } from '../../src/contracts/utp.js';
import { signUtpApproval } from '../../src/approval/sign-utp.js';
import { loadPolicy } from '../../src/policy/load.js';
import { openAuditLog } from '../../src/audit/index.js';
import { readRunRecord } from '../../src/host/record.js';
import { DEFAULT_POLICY_YAML } from '../../src/policy/policy.js';
import type { ApprovalRecord } from '../../src/store/types.js';
import { callTool, cancelTool } from '../../src/utp/client.js';
import { defaultToolSubject } from '../../src/utp/tools.js';
import { execFile } from 'node:child_process';
import { repoPath } from '../helpers/paths.js';
import { addOperator } from '../helpers/operator.js';
import { eventually, sleep, startHarness, token, type Harness, toolRow } from './harness.js';
import { TEST_SCOPE_ROOT, testScopeDir } from '../helpers/workspace.js';

/**
 * Attacks on the UTP door (a security review, 2026-11-27): each test states what an attacker does
 * and asserts what must happen. Real NATS, the harness's store (ATTACK_DB=postgres: PostgreSQL).
 */
const scope = testScopeDir('utp-attack-scope-');
chmodSync(scope, 0o777);
writeFileSync(join(scope, 'data.txt'), 'payroll: alice 100\n', { mode: 0o666 });
const POLICY = DEFAULT_POLICY_YAML.replace('scope_roots: []', `scope_roots: [${TEST_SCOPE_ROOT}]`);

const projectB = token('pb');
/** The CLI and the raw edits below use the workspace's SQLite store. */
const sqliteOnly = { skip: process.env.ATTACK_DB === 'postgres' ? 'sqlite store only' : false };
let h: Harness;
let alice: { keyDir: string; publicKey: string };
let sub: Subscription;
const wakeups: { subject: string; payload: Record<string, unknown> }[] = [];

const row = toolRow;

before(async () => {
  // ATTACK_DB=postgres runs the same attacks against the PostgreSQL store (the sqlite-only raw edits are skipped there).
  h = await startHarness({
    db: process.env.ATTACK_DB === 'postgres' ? 'postgres' : 'sqlite',
    tools: (p, c) => [
      // A command tool that needs a person: printf of one argument.
      row(p, c, 'wc.approve', {
        parameters: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
        options: { runner: 'command', argv: ['/usr/bin/printf', '%s', '{{text}}'], approval: { required: true, timeout_ms: 20_000 } },
      }),
      row(p, c, 'echo.approve.long', { options: { runner: 'echo', approval: { required: true, timeout_ms: 20_000 } } }),
      // Reads a scope file, prints it, and also writes a file it did not declare: the judge BLOCKs.
      row(p, c, 'leaky', {
        options: {
          runner: 'python',
          lane: 'ns',
          code: `print(open('${scope}/data.txt').read())\nopen('${scope}/undeclared.txt', 'w').write('x')\n`,
          effects: { scope: [scope], create: [] },
        },
      }),
      // Another project on the same deployment (same stream, same workers).
      row(projectB, c, 'echo', { options: { runner: 'echo' } }),
    ],
  });
  h.writePolicy(POLICY);
  alice = addOperator(h.ws.policyFile, 'alice');
  sub = h.nc.subscribe('cg.v1.>', {
    callback: (_e, m: Msg) => {
      if (!m.subject.endsWith('.wakeup')) return;
      wakeups.push({ subject: m.subject, payload: JSON.parse(new TextDecoder().decode(m.data)) });
    },
  });
});
after(async () => {
  sub?.unsubscribe();
  await h?.stop();
  rmSync(scope, { recursive: true, force: true });
});

/** The real CLI, run asynchronously: a spawnSync would stall this process's worker (its heartbeats) past its lease. */
const airlock = (args: string[]): Promise<{ code: number; stdout: string; stderr: string }> =>
  new Promise((resolve) => {
    execFile(repoPath('bin/airlock'), args, { encoding: 'utf8', timeout: 120_000 }, (err, stdout, stderr) => resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }));
  });

const ids = () => ({ agentTurnId: `turn-${randomUUID()}`, toolCallId: `call-${randomUUID()}` });
const call = (tool: string, args: Record<string, unknown>, extra: Partial<Parameters<typeof callTool>[0]> = {}) =>
  callTool({ nats: h.nc, store: h.store, subject: h.subject(tool), tool, agentId: 'agent-a', turnEpoch: 1, arguments: args as never, timeoutMs: 30_000, ...ids(), ...extra });

async function publish(subject: string, data: unknown, hs: Record<string, string> = {}): Promise<void> {
  const hdr = natsHeaders();
  for (const [k, v] of Object.entries(hs)) hdr.set(k, v);
  const bytes = typeof data === 'string' ? new TextEncoder().encode(data) : new TextEncoder().encode(JSON.stringify(data));
  await h.nc.jetstream().publish(subject, bytes, { headers: hdr });
}

async function prepared(tool: string, args: Record<string, unknown>, agentId = 'agent-a') {
  const { agentTurnId, toolCallId } = ids();
  const cardId = `card-call-${randomUUID()}`;
  await h.store.putCard({ card_id: cardId, type: 'tool.call', created_at: new Date().toISOString(), content: { tool_call_id: toolCallId, tool_name: tool, arguments: args } });
  const payload = { agent_id: agentId, agent_turn_id: agentTurnId, turn_epoch: 1, tool_call_id: toolCallId, after_execution: 'suspend', tool_call_card_id: cardId };
  return { payload, anchor: { agent_turn_id: agentTurnId, tool_call_id: toolCallId }, cardId };
}

const pendingFor = (toolCallId: string) =>
  eventually(async () => (await h.store.listApprovals('pending')).find((x) => x.tool_call_id === toolCallId), 8000, 'a pending approval');

const signAndApprove = async (a: ApprovalRecord, signature?: string): Promise<void> => {
  const policy = loadPolicy(h.ws.policyFile);
  assert.ok(policy.ok);
  const signed = signUtpApproval({ row: a, operator: 'alice', keyDir: alice.keyDir, policy: policy.value, now: new Date() });
  assert.ok(signed.ok, JSON.stringify(!signed.ok && signed.problems));
  assert.equal(await h.store.decideApproval(a.id, 'approved', 'alice', null, signature ?? signed.signature), true);
};

describe('a cancel is obeyed only in the call\'s own project and channel', () => {
  test('an agent allowed to publish only on project B\'s cancel subject cancels project A\'s running call', async () => {
    const i = ids();
    const pending = call('echo', { delay_ms: 4000 }, i);
    await eventually(() => (h.runs.includes(i.toolCallId) ? true : undefined), 5000, 'the run to start');
    // The attacker's publish permissions: cg.v1.<projectB>.> only. It copies A's identity (agent_id too:
    // UTP carries no proof of identity, as docs/utp-service.md says) and publishes on B's cancel subject.
    const problems = await cancelTool({ nats: h.nc, subject: defaultToolSubject('v1', projectB, h.channel, 'echo'), agentId: 'agent-a', agentTurnId: i.agentTurnId, turnEpoch: 1, toolCallId: i.toolCallId });
    assert.deepEqual(problems, []);
    const r = await pending;
    assert.ok(r.ok, JSON.stringify(r));
    // A cancel from another project is refused (the call's route is part of who made it).
    assert.equal(r.status, 'success', `project ${projectB}'s cancel subject canceled a call of project ${h.project}: status ${r.status}`);
    // The refusal is logged with its code (and audited, as every refused cancel is).
    const refused = h.logs.find((l) => l.event === 'cancel-refused' && l.tool_call_id === i.toolCallId);
    assert.equal(refused?.code, 'UTPS_CANCEL_NOT_AUTHORIZED', JSON.stringify(refused));
    assert.match(JSON.stringify(refused?.problems), /on its own project's and channel's cancel subject/);
  });
});

describe('what `airlock approvals list` shows is what `approve` signs', () => {
  test('a store writer rewrites the row\'s display copy of the arguments: list shows the call that would be signed and warns; approve refuses; nothing runs', sqliteOnly, async () => {
    const i = ids();
    const pending = call('wc.approve', { text: 'REAL-ARGUMENT-rm -rf' }, i);
    const a = await pendingFor(i.toolCallId);
    // Any caller has the store (it writes its tool.call cards there): it edits the display copy only.
    const db = new Database(join(h.ws.root, 'airlock.db'));
    db.prepare("UPDATE approvals SET summary = json_set(summary, '$.arguments', json('{\"text\":\"hello\"}')) WHERE id = ?").run(a.id);
    db.close();
    const listed = await airlock(['approvals', 'list', '--workspace', h.ws.root]);
    assert.equal(listed.code, 0, listed.stderr);
    const block = listed.stdout.slice(listed.stdout.indexOf(a.id)).split(/\n(?=apr-)/)[0] ?? '';
    assert.match(block, /arguments: \{"text":"REAL-ARGUMENT-rm -rf"\}/, block);
    assert.doesNotMatch(block, /hello/, block);
    assert.match(block, /WARNING: the row's display copy of arguments differs from the call/, block);
    const ok = await airlock(['approvals', 'approve', a.id, '--operator', 'alice', '--key-dir', alice.keyDir, '--workspace', h.ws.root]);
    assert.notEqual(ok.code, 0, ok.stdout);
    assert.match(ok.stderr, /APPROVAL_CALL_UNKNOWN: .*the row's arguments differ from the call it approves/, ok.stderr);
    assert.equal((await h.store.getApproval(a.id))?.state, 'pending', 'nothing was signed');
    const no = await airlock(['approvals', 'reject', a.id, '--workspace', h.ws.root]);
    assert.equal(no.code, 0, no.stderr);
    const r = await pending;
    assert.ok(r.ok, JSON.stringify(r));
    assert.equal(r.status, 'failed');
    assert.ok(!h.runs.includes(i.toolCallId), 'the call ran');
  });

  test('no store access needed: a long harmless key first does not hide the real argument from the operator (shown whole up to 4,000 characters; past that, the cut says so)', sqliteOnly, async () => {
    const i = ids();
    // The caller orders its own argument object: a long harmless key first, the real one after it.
    const pending = call('wc.approve', { note: 'routine formatting of a greeting; nothing else. '.repeat(11), text: 'HIDDEN-REAL-ARGUMENT' }, i);
    const a = await pendingFor(i.toolCallId);
    const listed = await airlock(['approvals', 'list', '--workspace', h.ws.root]);
    const ok = await airlock(['approvals', 'approve', a.id, '--operator', 'alice', '--key-dir', alice.keyDir, '--workspace', h.ws.root]);
    assert.equal(ok.code, 0, ok.stderr);
    const r = await pending;
    assert.ok(r.ok && r.status === 'success', JSON.stringify(r));
    // The operator is shown the whole call before signing, and approve prints what it signed.
    assert.ok(listed.stdout.includes('HIDDEN-REAL-ARGUMENT'), `list showed:\n${listed.stdout}`);
    assert.ok(ok.stdout.includes('HIDDEN-REAL-ARGUMENT'), `approve printed:\n${ok.stdout}`);
    // Past 4,000 characters the cut says so, and where the whole call is.
    const j = ids();
    const long = call('wc.approve', { text: 'x'.repeat(5000) }, j);
    const b = await pendingFor(j.toolCallId);
    const listedLong = await airlock(['approvals', 'list', '--workspace', h.ws.root]);
    const block = listedLong.stdout.slice(listedLong.stdout.indexOf(b.id)).split(/\n(?=apr-)/)[0] ?? '';
    assert.match(block, /\[CUT: 4000 of 5011 characters shown; `airlock approvals list --json` prints the whole call\]/, block);
    assert.equal((await airlock(['approvals', 'reject', b.id, '--workspace', h.ws.root])).code, 0);
    await long;
  });
});

describe('a tool.result forged into the store before the worker answers does not become the call\'s result', () => {
  test('the tool runs and its own answer is the call\'s result; the caller is woken; the sweeper does not loop', async () => {
    const { payload, anchor } = await prepared('echo', { delay_ms: 300 });
    const forged = {
      card_id: `card-result-${randomUUID()}`,
      type: 'tool.result',
      created_at: new Date().toISOString(),
      content: { tool_call_id: anchor.tool_call_id, status: 'success', after_execution: 'suspend', result: { runner: 'echo', echo: { forged: 'by a caller with the store' } } },
    };
    const before = wakeups.length;
    await publish(h.subject('echo'), payload);
    await eventually(() => (h.runs.includes(anchor.tool_call_id) ? true : undefined), 5000, 'the run to start');
    // The race: the worker is running the tool; a store writer plants the result for the anchor.
    assert.equal(await h.store.putCard(forged, anchor), true, 'the store accepts a tool.result from anyone');
    await sleep(4000);
    const card = parseCard(await h.store.getResultCardFor(anchor));
    assert.ok(card.ok);
    const claim = await h.store.getClaim(anchor);
    const lost = h.logs.filter((l) => l.event === 'executor-lost' && l.tool_call_id === anchor.tool_call_id).length;
    const discarded = h.logs.filter((l) => l.event === 'answer-discarded' && l.tool_call_id === anchor.tool_call_id).length;
    const woke = wakeups.slice(before).filter((w) => w.payload.tool_call_id === anchor.tool_call_id).length;
    const echo = ((card.value as ToolResultCard).content.result as { echo?: unknown }).echo;
    const why = `result card = ${card.value.card_id === forged.card_id ? 'THE FORGED ONE' : 'airlock\'s'} (echo ${JSON.stringify(echo)}); claim state ${claim?.state}; answer-discarded x${discarded}; executor-lost x${lost} in 4 s; wakeups ${woke}`;
    // Airlock's own answer is the call's result: the claim names it, the caller is woken with it.
    assert.notEqual(card.value.card_id, forged.card_id, why);
    assert.deepEqual(echo, { delay_ms: 300 }, why);
    assert.equal(claim?.state, 'answered', why);
    assert.equal(claim?.result_card_id, card.value.card_id, why);
    assert.ok(woke > 0, why);
    const w = wakeups.slice(before).find((x) => x.payload.tool_call_id === anchor.tool_call_id);
    assert.equal(w?.payload.tool_result_card_id, card.value.card_id, why);
    assert.equal(discarded + lost, 0, why);
  });
});

describe('a run the judge BLOCKs hands none of its output to the agent (as the gate withholds it)', () => {
  test('leaky: undeclared write -> BLOCK; the card carries no stdout (only Airlock\'s facts about the run)', async () => {
    const r = await call('leaky', {});
    assert.ok(r.ok, JSON.stringify(r));
    assert.equal(r.status, 'failed');
    assert.equal(r.content.error?.code, 'policy_violation');
    const res = r.content.result as { verdict?: { recommended_action?: string }; stdout?: { text?: string; withheld?: boolean } };
    assert.equal(res.verdict?.recommended_action, 'BLOCK');
    // As the gate (GATE_RESULT_BLOCKED): a BLOCKed run's output is not handed to the AI.
    assert.ok(!(res.stdout?.text ?? '').includes('payroll'), `BLOCKed run's stdout handed over: ${JSON.stringify(res.stdout?.text)}`);
    assert.equal(res.stdout?.text, undefined, 'no text at all, only the stream\'s sizes and hash');
    assert.equal(res.stdout?.withheld, true);
  });
});

describe('a call\'s anchor squatted from another project (needs the ids in advance)', () => {
  test('B publishes a command with A\'s (agent_turn_id, tool_call_id) first: A\'s command is refused as a conflict (logged, audited), never given B\'s answer', async () => {
    const a = await prepared('echo', { v: 'A' });
    // B uses A's anchor (predictable or leaked ids) on its own subject, with a card of its own.
    const bCard = `card-call-${randomUUID()}`;
    await h.store.putCard({ card_id: bCard, type: 'tool.call', created_at: new Date().toISOString(), content: { tool_call_id: a.anchor.tool_call_id, tool_name: 'echo', arguments: { v: 'B' } } });
    await publish(defaultToolSubject('v1', projectB, h.channel, 'echo'), { ...a.payload, agent_id: 'agent-b', tool_call_card_id: bCard });
    await eventually(() => h.store.getResultCardFor(a.anchor), 5000, 'B\'s answer');
    const before = wakeups.length;
    await publish(h.subject('echo'), a.payload);
    const conflict = await eventually(() => h.logs.find((l) => l.event === 'anchor-conflict' && l.tool_call_id === a.anchor.tool_call_id), 5000, 'the conflict');
    assert.equal(conflict.code, 'UTPS_ANCHOR_CONFLICT');
    assert.match(JSON.stringify(conflict.problems), /is not its retry: refused, not run/);
    await sleep(500);
    // B's answer goes to nobody else; A's command did not run (one run of the anchor: B's).
    assert.deepEqual(wakeups.slice(before).filter((w) => w.payload.tool_call_id === a.anchor.tool_call_id), []);
    assert.equal(h.runs.filter((x) => x === a.anchor.tool_call_id).length, 1);
    const audit = readFileSync(h.ws.auditFile, 'utf8');
    assert.match(audit, new RegExp(`"codes":\\["UTPS_ANCHOR_CONFLICT"\\][^\\n]*${a.anchor.tool_call_id}|${a.anchor.tool_call_id}[^\\n]*"codes":\\["UTPS_ANCHOR_CONFLICT"\\]`));
  });
});

describe('the audit log traces every UTP call, refused or run, to its caller and approval', () => {
  test('a call refused before the core (bad arguments) is audited with its agent and ids; an approved run\'s executed record and run record name its call and approval', async () => {
    const bad = ids();
    const r = await call('wc.approve', { text: 42 }, bad);
    assert.ok(r.ok && r.status === 'failed', JSON.stringify(r));
    const log = () => openAuditLog(h.ws.auditFile).show();
    const refused = await eventually(() => log().find((e) => e.type === 'refused' && e.detail?.tool_call_id === bad.toolCallId), 3000, 'the refusal\'s audit record');
    assert.equal(refused.actor, 'agent:agent-a');
    assert.equal(refused.detail?.stage, 'arguments');
    assert.equal(refused.detail?.agent_turn_id, bad.agentTurnId);
    assert.equal(refused.detail?.tool_name, 'wc.approve');
    assert.ok(Array.isArray(refused.detail?.codes) && refused.detail.codes.length > 0, JSON.stringify(refused));

    const ok = ids();
    const pending = call('wc.approve', { text: 'traced' }, ok);
    const a = await pendingFor(ok.toolCallId);
    await signAndApprove(a);
    const done = await pending;
    assert.ok(done.ok && done.status === 'success', JSON.stringify(done));
    const executed = log().find((e) => e.type === 'executed' && (e.detail?.caller as Record<string, string> | undefined)?.tool_call_id === ok.toolCallId);
    assert.ok(executed, 'an executed record names the call');
    assert.deepEqual(executed.detail?.caller, { agent_id: 'agent-a', agent_turn_id: ok.agentTurnId, tool_call_id: ok.toolCallId, project_id: h.project, tool_name: 'wc.approve', approval_id: a.id });
    assert.ok(log().some((e) => e.type === 'approved' && e.action_id === a.id), 'the approval it names is in the log');
    const record = readRunRecord(join(h.ws.runs, executed.sandbox_id as string));
    assert.deepEqual(record?.caller, executed.detail?.caller);
  });
});

describe('a call\'s ids reused by its own agent for another call', () => {
  for (const other of ['card', 'tool'] as const) {
    test(`the same (agent_turn_id, tool_call_id) with another ${other === 'card' ? 'tool.call card (other arguments)' : 'tool'}: refused as a conflict (logged, audited), never given the first call's answer`, async () => {
      const a = await prepared('echo', { v: 'first' });
      await publish(h.subject('echo'), a.payload);
      await eventually(() => h.store.getResultCardFor(a.anchor), 5000, 'the first answer');
      // UTP 3.2: only a re-entry through the same tool_call_card_id is the same call.
      const card = `card-call-${randomUUID()}`;
      const tool = other === 'tool' ? 'echo.approve.long' : 'echo';
      await h.store.putCard({ card_id: card, type: 'tool.call', created_at: new Date().toISOString(), content: { tool_call_id: a.anchor.tool_call_id, tool_name: tool, arguments: { v: 'second' } } });
      const before = wakeups.length;
      await publish(h.subject(tool), { ...a.payload, tool_call_card_id: other === 'card' ? card : a.cardId });
      const conflict = await eventually(() => h.logs.find((l) => l.event === 'anchor-conflict' && l.tool_call_id === a.anchor.tool_call_id), 5000, 'the conflict');
      assert.match(JSON.stringify(conflict.problems), other === 'card' ? /with tool\.call card .* and card .* is not its retry/ : /was made to tool echo; a command with its ids for tool echo\.approve\.long is not its retry/);
      await sleep(300);
      assert.deepEqual(wakeups.slice(before).filter((w) => w.payload.tool_call_id === a.anchor.tool_call_id), [], 'no answer goes to the second call');
      assert.equal(h.runs.filter((x) => x === a.anchor.tool_call_id).length, 1, 'the anchor ran once');
      // The first call's own retry (same card, same tool) is still answered again.
      await publish(h.subject('echo'), a.payload);
      await eventually(() => wakeups.slice(before).find((w) => w.payload.tool_call_id === a.anchor.tool_call_id), 5000, 'the retry\'s answer');
    });
  }
});

describe('contained', () => {
  test('replayed approval: call 1\'s valid operator signature stored on call 2\'s row (same tool, same arguments) runs nothing', async () => {
    const i1 = ids();
    const p1 = call('echo.approve.long', { v: 1 }, i1);
    const a1 = await pendingFor(i1.toolCallId);
    await signAndApprove(a1);
    const r1 = await p1;
    assert.ok(r1.ok && r1.status === 'success');
    const sig1 = (await h.store.getApproval(a1.id))?.signature ?? '';
    const i2 = ids();
    const p2 = call('echo.approve.long', { v: 1 }, i2);
    const a2 = await pendingFor(i2.toolCallId);
    assert.equal(await h.store.decideApproval(a2.id, 'approved', 'alice', null, sig1), true);
    const r2 = await p2;
    assert.ok(r2.ok);
    assert.equal(r2.status, 'failed');
    assert.equal(r2.content.error?.code, 'auth_failed');
    assert.match(JSON.stringify(r2.content.error?.detail), /APPROVAL_TAMPERED/);
    assert.ok(!h.runs.includes(i2.toolCallId));
  });

  test('the tool.call card rewritten in the store after the approval row was made: the run uses the approved arguments', sqliteOnly, async () => {
    const { payload, anchor, cardId } = await prepared('echo.approve.long', { v: 'approved' });
    await publish(h.subject('echo.approve.long'), payload);
    const a = await pendingFor(anchor.tool_call_id);
    const db = new Database(join(h.ws.root, 'airlock.db'));
    db.prepare("UPDATE cards SET body = json_set(body, '$.content.arguments', json('{\"v\":\"evil\"}')) WHERE card_id = ?").run(cardId);
    db.close();
    await signAndApprove(a);
    const raw = await eventually(() => h.store.getResultCardFor(anchor), 8000, 'the result');
    const c = parseCard(raw);
    assert.ok(c.ok && c.value.type === 'tool.result');
    assert.deepEqual((c.value.content.result as { echo: unknown }).echo, { v: 'approved' });
  });

  test('two commands with the same anchor and different cards, published together: one run, one result', async () => {
    const { payload, anchor } = await prepared('echo', { v: 'first' });
    const card2 = `card-call-${randomUUID()}`;
    await h.store.putCard({ card_id: card2, type: 'tool.call', created_at: new Date().toISOString(), content: { tool_call_id: anchor.tool_call_id, tool_name: 'echo', arguments: { v: 'second' } } });
    await Promise.all([publish(h.subject('echo'), payload), publish(h.subject('echo'), { ...payload, tool_call_card_id: card2 })]);
    await eventually(() => h.store.getResultCardFor(anchor), 5000, 'the result');
    await sleep(500);
    assert.equal(h.runs.filter((x) => x === anchor.tool_call_id).length, 1);
    assert.equal(await h.store.countResultCards(anchor), 1);
  });

  test('agent_id that is not a subject token (wakeup subject injection): answered in the store, no wakeup published anywhere', async () => {
    for (const agentId of ['x.cmd.agent.victim', 'a.>', '*']) {
      const { payload, anchor } = await prepared('echo', {}, agentId);
      const before = wakeups.length;
      await publish(h.subject('echo'), payload);
      await eventually(() => h.store.getResultCardFor(anchor), 5000, 'the result');
      await sleep(200);
      assert.equal(wakeups.slice(before).filter((w) => w.payload.tool_call_id === anchor.tool_call_id).length, 0, agentId);
    }
  });

  test('duplicate keys in the command payload (agent_id twice), header/payload identity disagreeing: never run', async () => {
    const { payload, anchor } = await prepared('echo', {});
    const text = JSON.stringify(payload).replace('{', '{"agent_id":"agent-x",');
    await publish(h.subject('echo'), text);
    const b = await prepared('echo', {});
    await publish(h.subject('echo'), b.payload, { 'CG-Agent-Id': 'agent-x' });
    const c = await prepared('echo', {});
    await publish(h.subject('echo'), JSON.stringify(c.payload).replace(/}$/, `,"deep":${'['.repeat(20_000)}${']'.repeat(20_000)}}`));
    await sleep(1500);
    for (const x of [anchor, b.anchor, c.anchor]) assert.ok(!h.runs.includes(x.tool_call_id));
    const dropped = h.logs.filter((l) => l.event === 'dropped' || (l.event === 'invalid-command' && [anchor, b.anchor, c.anchor].some((x) => x.tool_call_id === l.tool_call_id)));
    assert.ok(dropped.length >= 3, JSON.stringify(dropped.map((l) => (l.problems as { code: string }[] | undefined)?.map((p) => p.code))));
  });

  test('a command on project B\'s subject naming project A\'s tool.call card of a tool B lacks: unknown tool, nothing runs', async () => {
    const { payload, anchor } = await prepared('wc.approve', { text: 'x' });
    await publish(defaultToolSubject('v1', projectB, h.channel, 'echo'), payload);
    const raw = await eventually(() => h.store.getResultCardFor(anchor), 5000, 'the result');
    const c = parseCard(raw);
    assert.ok(c.ok && c.value.type === 'tool.result');
    assert.equal(c.value.content.status, 'failed');
    assert.ok(!h.runs.includes(anchor.tool_call_id));
  });
});
