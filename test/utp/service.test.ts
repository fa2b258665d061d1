import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { headers as natsHeaders, type Msg, type Subscription } from 'nats';
import { CALLBACK_KEYS, parseCallback, parseCard, parseTraceparent, type ToolResultCard } from '../../src/contracts/utp.js';
import { generateOperatorKey, loadOperatorKey } from '../../src/approval/keys.js';
import { signUtpApproval } from '../../src/approval/sign-utp.js';
import { signApproval } from '../../src/approval/signature.js';
import { callOfSummary, utpCallBytes } from '../../src/approval/utp-call.js';
import { openAuditLog } from '../../src/audit/index.js';
import { readRunRecord } from '../../src/host/record.js';
import { loadPolicy } from '../../src/policy/load.js';
import type { ApprovalRecord, Store } from '../../src/store/types.js';
import { callTool, cancelTool, readAnswer } from '../../src/utp/client.js';
import { defaultToolSubject } from '../../src/utp/tools.js';
import { airlock } from '../helpers/cli.js';
import { addOperator } from '../helpers/operator.js';
import { eventually, natsOrFail, sleep, startHarness, type Harness } from './harness.js';

/** The UTP command path against real NATS JetStream and a SQLite store (postgres-service.test.ts: the same core on PostgreSQL). */

interface Wakeup {
  subject: string;
  payload: Record<string, unknown>;
  headers: Record<string, string>;
}

let h: Harness;
let alice: { keyDir: string; publicKey: string };
let sub: Subscription;
const wakeups: Wakeup[] = [];

before(async () => {
  h = await startHarness({
    db: 'sqlite',
    tools: (project, channel) => [
      // a person at a terminal is slower than the harness's 1.5 s approval tool
      { project_id: project, tool_name: 'echo.approve.slow', target_subject: defaultToolSubject('v1', project, channel, 'echo.approve.slow'), description: 'echo after a person approves', parameters: { type: 'object' }, after_execution: 'suspend', options: { runner: 'echo', approval: { required: true, timeout_ms: 60_000 } } },
      { project_id: project, tool_name: 'wc.approve', target_subject: defaultToolSubject('v1', project, channel, 'wc.approve'), description: 'print a text after a person approves', parameters: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] }, after_execution: 'suspend', options: { runner: 'command', argv: ['/usr/bin/printf', '%s', '{{text}}'], approval: { required: true, timeout_ms: 10_000 } } },
    ],
  });
  alice = addOperator(h.ws.policyFile, 'alice');
  sub = h.nc.subscribe(`cg.v1.${h.project}.${h.channel}.cmd.agent.*.wakeup`, {
    callback: (_e, m: Msg) => {
      const hs: Record<string, string> = {};
      if (m.headers) for (const k of m.headers.keys()) hs[k] = m.headers.get(k);
      wakeups.push({ subject: m.subject, payload: JSON.parse(new TextDecoder().decode(m.data)), headers: hs });
    },
  });
});
after(async () => {
  sub?.unsubscribe();
  await h?.stop();
});

const ids = () => ({ agentTurnId: `turn-${randomUUID()}`, toolCallId: `call-${randomUUID()}` });
const call = (tool: string, args: Record<string, unknown>, extra: Partial<Parameters<typeof callTool>[0]> = {}) =>
  callTool({ nats: h.nc, store: h.store, subject: h.subject(tool), tool, agentId: 'agent-1', turnEpoch: 3, arguments: args as never, timeoutMs: 10_000, ...ids(), ...extra });

/** Writes a tool.call card and returns a valid command payload for it (for hand-made messages). */
async function prepared(tool: string, args: Record<string, unknown> = {}, store: Store = h.store) {
  const { agentTurnId, toolCallId } = ids();
  const cardId = `card-call-${randomUUID()}`;
  await store.putCard({ card_id: cardId, type: 'tool.call', created_at: new Date().toISOString(), content: { tool_call_id: toolCallId, tool_name: tool, arguments: args } });
  const payload: Record<string, unknown> = { agent_id: 'agent-1', agent_turn_id: agentTurnId, turn_epoch: 1, tool_call_id: toolCallId, after_execution: 'suspend', tool_call_card_id: cardId };
  return { payload, anchor: { agent_turn_id: agentTurnId, tool_call_id: toolCallId }, cardId };
}

async function publish(subject: string, data: unknown, hs: Record<string, string> = {}): Promise<void> {
  const hdr = natsHeaders();
  for (const [k, v] of Object.entries(hs)) hdr.set(k, v);
  const bytes = data instanceof Uint8Array ? data : new TextEncoder().encode(typeof data === 'string' ? data : JSON.stringify(data));
  await h.nc.jetstream().publish(subject, bytes, { headers: hdr });
}

async function resultOf(anchor: { agent_turn_id: string; tool_call_id: string }, ms = 5000): Promise<ToolResultCard> {
  const raw = await eventually(() => h.store.getResultCardFor(anchor), ms, `a tool.result for ${anchor.tool_call_id}`);
  const c = parseCard(raw);
  assert.ok(c.ok, JSON.stringify(!c.ok && c.problems));
  assert.equal(c.value.type, 'tool.result');
  return c.value as ToolResultCard;
}

const problemCodes = (card: ToolResultCard): string[] =>
  (((card.content.error?.detail as { problems?: { code: string }[] } | undefined)?.problems ?? []) as { code: string }[]).map((p) => p.code);

