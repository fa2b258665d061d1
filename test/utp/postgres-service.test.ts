import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { callTool } from '../../src/utp/client.js';
import { eventually, failingClaims, startHarness, type Harness } from './harness.js';

/** The core path on PostgreSQL, and a command redelivered after a nak (the store failed once). */

let h: Harness;
const failures = { left: 0 };
before(async () => {
  h = await startHarness({ db: 'postgres', store: failingClaims(failures, 'connection reset (simulated)') });
});
after(async () => {
  await h?.stop();
});

const call = (args: Record<string, unknown>) =>
  callTool({ nats: h.nc, store: h.store, subject: h.subject('echo'), tool: 'echo', agentId: 'agent-pg', agentTurnId: `turn-${randomUUID()}`, turnEpoch: 7, arguments: args as never, timeoutMs: 15_000 });

test('PostgreSQL: a call is answered with one card and one report', async () => {
  const r = await call({ pg: true });
  assert.ok(r.ok && r.status === 'success', JSON.stringify(r));
  const anchor = { agent_turn_id: r.callback.agent_turn_id, tool_call_id: r.toolCallId };
  assert.equal(await h.store.countResultCards(anchor), 1);
  assert.equal((await h.store.listInbox({ anchor })).length, 1);
  await eventually(async () => ((await h.store.getClaim(anchor))?.woken ? true : undefined), 2000, 'the claim marked woken');
});

test('PostgreSQL: the store fails at claim time -> nak -> redelivered -> answered once, run once', async () => {
  failures.left = 1;
  const t0 = Date.now();
  const r = await call({ redelivered: true });
  assert.ok(r.ok && r.status === 'success', JSON.stringify(r));
  assert.equal(failures.left, 0, 'the first delivery hit the failing store');
  assert.ok(Date.now() - t0 >= 900, 'the redelivery came after the nak delay');
  const failed = h.logs.find((l) => l.event === 'claim-failed');
  assert.ok(failed, 'the failure was logged');
  assert.equal(h.runs.filter((x) => x === r.toolCallId).length, 1);
  await eventually(async () => ((await (await h.nc.jetstreamManager()).consumers.info(h.stream, h.durable)).num_ack_pending === 0 ? true : undefined), 3000, 'nothing pending');
});

test('PostgreSQL: 50 concurrent calls, each answered once', async () => {
  const rs = await Promise.all(Array.from({ length: 50 }, (_, i) => call({ i })));
  assert.ok(rs.every((r) => r.ok && r.status === 'success'));
  assert.equal(new Set(rs.map((r) => (r.ok ? r.card.card_id : ''))).size, 50);
});
