import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { callTool } from '../../src/utp/client.js';
import { eventually, startHarness, type Harness } from './harness.js';

/**
 * A security review of the UTP door (review-utp, 2026-11-28): each test is an attack that worked
 * against the code before its fix. Real NATS; both stores where the attack needs the store.
 */

const ids = () => ({ agentTurnId: `turn-${randomUUID()}`, toolCallId: `call-${randomUUID()}` });

describe('a wakeup published by another agent does not answer a call it does not own (NATS only, no store write)', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ db: 'sqlite' });
  });
  after(async () => {
    await h?.stop();
  });

  test('B sees A\'s running call on the project\'s subjects, makes its own call with the same tool_call_id, and wakes A with its own genuine result card: A must not take it', async () => {
    const a = ids();
    const pending = callTool({ nats: h.nc, store: h.store, subject: h.subject('echo'), tool: 'echo', agentId: 'agent-a', turnEpoch: 1, ...a, arguments: { delay_ms: 1500, who: 'A' }, timeoutMs: 20_000 });
    await eventually(() => (h.runs.includes(a.toolCallId) ? true : undefined), 5000, 'A\'s run to start');
    // B: its own turn, A's tool_call_id (seen on cg.v1.<project>.<channel>.cmd.tool.>), its own arguments.
    const b = await callTool({ nats: h.nc, store: h.store, subject: h.subject('echo'), tool: 'echo', agentId: 'agent-b', turnEpoch: 1, agentTurnId: `turn-${randomUUID()}`, toolCallId: a.toolCallId, arguments: { who: 'B' }, timeoutMs: 20_000 });
    assert.ok(b.ok && b.status === 'success', JSON.stringify(b));
    // B publishes on A's wakeup subject (core NATS), pointing at B's own tool.result card.
    const wake = `cg.v1.${h.project}.${h.channel}.cmd.agent.agent-a.wakeup`;
    h.nc.publish(wake, JSON.stringify({ agent_id: 'agent-a', agent_turn_id: a.agentTurnId, turn_epoch: 1, tool_call_id: a.toolCallId, tool_result_card_id: b.card.card_id, status: 'success', after_execution: 'suspend' }));
    const r = await pending;
    assert.ok(r.ok, JSON.stringify(r));
    assert.notEqual(r.card.card_id, b.card.card_id, 'A took B\'s result card as its answer');
    assert.deepEqual((r.content.result as { echo?: unknown }).echo, { delay_ms: 1500, who: 'A' });
    // And A's answer is the one its claim names.
    const claim = await h.store.getClaim({ agent_turn_id: a.agentTurnId, tool_call_id: a.toolCallId });
    assert.equal(claim?.result_card_id, r.card.card_id);
  });

  test('a wakeup naming a card that does not exist, sent before the real answer, does not end the call (the real answer still arrives)', async () => {
    const a = ids();
    const pending = callTool({ nats: h.nc, store: h.store, subject: h.subject('echo'), tool: 'echo', agentId: 'agent-a', turnEpoch: 1, ...a, arguments: { delay_ms: 800 }, timeoutMs: 20_000 });
    await eventually(() => (h.runs.includes(a.toolCallId) ? true : undefined), 5000, 'A\'s run to start');
    h.nc.publish(`cg.v1.${h.project}.${h.channel}.cmd.agent.agent-a.wakeup`, JSON.stringify({ agent_id: 'agent-a', agent_turn_id: a.agentTurnId, turn_epoch: 1, tool_call_id: a.toolCallId, tool_result_card_id: 'card-result-nope', status: 'failed', after_execution: 'suspend' }));
    const r = await pending;
    assert.ok(r.ok && r.status === 'success', JSON.stringify(r));
  });
});