describe('the happy path', () => {
  test('callTool: card, command, run, one result card, one report, a wakeup with exactly the routing fields', async () => {
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const r = await call('echo', { hello: 'world', n: [1, 2] }, { stepId: 'step-9', traceId: '4bf92f3577b34da6a3ce929d0e0e4736', traceparent, afterExecution: 'terminate' });
    assert.ok(r.ok, JSON.stringify(!r.ok && r.problems));
    assert.equal(r.status, 'success');
    assert.deepEqual(r.content.result, { runner: 'echo', echo: { hello: 'world', n: [1, 2] } });
    assert.equal(r.content.tool_call_id, r.toolCallId);
    // The callback: routing and pointer fields only, untouched.
    const w = wakeups.find((x) => x.payload.tool_call_id === r.toolCallId);
    assert.ok(w, 'a wakeup was published');
    assert.equal(w.subject, `cg.v1.${h.project}.${h.channel}.cmd.agent.agent-1.wakeup`);
    assert.deepEqual(Object.keys(w.payload).sort(), [...CALLBACK_KEYS].sort());
    assert.equal(w.payload.agent_turn_id, r.callback.agent_turn_id);
    assert.equal(w.payload.turn_epoch, 3);
    assert.equal(w.payload.after_execution, 'terminate');
    assert.equal(w.payload.tool_result_card_id, r.card.card_id);
    assert.equal(w.payload.step_id, 'step-9');
    assert.ok(parseCallback(w.payload, w.headers).ok, 'payload and CG-* headers agree');
    assert.equal(w.headers['CG-Turn-Epoch'], '3');
    // Trace: result metadata copies trace_id/step_id; traceparent is a child span of the command's.
    assert.equal(r.card.metadata?.trace_id, '4bf92f3577b34da6a3ce929d0e0e4736');
    assert.equal(r.card.metadata?.step_id, 'step-9');
    const child = parseTraceparent(r.card.metadata?.traceparent);
    assert.ok(child.ok);
    assert.equal(child.value.traceId, '4bf92f3577b34da6a3ce929d0e0e4736');
    assert.notEqual(child.value.parentId, '00f067aa0ba902b7');
    assert.equal(w.headers.traceparent, r.card.metadata?.traceparent);
    assert.equal(r.afterExecution, 'terminate', 'no __cg_control: the command\'s after_execution applies');
    // One report in the inbox, equal to the callback.
    const inbox = await h.store.listInbox({ anchor: { agent_turn_id: r.callback.agent_turn_id, tool_call_id: r.toolCallId } });
    assert.equal(inbox.length, 1);
    assert.deepEqual(inbox[0]?.payload, w.payload);
  });

  test('identity in CG-* headers only, or in the payload only: both accepted', async () => {
    const a = await call('echo', { x: 1 }, { identityIn: 'headers' });
    assert.ok(a.ok && a.status === 'success', JSON.stringify(a));
    const b = await call('echo', { x: 2 }, { identityIn: 'payload' });
    assert.ok(b.ok && b.status === 'success', JSON.stringify(b));
  });

  test('lineage: the tool.result card copies parent_step_id from the tool.call card, with trace_id and step_id', async () => {
    const r = await call('echo', { x: 1 }, { stepId: 'step-7', parentStepId: 'step-6', traceId: '4bf92f3577b34da6a3ce929d0e0e4736' });
    assert.ok(r.ok && r.status === 'success', JSON.stringify(r));
    assert.equal(r.card.metadata?.parent_step_id, 'step-6');
    assert.equal(r.card.metadata?.step_id, 'step-7');
    assert.equal(r.card.metadata?.trace_id, '4bf92f3577b34da6a3ce929d0e0e4736');
    const w = wakeups.find((x) => x.payload.tool_call_id === r.toolCallId);
    assert.equal(w?.headers['CG-Project-Id'], h.project);
    assert.equal(w?.headers['CG-Channel-Id'], h.channel);
  });

  test('CG-Project-Id / CG-Channel-Id that disagree with the subject: refused (UTP_ROUTE_CONFLICT), the tool never runs', async () => {
    for (const hs of [{ 'CG-Project-Id': 'another-project' }, { 'CG-Channel-Id': 'another-channel' }] as Record<string, string>[]) {
      const { payload, anchor } = await prepared('echo', { k: 'v' });
      await publish(h.subject('echo'), payload, hs);
      const card = await resultOf(anchor);
      assert.equal(card.content.status, 'failed');
      assert.equal(card.content.error?.code, 'bad_request');
      assert.deepEqual(problemCodes(card), ['UTP_ROUTE_CONFLICT']);
      assert.ok(!h.runs.includes(anchor.tool_call_id));
    }
    // Agreeing headers are fine.
    const ok = await prepared('echo', { k: 'v' });
    await publish(h.subject('echo'), ok.payload, { 'CG-Project-Id': h.project, 'CG-Channel-Id': h.channel });
    assert.equal((await resultOf(ok.anchor)).content.status, 'success');
  });

  test('unknown extra payload fields are ignored', async () => {
    const { payload, anchor } = await prepared('echo', { k: 'v' });
    await publish(h.subject('echo'), { ...payload, future_field: { deep: true }, context_box_id: 'box-1' });
    const card = await resultOf(anchor);
    assert.equal(card.content.status, 'success');
  });

  test('a command template tool runs its argv in the sandbox with the argument as one argv element', async () => {
    const r = await call('wc', { text: 'a b; rm -rf /' });
    assert.ok(r.ok);
    assert.equal(r.status, 'success', JSON.stringify(r.content));
    assert.equal((r.content.result as { stdout: { text: string } }).stdout.text, 'a b; rm -rf /');
  });
});

