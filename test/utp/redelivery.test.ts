import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { callTool, toolCallCardId } from '../../src/utp/client.js';
import { DEFAULT_REDELIVERY_DELAYS_MS, redeliveryDelayMs } from '../../src/utp/service.js';
import { eventually, failingClaims, startHarness, type Harness } from './harness.js';

/**
 * The store fails at claim time (SQLite; postgres-service.test.ts has the PostgreSQL case): the
 * command is nak'ed with a growing delay and redelivered; on the last delivery JetStream allows, the
 * service gives it up with a logged `given-up` event instead of letting it vanish.
 */

describe('the nak delay schedule', () => {
  test('grows with the delivery count so the retries span a store outage of minutes, then stays at its last step', () => {
    assert.deepEqual(DEFAULT_REDELIVERY_DELAYS_MS, [1000, 5000, 30_000, 120_000]);
    assert.deepEqual([1, 2, 3, 4, 5, 9].map((d) => redeliveryDelayMs(d, DEFAULT_REDELIVERY_DELAYS_MS)), [1000, 5000, 30_000, 120_000, 120_000, 120_000]);
    assert.equal(redeliveryDelayMs(0, [7]), 7, 'a delivery count below 1 is treated as the first');
  });
});

describe('SQLite: the store fails at claim time', () => {
  let h: Harness;
  // While > 0, each claim fails (and counts down); Infinity: the store is down for good.
  const failures = { left: 0 };
  before(async () => {
    // 3 deliveries at most, short delays: the whole schedule runs in well under a second.
    h = await startHarness({ db: 'sqlite', service: { maxDeliver: 3, redeliveryDelaysMs: [150, 300] }, store: failingClaims(failures, 'database is locked (simulated)') });
  });
  after(async () => {
    await h?.stop();
  });

  const ids = () => ({ agentTurnId: `turn-${randomUUID()}`, toolCallId: `call-${randomUUID()}` });

  test('nak -> redelivered -> answered once, run once', async () => {
    failures.left = 1;
    const i = ids();
    const t0 = Date.now();
    const r = await callTool({ nats: h.nc, store: h.store, subject: h.subject('echo'), tool: 'echo', agentId: 'agent-sq', turnEpoch: 2, arguments: { redelivered: true }, timeoutMs: 10_000, ...i });
    assert.ok(r.ok && r.status === 'success', JSON.stringify(r));
    assert.equal(failures.left, 0, 'the first delivery hit the failing store');
    assert.ok(Date.now() - t0 >= 140, 'the redelivery came after the nak delay');
    const failed = h.logs.find((l) => l.event === 'claim-failed' && l.tool_call_id === i.toolCallId);
    assert.ok(failed, 'the failure was logged');
    assert.equal(failed.retry_in_ms, 150, 'the first nak waits the first step of the schedule');
    const anchor = { agent_turn_id: i.agentTurnId, tool_call_id: i.toolCallId };
    assert.equal(h.runs.filter((x) => x === i.toolCallId).length, 1);
    assert.equal(await h.store.countResultCards(anchor), 1);
    assert.equal((await h.store.listInbox({ anchor })).length, 1);
  });

  test('still failing on the last allowed delivery: logged `given-up` with the anchor, subject and reason, and removed', async () => {
    failures.left = Infinity;
    const i = ids();
    const pending = callTool({ nats: h.nc, store: h.store, subject: h.subject('echo'), tool: 'echo', agentId: 'agent-sq', turnEpoch: 2, arguments: { doomed: true }, timeoutMs: 2000, ...i });
    const gaveUp = await eventually(() => h.logs.find((l) => l.event === 'given-up' && l.tool_call_id === i.toolCallId), 5000, 'a given-up event');
    failures.left = 0;
    const r = await pending;
    assert.equal(r.ok, false, 'no answer could be written while the store was down');
    assert.equal(gaveUp.level, 'error');
    assert.equal(gaveUp.agent_turn_id, i.agentTurnId);
    assert.equal(gaveUp.subject, h.subject('echo'));
    assert.equal(gaveUp.delivery, 3);
    assert.match(String(gaveUp.reason), /database is locked/);
    assert.equal(gaveUp.tool_call_card_id, toolCallCardId(i.agentTurnId, i.toolCallId), 'names the card to find the call by');
    const delays = h.logs.filter((l) => l.event === 'claim-failed' && l.tool_call_id === i.toolCallId).map((l) => l.retry_in_ms);
    assert.deepEqual(delays, [150, 300], 'nak delays grow with each delivery');
    assert.equal(h.service.stats.givenUp, 1);
    assert.ok(!h.runs.includes(i.toolCallId));
    // term()ed: nothing is left pending or waiting for another delivery.
    const info = await (await h.nc.jetstreamManager()).consumers.info(h.stream, h.durable);
    assert.equal(info.num_ack_pending, 0);
    assert.equal(info.num_pending, 0);
  });
});
