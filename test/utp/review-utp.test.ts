import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { PostgresStore } from '../../src/store/postgres.js';
import type { Store } from '../../src/store/types.js';
import { callTool } from '../../src/utp/client.js';
import { eventually, sleep, startHarness, type Harness } from './harness.js';
import { answerInput } from '../store/suite.js';

/**
 * A security review of the UTP door (review-utp, 2026-11-28): each test is an attack that worked
 * against the code before its fix. Real NATS; both stores where the attack needs the store.
 */

const ids = () => ({ agentTurnId: `turn-${randomUUID()}`, toolCallId: `call-${randomUUID()}` });

/** One raw SQL statement on the harness's store, as any program with the store's credentials can run. */
async function raw(store: Store, sql: string, args: unknown[]): Promise<void> {
  if (store instanceof PostgresStore) {
    let n = 0;
    await (store as unknown as { q(s: string, a: unknown[]): Promise<unknown> }).q(sql.replace(/\?/g, () => `$${++n}`), args);
  } else {
    (store as unknown as { d: { prepare(s: string): { run(...a: unknown[]): unknown } } }).d.prepare(sql).run(...args);
  }
}

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

for (const db of ['sqlite', 'postgres'] as const) {
  describe(`${db}: a report planted in the inbox for a running call's anchor does not keep the call from being answered`, () => {
    let h: Harness;
    before(async () => {
      h = await startHarness({ db });
    });
    after(async () => {
      await h?.stop();
    });

    test('the worker answers; no executor_lost loop', async () => {
      const a = ids();
      const pending = callTool({ nats: h.nc, store: h.store, subject: h.subject('echo'), tool: 'echo', agentId: 'agent-a', turnEpoch: 1, ...a, arguments: { delay_ms: 600 }, timeoutMs: 6000 });
      await eventually(() => (h.runs.includes(a.toolCallId) ? true : undefined), 5000, 'the run to start');
      // The race: the tool runs; anyone with the store plants the call's report (the anchor is on NATS).
      await raw(h.store, 'INSERT INTO inbox (agent_id, agent_turn_id, tool_call_id, kind, payload, created_at) VALUES (?, ?, ?, ?, ?, ?)', [
        'agent-a', a.agentTurnId, a.toolCallId, 'tool.report', JSON.stringify({ forged: true }), Date.now(),
      ]);
      const r = await pending;
      const lost = h.logs.filter((l) => l.event === 'executor-lost' && l.tool_call_id === a.toolCallId).length;
      const discarded = h.logs.filter((l) => l.event === 'answer-discarded' && l.tool_call_id === a.toolCallId).length;
      assert.ok(r.ok && r.status === 'success', `${JSON.stringify(r)}; answer-discarded x${discarded}, executor-lost x${lost}`);
      assert.equal(discarded + lost, 0);
      // The call's one report is Airlock's, naming the claim's result card.
      const reports = await h.store.listInbox({ anchor: { agent_turn_id: a.agentTurnId, tool_call_id: a.toolCallId } });
      assert.equal(reports.length, 1);
      assert.equal(reports[0]?.payload.tool_result_card_id, r.card.card_id);
    });

    test('many answers at once (one batch statement), two of them over planted reports: all land, each with its own report, under a new id', async () => {
      const anchors = Array.from({ length: 10 }, () => ({ agent_turn_id: `turn-${randomUUID()}`, tool_call_id: `call-${randomUUID()}` }));
      await Promise.all(anchors.map((a) => h.store.claim(a, null, 'owner', 60_000, {})));
      for (const i of [1, 6]) {
        const a = anchors[i]!;
        await raw(h.store, 'INSERT INTO inbox (agent_id, agent_turn_id, tool_call_id, kind, payload, created_at) VALUES (?, ?, ?, ?, ?, ?)', ['agent-1', a.agent_turn_id, a.tool_call_id, 'tool.report', JSON.stringify({ forged: true }), Date.now()]);
      }
      const planted = new Map((await h.store.listInbox({ limit: 100_000 })).filter((x) => x.payload.forged).map((x) => [x.tool_call_id, x.id]));
      const inputs = anchors.map((a) => answerInput(a, 'owner'));
      const outcomes = await Promise.all(inputs.map((x) => h.store.answer(x)));
      for (const [i, o] of outcomes.entries()) {
        const a = anchors[i]!;
        assert.deepEqual(o, { ok: true }, `answer ${i}`);
        const reports = await h.store.listInbox({ anchor: a });
        assert.equal(reports.length, 1, `answer ${i}: one report`);
        assert.equal(reports[0]?.payload.tool_result_card_id, inputs[i]!.card.card_id, `answer ${i}: its own report`);
        const was = planted.get(a.tool_call_id);
        if (was !== undefined) assert.ok(reports[0]!.id > was, `answer ${i}: a new id (was ${was}, now ${reports[0]!.id})`);
      }
    });
  });
}