describe('validation: recoverable commands get a failed tool.result and the tool never runs', () => {
  const failedWith = async (anchor: { agent_turn_id: string; tool_call_id: string }, code: string, problem?: string) => {
    const card = await resultOf(anchor);
    assert.equal(card.content.status, 'failed');
    assert.equal(card.content.error?.code, code);
    if (problem) assert.ok(problemCodes(card).includes(problem), `expected ${problem} in ${JSON.stringify(card.content.error)}`);
    assert.ok(!h.runs.includes(anchor.tool_call_id), 'the tool did not run');
    const w = await eventually(() => wakeups.find((x) => x.payload.tool_call_id === anchor.tool_call_id), 3000, 'the wakeup');
    assert.equal(w.payload.status, 'failed');
    assert.equal(w.payload.tool_result_card_id, card.card_id);
    return card;
  };

  for (const k of ['args', 'arguments', 'result']) {
    test(`inline \`${k}\` is refused (UTP_INLINE_ARGS)`, async () => {
      const { payload, anchor } = await prepared('echo');
      await publish(h.subject('echo'), { ...payload, [k]: { x: 1 } });
      await failedWith(anchor, 'bad_request', 'UTP_INLINE_ARGS');
    });
  }

  test('missing tool_call_card_id: failed (UTP_MISSING_FIELD)', async () => {
    const { payload, anchor } = await prepared('echo');
    delete payload.tool_call_card_id;
    await publish(h.subject('echo'), payload);
    await failedWith(anchor, 'bad_request', 'UTP_MISSING_FIELD');
  });

  test('missing after_execution: answered with the tool\'s registered after_execution', async () => {
    const { payload, anchor } = await prepared('echo');
    delete payload.after_execution;
    await publish(h.subject('echo'), payload);
    const card = await failedWith(anchor, 'bad_request', 'UTP_MISSING_FIELD');
    assert.equal(card.content.after_execution, 'suspend');
  });

  test('the tool.call card does not exist', async () => {
    const { payload, anchor } = await prepared('echo');
    await publish(h.subject('echo'), { ...payload, tool_call_card_id: 'card-none' });
    await failedWith(anchor, 'bad_request', 'UTPS_CARD_NOT_FOUND');
  });

  test('the card\'s tool_call_id differs from the command\'s (UTP_CARD_MISMATCH)', async () => {
    const { payload, anchor, cardId } = await prepared('echo');
    const other = await prepared('echo');
    await publish(h.subject('echo'), { ...other.payload, tool_call_card_id: cardId });
    await failedWith(other.anchor, 'bad_request', 'UTP_CARD_MISMATCH');
    void payload;
    void anchor;
  });

  test('arguments that break the tool\'s parameters (UTPS_BAD_ARGUMENTS)', async () => {
    const { payload, anchor } = await prepared('echo.strict', { n: -1, extra: true });
    await publish(h.subject('echo.strict'), payload);
    await failedWith(anchor, 'bad_request', 'UTPS_BAD_ARGUMENTS');
    const ok = await call('echo.strict', { n: 2 });
    assert.ok(ok.ok && ok.status === 'success');
  });

  test('a tool not in the registry, and a tool published on another tool\'s subject', async () => {
    const a = await prepared('no.such.tool');
    await publish(h.subject('echo'), a.payload);
    await failedWith(a.anchor, 'bad_request', 'UTPS_UNKNOWN_TOOL');
    const b = await prepared('echo.strict', { n: 1 });
    await publish(h.subject('echo'), b.payload);
    await failedWith(b.anchor, 'bad_request', 'UTPS_WRONG_SUBJECT');
  });

  test('a wrong type in a non-identity field (after_execution: 5)', async () => {
    const { payload, anchor } = await prepared('echo');
    await publish(h.subject('echo'), { ...payload, after_execution: 5 });
    await failedWith(anchor, 'bad_request', 'UTP_BAD_AFTER_EXECUTION');
  });

  test('a malformed traceparent header beside a whole identity: failed (UTP_TRACEPARENT), not dropped', async () => {
    const { payload, anchor } = await prepared('echo');
    await publish(h.subject('echo'), payload, { traceparent: 'not-a-traceparent' });
    const card = await failedWith(anchor, 'bad_request', 'UTP_TRACEPARENT');
    assert.equal(card.metadata?.traceparent, undefined, 'no span is derived from the bad header');
    assert.equal((await h.store.listInbox({ anchor })).length, 1, 'a report');
    const logged = h.logs.find((l) => l.event === 'invalid-command' && l.tool_call_id === anchor.tool_call_id);
    assert.deepEqual((logged?.problems as { code: string }[]).map((p) => p.code), ['UTP_TRACEPARENT'], 'the problem is logged once');
  });

  test('a step_id of the wrong type beside a whole identity: failed (UTP_BAD_ID), not dropped', async () => {
    const { payload, anchor } = await prepared('echo');
    await publish(h.subject('echo'), { ...payload, step_id: 42 });
    const card = await failedWith(anchor, 'bad_request', 'UTP_BAD_ID');
    assert.deepEqual(problemCodes(card), ['UTP_BAD_ID'], 'listed once');
    assert.equal(card.metadata?.step_id, undefined, 'the bad step_id is left out of the answer');
    const w = wakeups.find((x) => x.payload.tool_call_id === anchor.tool_call_id);
    assert.equal(w?.payload.step_id, undefined);
    assert.equal((await h.store.listInbox({ anchor })).length, 1, 'a report');
  });

  test('an over-size payload with the identity in headers is answered (UTPS_PAYLOAD_TOO_LARGE)', async () => {
    const { payload, anchor } = await prepared('echo');
    const big = JSON.stringify({ ...payload, padding: 'x'.repeat(200 * 1024) });
    await publish(h.subject('echo'), big, { 'CG-Agent-Id': 'agent-1', 'CG-Turn-Id': anchor.agent_turn_id, 'CG-Turn-Epoch': '1', 'CG-Tool-Call-Id': anchor.tool_call_id });
    await failedWith(anchor, 'bad_request', 'UTPS_PAYLOAD_TOO_LARGE');
  });
});

describe('unrecoverable messages are acknowledged, logged with a reason, and never poison the consumer', () => {
  const dropsBefore = () => h.service.stats.dropped;

  test('not JSON, binary junk, wrong identity types, a header/payload conflict, a 10 MB payload: dropped or refused, and the service keeps serving', async () => {
    const n0 = dropsBefore();
    await publish(h.subject('echo'), 'this is { not json');
    await publish(h.subject('echo'), new Uint8Array([0xff, 0xfe, 0x00, 0x01, 0x80]));
    const { payload } = await prepared('echo');
    await publish(h.subject('echo'), { ...payload, turn_epoch: '3', agent_turn_id: 12 });
    const conflict = await prepared('echo');
    await publish(h.subject('echo'), conflict.payload, { 'CG-Turn-Id': 'another-turn' });
    await publish(h.subject('echo'), '[1,2,3]');
    await eventually(() => (h.service.stats.dropped >= n0 + 5 ? true : undefined), 5000, 'five drops');
    const reasons = h.logs.filter((l) => l.event === 'dropped').map((l) => (l.problems as { code: string }[]).map((p) => p.code));
    assert.ok(reasons.some((r) => r.includes('JSON_SYNTAX')), JSON.stringify(reasons));
    assert.ok(reasons.some((r) => r.includes('UTPS_PAYLOAD_NOT_UTF8')));
    assert.ok(reasons.some((r) => r.includes('UTP_IDENTITY_CONFLICT')), 'a conflicting identity is never answered: no one knows which is true');
    assert.ok(reasons.some((r) => r.includes('UTP_BAD_TURN_EPOCH') || r.includes('UTP_BAD_ID')));
    assert.equal(await h.store.getResultCardFor(conflict.anchor), undefined);
    for (const l of h.logs.filter((x) => x.event === 'dropped')) {
      const ps = (l.problems as object[]).map((p) => JSON.stringify(p));
      assert.equal(new Set(ps).size, ps.length, `each problem is logged once: ${ps.join(' ')}`);
    }
    // 10 MB: NATS itself refuses it (max_payload), before any worker sees it.
    await assert.rejects(publish(h.subject('echo'), 'x'.repeat(10 * 1024 * 1024)), /payload|MAX_PAYLOAD/i);
    // Still serving, and nothing is stuck in the consumer.
    const r = await call('echo', { after: 'junk' });
    assert.ok(r.ok && r.status === 'success');
    const info = await (await h.nc.jetstreamManager()).consumers.info(h.stream, h.durable);
    assert.equal(info.num_ack_pending, 0);
  });
});