describe('postgres: an approval row removed from the store while its call waits', () => {
  let h: Harness;
  let reads = 0;
  before(async () => {
    h = await startHarness({
      db: 'postgres',
      store: (s) =>
        new Proxy(s, {
          get(target, prop, recv) {
            const v = Reflect.get(target, prop, recv);
            if (prop === 'getApproval') return (id: string) => (reads++, (v as Store['getApproval']).call(target, id));
            return typeof v === 'function' ? v.bind(target) : v;
          },
        }),
    });
  });
  after(async () => {
    await h?.stop();
  });

  test('the call is answered (not run), and the worker does not spin on the store', async () => {
    const a = ids();
    // echo.approve: approval required, timeout 1500 ms.
    const pending = callTool({ nats: h.nc, store: h.store, subject: h.subject('echo.approve'), tool: 'echo.approve', agentId: 'agent-a', turnEpoch: 1, ...a, arguments: {}, timeoutMs: 6000 });
    const row = await eventually(async () => (await h.store.listApprovals('pending')).find((x) => x.tool_call_id === a.toolCallId), 5000, 'the pending approval');
    await raw(h.store, 'DELETE FROM approvals WHERE id = ?', [row.id]);
    await sleep(2500); // past the approval's timeout
    const before = reads;
    await sleep(500);
    const spun = reads - before;
    const r = await pending;
    assert.ok(spun < 50, `the worker read the vanished approval ${spun} times in 500 ms`);
    assert.ok(r.ok, JSON.stringify(r));
    assert.notEqual(r.status, 'success');
    assert.ok(!h.runs.includes(a.toolCallId), 'the call ran without an approval');
  });
});

for (const db of ['sqlite', 'postgres'] as const) {
  describe(`${db}: a wakeup subject written into the store is not published by the worker unless it is a wakeup subject`, () => {
    let h: Harness;
    before(async () => {
      h = await startHarness({ db });
    });
    after(async () => {
      await h?.stop();
    });

    test('a claim row planted as answered, unwoken, its wakeup on $JS.API.STREAM.DELETE.<stream>: the sweeper does not delete the stream', async () => {
      const jsm = await h.nc.jetstreamManager();
      const probe = `RV_PROBE_${randomUUID().slice(0, 8).toUpperCase()}`;
      await jsm.streams.add({ name: probe, subjects: [`rvprobe.${probe}`] });
      try {
        const a = ids();
        const wakeup = { subject: `$JS.API.STREAM.DELETE.${probe}`, payload: {}, headers: {} };
        await raw(h.store, `INSERT INTO claims (agent_turn_id, tool_call_id, tool_call_card_id, context, worker_id, state, lease_until, result_card_id, wakeup, created_at, updated_at)
          VALUES (?, ?, NULL, NULL, 'gone', 'answered', 0, 'card-x', ?, 0, 0)`, [a.agentTurnId, a.toolCallId, JSON.stringify(wakeup)]);
        await sleep(2500); // wakeupRetryMs 1000, sweepMs 200 in the harness
        const info = await jsm.streams.info(probe).catch(() => undefined);
        assert.ok(info, 'the worker published the stored "wakeup" on the JetStream API: the stream was deleted');
        assert.ok(h.logs.some((l) => l.event === 'stored-wakeup-refused' && l.tool_call_id === a.toolCallId));
      } finally {
        await jsm.streams.delete(probe).catch(() => undefined);
      }
    });
  });
}

for (const db of ['sqlite', 'postgres'] as const) {
  describe(`${db}: a worker whose heartbeats fail for longer than the lease does not answer its own live call executor_lost`, () => {
    let h: Harness;
    let heartbeatsFail = false;
    before(async () => {
      // The store answers everything but heartbeats while `heartbeatsFail`, as in an outage that
      // happened to hit them (the harness's lease is 1 s, its sweep every 200 ms).
      h = await startHarness({
        db,
        store: (s) =>
          new Proxy(s, {
            get(t, p) {
              if (p === 'heartbeat' && heartbeatsFail) return () => Promise.reject(new Error('store unreachable (test)'));
              const v = (t as unknown as Record<string | symbol, unknown>)[p];
              return typeof v === 'function' ? v.bind(t) : v;
            },
          }),
      });
    });
    after(async () => {
      await h?.stop();
    });

    test('a 3 s call while heartbeats fail: the agent gets the tool\'s own answer, and the sweep says it kept the lease', async () => {
      const a = ids();
      heartbeatsFail = true;
      try {
        const r = await callTool({ nats: h.nc, store: h.store, subject: h.subject('echo'), tool: 'echo', agentId: 'agent-a', turnEpoch: 1, ...a, arguments: { delay_ms: 3000 }, timeoutMs: 20_000 });
        assert.ok(r.ok, JSON.stringify(r));
        assert.equal(r.status, 'success', `answered ${r.status}: ${JSON.stringify(r.content.result).slice(0, 300)}`);
        assert.deepEqual((r.content.result as { echo?: unknown }).echo, { delay_ms: 3000 });
      } finally {
        heartbeatsFail = false;
      }
      assert.ok(h.logs.some((l) => l.event === 'lease-retaken' && l.tool_call_id === a.toolCallId), 'the lease ran out and was taken back by the sweep');
      assert.ok(!h.logs.some((l) => l.event === 'executor-lost' && l.tool_call_id === a.toolCallId));
    });
  });
}