describe('exactly one answer per call', () => {
  test('the same command delivered twice: one run, one result card, one report; both wakeups name the same card', async () => {
    const { payload, anchor } = await prepared('echo', { once: true });
    await publish(h.subject('echo'), payload);
    await publish(h.subject('echo'), payload);
    const card = await resultOf(anchor);
    await eventually(() => (wakeups.filter((w) => w.payload.tool_call_id === anchor.tool_call_id).length >= 2 ? true : undefined), 5000, 'two wakeups');
    const ws = wakeups.filter((w) => w.payload.tool_call_id === anchor.tool_call_id);
    assert.ok(ws.every((w) => w.payload.tool_result_card_id === card.card_id));
    assert.equal(h.runs.filter((x) => x === anchor.tool_call_id).length, 1, 'ran once');
    assert.equal(await h.store.countResultCards(anchor), 1);
    assert.equal((await h.store.listInbox({ anchor })).length, 1, 'no duplicate report');
  });

  test('callTool retried with the same toolCallId: the same result card, one run, one report, one tool.call card', async () => {
    // An agent that lost its first answer (a crash, a timeout) calls again with the same ids: it must
    // get the same answer, not a JetStream-deduplicated silence (UTPC_TIMEOUT) and not a second run.
    const i = ids();
    const written: { card_id: string; inserted: boolean }[] = [];
    const recording = new Proxy(h.store, {
      get(target, prop, recv) {
        if (prop === 'putCard') {
          return async (card: { card_id: string; type: string }, anchor?: never) => {
            const inserted = await target.putCard(card as never, anchor);
            if (card.type === 'tool.call') written.push({ card_id: card.card_id, inserted });
            return inserted;
          };
        }
        const v = Reflect.get(target, prop, recv);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
    const first = await call('echo', { retry: 1 }, { ...i, store: recording, timeoutMs: 8000 });
    assert.ok(first.ok && first.status === 'success', JSON.stringify(first));
    const again = await call('echo', { retry: 1 }, { ...i, store: recording, timeoutMs: 8000 });
    assert.ok(again.ok, JSON.stringify(again));
    assert.equal(again.status, 'success');
    assert.equal(again.card.card_id, first.card.card_id, 'the same tool.result card');
    const anchor = { agent_turn_id: i.agentTurnId, tool_call_id: i.toolCallId };
    assert.equal(h.runs.filter((x) => x === i.toolCallId).length, 1, 'ran once');
    assert.equal(await h.store.countResultCards(anchor), 1);
    assert.equal((await h.store.listInbox({ anchor })).length, 1, 'one report');
    assert.equal(written.length, 2);
    assert.equal(written[1]?.card_id, written[0]?.card_id, 'the retry names the same tool.call card');
    assert.deepEqual(written.map((w) => w.inserted), [true, false], 'and does not write a second one');
  });

  test('a platform\'s retry with the same Nats-Msg-Id is not swallowed by JetStream: woken again with the same card', async () => {
    // Deployed platforms set Nats-Msg-Id to the call's id; the stream's duplicate window must not hide the retry.
    const { payload, anchor } = await prepared('echo', { msgid: true });
    await publish(h.subject('echo'), payload, { 'Nats-Msg-Id': anchor.tool_call_id });
    const card = await resultOf(anchor);
    await eventually(() => wakeups.find((w) => w.payload.tool_call_id === anchor.tool_call_id), 3000, 'the first wakeup');
    await sleep(200); // past the stream's (minimum) duplicate window
    await publish(h.subject('echo'), payload, { 'Nats-Msg-Id': anchor.tool_call_id });
    await eventually(() => (wakeups.filter((w) => w.payload.tool_call_id === anchor.tool_call_id).length >= 2 ? true : undefined), 5000, 'a second wakeup for the retry');
    assert.ok(wakeups.filter((w) => w.payload.tool_call_id === anchor.tool_call_id).every((w) => w.payload.tool_result_card_id === card.card_id));
    assert.equal(h.runs.filter((x) => x === anchor.tool_call_id).length, 1, 'ran once');
    assert.equal((await h.store.listInbox({ anchor })).length, 1, 'one report');
  });

  test('a call that runs longer than ack_wait is acknowledged while it runs: never redelivered', async () => {
    // The ack of a won call waits for its wakeup (one socket write) only briefly: this call runs
    // 2.6 s against the harness's 2 s ack_wait, and JetStream must not hand it out again.
    const { toolCallId, agentTurnId } = ids();
    const r = await call('echo', { delay_ms: 2600 }, { toolCallId, agentTurnId });
    assert.ok(r.ok);
    assert.equal(r.status, 'success');
    await sleep(300);
    const dup = h.logs.filter((e) => e.event === 'duplicate' && e.tool_call_id === toolCallId);
    assert.deepEqual(dup, [], 'no redelivery of the running call');
  });

  test('a claim whose worker died (lease expired) is answered failed/executor_lost, and the tool is not re-run', async () => {
    const { payload, anchor, cardId } = await prepared('echo');
    const ctx = { subject: h.subject('echo'), identity: { agent_id: 'agent-1', agent_turn_id: anchor.agent_turn_id, turn_epoch: 1, tool_call_id: anchor.tool_call_id }, after_execution: 'suspend', tool_call_card_id: cardId };
    await h.store.claim(anchor, cardId, 'a-dead-worker', 300, ctx);
    const card = await resultOf(anchor, 5000);
    assert.equal(card.content.status, 'failed');
    assert.equal(card.content.error?.code, 'executor_lost');
    const w = await eventually(() => wakeups.find((x) => x.payload.tool_call_id === anchor.tool_call_id), 3000, 'the wakeup');
    assert.equal(w.payload.tool_result_card_id, card.card_id);
    // The command arriving late (redelivery) does not run it.
    await publish(h.subject('echo'), payload);
    await sleep(300);
    assert.ok(!h.runs.includes(anchor.tool_call_id));
    assert.equal(await h.store.countResultCards(anchor), 1);
  });

  test('a claim in this worker\'s name that no run of its owns (its reply was lost) is not kept alive: answered executor_lost', async () => {
    // e.g. the claim committed but the connection dropped before the reply: the command was nak'ed,
    // and its redelivery found the claim. A call this worker IS running keeps the heartbeat busy.
    const long = call('echo', { delay_ms: 2500 });
    await sleep(100);
    const { anchor, cardId } = await prepared('echo');
    const ctx = { subject: h.subject('echo'), identity: { agent_id: 'agent-1', agent_turn_id: anchor.agent_turn_id, turn_epoch: 1, tool_call_id: anchor.tool_call_id }, after_execution: 'suspend', tool_call_card_id: cardId };
    await h.store.claim(anchor, cardId, h.service.workerId, 1000, ctx);
    const card = await resultOf(anchor, 2300);
    assert.equal(card.content.error?.code, 'executor_lost', 'answered while the other call still runs');
    assert.ok(!h.runs.includes(anchor.tool_call_id));
    const r = await long;
    assert.ok(r.ok && r.status === 'success');
  });

  test('an answered call whose wakeup was never published gets it from a sweeper', async () => {
    const { anchor, cardId } = await prepared('echo');
    await h.store.claim(anchor, cardId, 'w-crashed-after-commit', 60_000, {});
    const wakeup = { subject: `cg.v1.${h.project}.${h.channel}.cmd.agent.agent-1.wakeup`, payload: { agent_id: 'agent-1', ...anchor, turn_epoch: 1, tool_result_card_id: 'card-r', status: 'success', after_execution: 'suspend' }, headers: {} };
    await h.store.answer({
      ...anchor,
      worker_id: 'w-crashed-after-commit',
      card: { card_id: 'card-r-' + randomUUID(), type: 'tool.result', created_at: new Date().toISOString(), content: { status: 'success', after_execution: 'suspend' } },
      report: { agent_id: 'agent-1', kind: 'tool.report', payload: wakeup.payload },
      wakeup,
    });
    await eventually(() => wakeups.find((x) => x.payload.tool_call_id === anchor.tool_call_id), 5000, 'the re-published wakeup');
    await eventually(async () => ((await h.store.getClaim(anchor))?.woken ? true : undefined), 2000, 'woken');
  });
});

describe('timeouts, cancel, approvals', () => {
  test('a run over its wall limit answers timeout / tool_timeout', async () => {
    const r = await call('echo.short', { delay_ms: 5000 });
    assert.ok(r.ok);
    assert.equal(r.status, 'timeout');
    assert.equal(r.content.error?.code, 'tool_timeout');
  });

  test('cancel while it runs: canceled', async () => {
    const i = ids();
    const pending = call('echo', { delay_ms: 20_000 }, i);
    await eventually(() => (h.runs.includes(i.toolCallId) ? true : undefined), 5000, 'the run to start');
    const t0 = Date.now();
    assert.deepEqual(await cancelTool({ nats: h.nc, subject: h.subject('echo'), agentId: 'agent-1', agentTurnId: i.agentTurnId, turnEpoch: 3, toolCallId: i.toolCallId }), []);
    const r = await pending;
    assert.ok(r.ok);
    assert.equal(r.status, 'canceled');
    assert.equal(r.content.error?.code, 'canceled');
    assert.ok(Date.now() - t0 < 3000, 'promptly');
  });

  test('a cancel before the command waits for it (only the command says who may cancel): the call is canceled once it runs', async () => {
    const { payload, anchor } = await prepared('echo', { delay_ms: 20_000 });
    await cancelTool({ nats: h.nc, subject: h.subject('echo'), agentId: 'agent-1', agentTurnId: anchor.agent_turn_id, turnEpoch: 1, toolCallId: anchor.tool_call_id });
    await eventually(() => h.logs.find((l) => l.event === 'cancel-waits-for-call' && l.tool_call_id === anchor.tool_call_id), 5000, 'the cancel to wait');
    assert.equal(await h.store.getClaim(anchor), undefined, 'a cancel claims nothing');
    await publish(h.subject('echo'), payload);
    const card = await resultOf(anchor, 8000);
    assert.equal(card.content.status, 'canceled');
    assert.equal(await h.store.countResultCards(anchor), 1);
  });

  test('attack: agent B, subscribed to the project\'s command subjects, cancels agent A\'s call under its own agent_id: refused (UTPS_CANCEL_NOT_AUTHORIZED), logged, audited; A\'s call is answered normally', async () => {
    // B listens to every command of the project, as any agent with subscribe rights on it can.
    const seen: { payload: Record<string, unknown>; headers: Record<string, string> }[] = [];
    const spy = h.nc.subscribe(`cg.v1.${h.project}.${h.channel}.cmd.tool.>`, {
      callback: (_e, m: Msg) => {
        const hs: Record<string, string> = {};
        if (m.headers) for (const k of m.headers.keys()) hs[k] = m.headers.get(k);
        seen.push({ payload: JSON.parse(new TextDecoder().decode(m.data)), headers: hs });
      },
    });
    try {
      const i = ids();
      const pending = call('echo', { delay_ms: 1500 }, { ...i, agentId: 'agent-a' });
      const observed = await eventually(() => seen.find((x) => x.payload.tool_call_id === i.toolCallId), 5000, 'B to see A\'s command');
      await eventually(() => (h.runs.includes(i.toolCallId) ? true : undefined), 5000, 'A\'s call to run');
      // B copies the call's identity and signs the cancel with its own agent_id.
      const problems = await cancelTool({
        nats: h.nc,
        subject: h.subject('echo'),
        agentId: 'agent-b',
        agentTurnId: String(observed.payload.agent_turn_id),
        turnEpoch: Number(observed.payload.turn_epoch),
        toolCallId: String(observed.payload.tool_call_id),
        toolCallCardId: String(observed.payload.tool_call_card_id),
      });
      assert.deepEqual(problems, []);
      const refusal = await eventually(() => h.logs.find((l) => l.event === 'cancel-refused' && l.tool_call_id === i.toolCallId), 5000, 'the refusal in the log');
      assert.equal(refusal.code, 'UTPS_CANCEL_NOT_AUTHORIZED');
      assert.equal(refusal.agent_id, 'agent-b');
      assert.equal(refusal.caller_agent_id, 'agent-a');
      const r = await pending;
      assert.ok(r.ok, JSON.stringify(r));
      assert.equal(r.status, 'success', 'A\'s call went on and was answered normally');
      const audited = openAuditLog(h.ws.auditFile).show().find((a) => a.type === 'refused' && a.detail?.tool_call_id === i.toolCallId);
      assert.ok(audited, 'the refusal is in the audit log');
      assert.equal(audited.detail?.stage, 'cancel');
      assert.deepEqual(audited.detail?.codes, ['UTPS_CANCEL_NOT_AUTHORIZED']);
      assert.equal(audited.actor, 'agent:agent-b');
      assert.equal(openAuditLog(h.ws.auditFile).verify().ok, true);
      // The caller itself still can: same agent, same turn.
      const j = ids();
      const mine = call('echo', { delay_ms: 20_000 }, { ...j, agentId: 'agent-a' });
      await eventually(() => (h.runs.includes(j.toolCallId) ? true : undefined), 5000, 'the second call to run');
      assert.deepEqual(await cancelTool({ nats: h.nc, subject: h.subject('echo'), agentId: 'agent-a', agentTurnId: j.agentTurnId, turnEpoch: 3, toolCallId: j.toolCallId }), []);
      const r2 = await mine;
      assert.ok(r2.ok && r2.status === 'canceled', JSON.stringify(r2));
    } finally {
      spy.unsubscribe();
    }
  });

  test('an operator cancels any running call with `airlock calls cancel` (through the store; the worker stops it at its heartbeat)', async () => {
    const i = ids();
    const pending = call('echo', { delay_ms: 20_000 }, i);
    await eventually(() => (h.runs.includes(i.toolCallId) ? true : undefined), 5000, 'the run to start');
    const c = airlock(['calls', 'cancel', i.agentTurnId, i.toolCallId, '--by', 'ops', '--workspace', h.ws.root]);
    assert.equal(c.code, 0, c.stderr);
    const r = await pending;
    assert.ok(r.ok && r.status === 'canceled', JSON.stringify(r));
    assert.ok(openAuditLog(h.ws.auditFile).show().some((a) => a.type === 'cancel_requested' && a.actor === 'ops' && a.detail?.tool_call_id === i.toolCallId));
  });

  /** An operator's real approval: the row's call signed with alice's key, as `airlock approvals approve` does. */
  const approveSigned = async (a: ApprovalRecord): Promise<void> => {
    const policy = loadPolicy(h.ws.policyFile);
    assert.ok(policy.ok);
    const signed = signUtpApproval({ row: a, operator: 'alice', keyDir: alice.keyDir, policy: policy.value, now: new Date() });
    assert.ok(signed.ok, JSON.stringify(!signed.ok && signed.problems));
    assert.equal(await h.store.decideApproval(a.id, 'approved', 'alice', null, signed.signature), true);
  };
  const pendingFor = (toolCallId: string) => eventually(async () => (await h.store.listApprovals('pending')).find((x) => x.tool_call_id === toolCallId), 5000, 'a pending approval');

  test('approval: waits in `approvals` until approved with a signature (runs), rejected (failed/auth_failed) or timed out', async () => {
    const i1 = ids();
    const p1 = call('echo.approve', { v: i1.toolCallId.slice(0, 10) }, i1);
    const a1 = await pendingFor(i1.toolCallId);
    assert.deepEqual(a1.summary.arguments, { v: i1.toolCallId.slice(0, 10) });
    assert.ok(!h.runs.includes(i1.toolCallId), 'nothing runs before the decision');
    await approveSigned(a1);
    const r1 = await p1;
    assert.ok(r1.ok && r1.status === 'success', JSON.stringify(r1));
    const keyId = createHash('sha256').update(alice.publicKey).digest('hex').slice(0, 16);
    const approved = openAuditLog(h.ws.auditFile).show().find((x) => x.type === 'approved' && x.detail?.tool_call_id === i1.toolCallId);
    assert.equal(approved?.detail?.decision_source, `key:alice:${keyId}`, 'the decision source is the operator\'s key id');
    const i2 = ids();
    const p2 = call('echo.approve', { v: i2.toolCallId.slice(0, 10) }, i2);
    const a2 = await pendingFor(i2.toolCallId);
    assert.equal(await h.store.decideApproval(a2.id, 'rejected', 'tester', 'not today'), true);
    const r2 = await p2;
    assert.ok(r2.ok);
    assert.equal(r2.status, 'failed');
    assert.equal(r2.content.error?.code, 'auth_failed');
    assert.ok(!h.runs.includes(i2.toolCallId));
    const r3 = await call('echo.approve', { v: 'x' });
    assert.ok(r3.ok);
    assert.equal(r3.status, 'timeout');
    assert.equal(r3.content.error?.code, 'tool_timeout');
    assert.match(JSON.stringify(r3.content.error?.detail), /UTPS_APPROVAL_TIMEOUT/);
  });

  test('attack: an "approved" row written straight into the store without a valid signature runs nothing (unsigned, a key the policy does not list, a signature over other arguments)', async () => {
    const mallory = generateOperatorKey('mallory', mkdtempSync(join(tmpdir(), 'airlock-keys-')));
    assert.ok(!('error' in mallory));
    const forgeries: { name: string; code: string; forge: (a: ApprovalRecord) => string | null; by: string }[] = [
      { name: 'no signature at all', code: 'APPROVAL_UNSIGNED', forge: () => null, by: 'alice' },
      { name: 'garbage', code: 'APPROVAL_SIGNATURE_INVALID', forge: () => '{"alg":"ed25519"}', by: 'alice' },
      {
        name: 'signed by a key the policy does not list',
        code: 'APPROVAL_UNTRUSTED_KEY',
        forge: (a) => {
          const k = loadOperatorKey('mallory', mallory.privateKeyPath.replace(/\/mallory\.ed25519\.pem$/, ''));
          assert.ok(!('error' in k));
          const call = callOfSummary(a.summary);
          assert.ok(call);
          return JSON.stringify(signApproval({ requestId: a.id, bytes: utpCallBytes(call), operator: 'mallory', key: k.key, publicKey: k.publicKey, now: new Date() }));
        },
        by: 'mallory',
      },
      {
        name: 'alice\'s real key over other arguments (what a tampered row would show her)',
        code: 'APPROVAL_TAMPERED',
        forge: (a) => {
          const k = loadOperatorKey('alice', alice.keyDir);
          assert.ok(!('error' in k));
          const call = callOfSummary(a.summary);
          assert.ok(call);
          return JSON.stringify(signApproval({ requestId: a.id, bytes: utpCallBytes({ ...call, arguments: { v: 'harmless' } }), operator: 'alice', key: k.key, publicKey: k.publicKey, now: new Date() }));
        },
        by: 'alice',
      },
    ];
    for (const f of forgeries) {
      const i = ids();
      const p = call('echo.approve', { v: i.toolCallId.slice(0, 10) }, i);
      const a = await pendingFor(i.toolCallId);
      // The attacker has the store: the row says approved, by a listed operator's name.
      assert.equal(await h.store.decideApproval(a.id, 'approved', f.by, null, f.forge(a)), true);
      const r = await p;
      assert.ok(r.ok, f.name);
      assert.equal(r.status, 'failed', f.name);
      assert.equal(r.content.error?.code, 'auth_failed', f.name);
      assert.ok(JSON.stringify(r.content.error?.detail).includes(f.code), `${f.name}: ${JSON.stringify(r.content.error?.detail)}`);
      assert.ok(!h.runs.includes(i.toolCallId), `${f.name}: the call did not run`);
      const refused = openAuditLog(h.ws.auditFile).show().find((x) => x.type === 'refused' && x.detail?.tool_call_id === i.toolCallId);
      assert.equal(refused?.detail?.stage, 'approval', f.name);
      assert.deepEqual(refused?.detail?.codes, [f.code], f.name);
    }
  });

  test('a signed approval of a tool that runs in the sandbox: the host core\'s run record and audit name the key as the decision source', async () => {
    const i = ids();
    const p = call('wc.approve', { text: 'signed' }, i);
    await approveSigned(await pendingFor(i.toolCallId));
    const r = await p;
    assert.ok(r.ok && r.status === 'success', JSON.stringify(r));
    const sandboxId = (r.content.result as { sandbox_id: string }).sandbox_id;
    const record = readRunRecord(join(h.ws.runs, sandboxId));
    const keyId = createHash('sha256').update(alice.publicKey).digest('hex').slice(0, 16);
    assert.equal(record?.door, 'utp');
    assert.equal(record?.decision.source, `key:alice:${keyId}`);
    const executed = openAuditLog(h.ws.auditFile).show().find((x) => x.type === 'executed' && x.sandbox_id === sandboxId);
    assert.equal(executed?.detail?.decision_source, `key:alice:${keyId}`);
  });

  test('approval through the real CLI: a live call waits in `airlock approvals list` and runs once `airlock approvals approve --operator` signs it', async () => {
    const i = ids();
    const pending = call('echo.approve.slow', { v: 'cli' }, i);
    const listed = await eventually(() => {
      const l = airlock(['approvals', 'list', '--json', '--workspace', h.ws.root]);
      const rows = JSON.parse(l.stdout || '[]') as { id: string; tool_call_id: string }[];
      return rows.find((r) => r.tool_call_id === i.toolCallId);
    }, 5000, 'the call listed by `airlock approvals list`');
    assert.ok(!h.runs.includes(i.toolCallId), 'nothing runs before the decision');
    const unsigned = airlock(['approvals', 'approve', listed.id, '--operator', 'bob', '--key-dir', alice.keyDir, '--workspace', h.ws.root]);
    assert.equal(unsigned.code, 2, 'no key for bob: nothing is approved');
    assert.equal((await h.store.getApproval(listed.id))?.state, 'pending');
    const ok = airlock(['approvals', 'approve', listed.id, '--operator', 'alice', '--key-dir', alice.keyDir, '--workspace', h.ws.root]);
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, /signed by alice/);
    const r = await pending;
    assert.ok(r.ok && r.status === 'success', JSON.stringify(r));
    assert.ok(h.runs.includes(i.toolCallId));
    assert.ok((await h.store.getApproval(listed.id))?.signature, 'the signature is stored with the approval');
  });
});

describe('client', () => {
  test('readAnswer refuses a wakeup whose card does not match', async () => {
    const r = await call('echo', {});
    assert.ok(r.ok);
    const forged = { ...r.callback, status: 'failed' };
    const x = await readAnswer(h.store, { agent_turn_id: r.callback.agent_turn_id, tool_call_id: r.toolCallId }, forged, {});
    assert.equal(x.ok, false);
    assert.ok(!x.ok && x.problems.some((p) => p.code === 'UTP_CARD_MISMATCH'));
  });

  test('a call whose connection closes while it waits ends at once with UTPC_CONNECTION_CLOSED; called again on an open one, it gets its answer without a second run', async () => {
    const nc2 = await natsOrFail();
    const id = ids();
    const pending = callTool({ nats: nc2, store: h.store, subject: h.subject('echo'), tool: 'echo', agentId: 'agent-1', turnEpoch: 3, ...id, arguments: { delay_ms: 1000 }, timeoutMs: 120_000 });
    await eventually(() => h.runs.includes(id.toolCallId) || undefined, 10_000, 'the call runs');
    await nc2.close();
    const r = await pending;
    assert.ok(!r.ok && r.problems[0]?.code === 'UTPC_CONNECTION_CLOSED', JSON.stringify(r));
    assert.ok(!r.ok && /call again with the same agent_turn_id and tool_call_id/.test(r.problems[0]!.message));
    const again = await call('echo', { delay_ms: 1000 }, id);
    assert.ok(again.ok && again.status === 'success', JSON.stringify(again));
    assert.equal(h.runs.filter((x) => x === id.toolCallId).length, 1, 'ran once');
  });

  test('a client timeout is a value, not a throw', async () => {
    const r = await callTool({ nats: h.nc, store: h.store, subject: h.subject('echo'), tool: 'echo', agentId: 'agent-1', turnEpoch: 1, agentTurnId: 't', arguments: { delay_ms: 2000 }, timeoutMs: 200 });
    assert.equal(r.ok, false);
    assert.ok(!r.ok && r.problems[0]?.code === 'UTPC_TIMEOUT');
  });
});
