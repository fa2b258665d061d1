import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import type { AnswerInput, Store } from '../../src/store/types.js';

/**
 * The one store suite, run against SQLite and PostgreSQL (sqlite.test.ts, postgres.test.ts).
 * `open()` gives the store under test; `peer()` a second, independent handle on the SAME data
 * (another connection/pool), standing for another worker process.
 */
export interface StoreFixture {
  store: Store;
  peer(): Promise<Store>;
  dispose(): Promise<void>;
}

const anchor = () => ({ agent_turn_id: `turn-${randomUUID()}`, tool_call_id: `call-${randomUUID()}` });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function answerInput(a: { agent_turn_id: string; tool_call_id: string }, worker: string, cardId = `card-result-${randomUUID()}`): AnswerInput {
  const payload = { agent_id: 'agent-1', ...a, turn_epoch: 1, tool_result_card_id: cardId, status: 'success', after_execution: 'suspend' };
  return {
    ...a,
    worker_id: worker,
    card: { card_id: cardId, type: 'tool.result', created_at: new Date().toISOString(), content: { status: 'success', after_execution: 'suspend', tool_call_id: a.tool_call_id } },
    report: { agent_id: 'agent-1', kind: 'tool.report', payload },
    wakeup: { subject: 'cg.v1.p.c.cmd.agent.agent-1.wakeup', payload, headers: { 'CG-Agent-Id': 'agent-1' } },
  };
}

export function storeSuite(name: string, open: () => Promise<StoreFixture>): void {
  describe(`${name} store`, () => {
    let fx: StoreFixture;
    let s: Store;
    const peers: Store[] = [];
    const peer = async () => {
      const p = await fx.peer();
      peers.push(p);
      return p;
    };
    before(async () => {
      fx = await open();
      s = fx.store;
    });
    after(async () => {
      for (const p of peers) await p.close();
      await fx?.dispose();
    });

    test('init is idempotent', async () => {
      await s.init();
      const p = await peer();
      await p.init();
    });

    test('cards: put, get, and a card_id is written once', async () => {
      const card = { card_id: `card-${randomUUID()}`, type: 'tool.call', created_at: '2025-01-31T12:00:00Z', content: { tool_call_id: 'c1', tool_name: 'echo', arguments: { a: [1, 'x'] } } };
      assert.equal(await s.putCard(card), true);
      assert.deepEqual(await s.getCard(card.card_id), card);
      assert.equal(await s.putCard({ ...card, content: { other: true } }), false);
      assert.deepEqual(await s.getCard(card.card_id), card, 'the first card is kept');
      assert.equal(await s.getCard('no-such-card'), undefined);
    });

    test('cards: a call\'s result is the card its claim names; a tool.result card anyone else writes with its anchor is only a card', async () => {
      const a = anchor();
      const mk = () => ({ card_id: `card-${randomUUID()}`, type: 'tool.result', created_at: '2025-01-31T12:00:00Z', content: { status: 'success', after_execution: 'suspend' } });
      await s.claim(a, null, 'owner', 60_000, {});
      // Written before the answer, by another handle on the store (a caller, say): stored, not the result.
      const p = await peer();
      const forged = mk();
      assert.equal(await p.putCard(forged, a), true);
      assert.equal(await s.getResultCardFor(a), undefined, 'no answer yet: no result');
      const real = answerInput(a, 'owner');
      assert.deepEqual(await s.answer(real), { ok: true }, 'the forged card does not block the answer');
      assert.deepEqual(await s.getResultCardFor(a), real.card);
      assert.equal((await s.getClaim(a))?.result_card_id, real.card.card_id);
      assert.equal(await s.countResultCards(a), 2);
    });

    test('tools: upsert, get, list, update, remove', async () => {
      const project = `p${randomUUID().slice(0, 8)}`;
      const t = { project_id: project, tool_name: 'python.run', description: 'd', parameters: { type: 'object' }, target_subject: `cg.v1.${project}.c.cmd.tool.python.run`, after_execution: 'suspend' as const, options: { runner: 'python' } };
      await s.upsertTool(t);
      assert.deepEqual(await s.getTool(project, 'python.run'), { ...t, signature: null }, 'a row without a signature reads back with signature null');
      await s.upsertTool({ ...t, description: 'd2', after_execution: 'terminate', signature: '{"sig":1}' });
      assert.equal((await s.getTool(project, 'python.run'))?.description, 'd2');
      assert.equal((await s.getTool(project, 'python.run'))?.signature, '{"sig":1}', 'the signature is kept as written');
      await s.upsertTool(t);
      assert.equal((await s.getTool(project, 'python.run'))?.signature, null, 'an unsigned replacement drops the old signature');
      await s.upsertTool({ ...t, tool_name: 'echo' });
      assert.deepEqual((await s.listTools(project)).map((x) => x.tool_name), ['echo', 'python.run']);
      assert.ok((await s.listTools()).length >= 2);
      assert.equal(await s.removeTool(project, 'echo'), true);
      assert.equal(await s.removeTool(project, 'echo'), false);
      assert.equal(await s.getTool(project, 'echo'), undefined);
    });

    test('claims: of 30 concurrent claims on one anchor from two handles, exactly one wins', async () => {
      const a = anchor();
      const p = await peer();
      const results = await Promise.all(Array.from({ length: 30 }, (_, i) => (i % 2 ? p : s).claim(a, 'card-x', `w${i}`, 10_000, { n: i })));
      const winners = results.flatMap((r, i) => (r.claimed ? [i] : []));
      assert.equal(winners.length, 1);
      const w = `w${winners[0]!}`;
      for (const r of results) if (!r.claimed) assert.equal(r.existing.worker_id, w, 'losers see the winner');
      const c = await s.getClaim(a);
      assert.equal(c?.worker_id, w, 'the stored claim is the winner\'s');
      assert.equal(c?.state, 'running');
      assert.equal(c?.tool_call_card_id, 'card-x');
      assert.ok(c?.context && typeof c.context.n === 'number');
    });

    // Many calls at once (one event-loop turn): PostgreSQL answers them with one statement per kind
    // of step; each caller must still get exactly its own outcome, also when one of them conflicts.
    test('many at once: card writes and reads, each with its own outcome (a duplicate card_id among them is refused alone)', async () => {
      const cards = Array.from({ length: 20 }, (_, i) => ({ card_id: `card-${randomUUID()}`, type: 'tool.call', created_at: '2025-01-31T12:00:00Z', content: { n: i, text: 'quote " backslash \\ newline \n' } }));
      const earlier = { card_id: `card-${randomUUID()}`, type: 'tool.call', created_at: '2025-01-31T12:00:00Z', content: { n: 'earlier' } };
      assert.equal(await s.putCard(earlier), true);
      const dup = { ...cards[3]!, content: { n: 'duplicate' } };
      // cards[3] twice in one batch, and a card_id already stored (the batch statement's unique violation)
      const written = await Promise.all([...cards.map((c) => s.putCard(c)), s.putCard(dup), s.putCard({ ...earlier, content: { n: 'again' } })]);
      assert.deepEqual(written, [...cards.map(() => true), false, false]);
      assert.deepEqual(await s.getCard(earlier.card_id), earlier);
      const read = await Promise.all([...cards.map((c) => s.getCard(c.card_id)), s.getCard('no-such-card'), s.getCard(cards[0]!.card_id)]);
      assert.deepEqual(read, [...cards, undefined, cards[0]]);
    });

    test('many at once: 40 claims on 20 anchors from two handles: one winner per anchor, each reads its own card', async () => {
      const anchors = Array.from({ length: 20 }, anchor);
      const cards = anchors.map((a) => ({ card_id: `card-${randomUUID()}`, type: 'tool.call', created_at: '2025-01-31T12:00:00Z', content: { tool_call_id: a.tool_call_id } }));
      await Promise.all(cards.map((c) => s.putCard(c)));
      const p = await peer();
      const calls = [...anchors.map((a, i) => ({ a, i, h: s })), ...anchors.map((a, i) => ({ a, i, h: p })), { a: anchors[0]!, i: 0, h: s }];
      const results = await Promise.all(calls.map(({ a, i, h }, n) => h.claim(a, cards[i]!.card_id, `w${n}`, 60_000, { n }, cards[i]!.card_id)));
      const claims = await Promise.all(anchors.map((a) => s.getClaim(a)));
      anchors.forEach((a, i) => {
        const mine = results.map((r, n) => ({ r, n })).filter(({ n }) => calls[n]!.a === a);
        const won = mine.filter(({ r }) => r.claimed);
        assert.equal(won.length, 1, `exactly one winner for anchor ${i}`);
        const w = won[0]!;
        // the winner's claim is its own row: its worker id, its context
        const stored = claims[i];
        assert.deepEqual([stored?.worker_id, stored?.context?.n], [`w${w.n}`, w.n]);
        for (const { r, n } of mine) {
          assert.deepEqual(r.card, cards[i], 'the card read is the call\'s own');
          if (!r.claimed) assert.equal(r.existing.worker_id, `w${w.n}`, `loser ${n} sees its anchor's winner`);
        }
      });
    });

    test('many at once: answers land for their owners only; a conflicting one is refused without touching the others', async () => {
      // Two turns: in the first, anchor 2 is answered by an intruder (not the owner); in the second,
      // anchor 9's result card id is taken already (a unique violation for its answer).
      const anchors = Array.from({ length: 12 }, anchor);
      await Promise.all(anchors.map((a) => s.claim(a, null, 'owner', 60_000, {})));
      const inputs = anchors.map((a, i) => answerInput(a, i === 2 ? 'intruder' : 'owner'));
      await s.putCard({ card_id: inputs[9]!.card.card_id, type: 'tool.call', created_at: '2025-01-31T12:00:00Z', content: {} });
      const outcomes = [...(await Promise.all(inputs.slice(0, 6).map((x) => s.answer(x)))), ...(await Promise.all(inputs.slice(6).map((x) => s.answer(x))))];
      for (const [i, o] of outcomes.entries()) {
        const a = anchors[i]!;
        if (i === 2 || i === 9) {
          assert.equal(o.ok, false, `answer ${i} is refused`);
          assert.equal((await s.getClaim(a))?.state, 'running');
          assert.equal((await s.listInbox({ anchor: a })).length, 0);
        } else {
          assert.deepEqual(o, { ok: true }, `answer ${i} lands`);
          assert.equal((await s.getClaim(a))?.result_card_id, inputs[i]!.card.card_id);
          assert.deepEqual(await s.getResultCardFor(a), inputs[i]!.card);
          assert.equal((await s.listInbox({ anchor: a })).length, 1);
        }
      }
      assert.ok(!outcomes[2]!.ok && outcomes[2]!.reason === 'not-owner');
      assert.ok(!outcomes[9]!.ok && outcomes[9]!.reason === 'duplicate');
    });

    test('many at once: an item that cannot be written fails alone; the others of its batch land', async () => {
      const circular: Record<string, unknown> = { n: 'bad' };
      circular.self = circular;
      const anchors = Array.from({ length: 8 }, anchor);
      const claims = await Promise.allSettled(anchors.map((a, i) => s.claim(a, null, 'owner', 60_000, i === 5 ? circular : { n: i })));
      claims.forEach((c, i) => assert.equal(c.status, i === 5 ? 'rejected' : 'fulfilled', `claim ${i}`));
      assert.equal(await s.getClaim(anchors[5]!), undefined, 'the bad claim wrote nothing');
      const live = anchors.filter((_, i) => i !== 5);
      const inputs = live.map((a) => answerInput(a, 'owner'));
      (inputs[2]!.card.content as Record<string, unknown>).loop = circular;
      const answers = await Promise.allSettled(inputs.map((x) => s.answer(x)));
      for (const [i, o] of answers.entries()) {
        const a = live[i]!;
        if (i === 2) {
          assert.equal(o.status, 'rejected', 'the answer that cannot be written');
          assert.equal((await s.getClaim(a))?.state, 'running');
          assert.equal(await s.countResultCards(a), 0);
        } else {
          assert.ok(o.status === 'fulfilled' && o.value.ok, `answer ${i} lands`);
          assert.equal((await s.getClaim(a))?.state, 'answered');
        }
      }
    });

    test('claims: heartbeat extends the lease of the calls named (not every claim of the worker) and reports cancel requests', async () => {
      const a = anchor();
      const b = anchor();
      const orphan = anchor(); // claimed in this worker's name, but not among the calls it runs
      const w = `w-${randomUUID()}`;
      await s.claim(a, null, w, 50, {});
      await s.claim(b, null, w, 50, {});
      await s.claim(orphan, null, w, 50, {});
      const before1 = (await s.getClaim(a))!.lease_until;
      const orphanLease = (await s.getClaim(orphan))!.lease_until;
      await sleep(5);
      assert.deepEqual(await s.heartbeat(w, 60_000, [a, b]), []);
      assert.ok((await s.getClaim(a))!.lease_until > before1 + 1000);
      assert.equal((await s.getClaim(orphan))!.lease_until, orphanLease, 'the orphan\'s lease runs out');
      assert.ok((await s.requestCancel(b))?.cancel_requested);
      assert.deepEqual(await s.heartbeat(w, 60_000, [a, b]), [b]);
      assert.deepEqual(await s.heartbeat('another-worker', 60_000, [a, b]), [], 'only the owner renews');
      assert.deepEqual(await s.heartbeat(w, 60_000, []), []);
    });

    test('claims: an expired lease is taken over by exactly one sweeper', async () => {
      const a = anchor();
      await s.claim(a, null, 'dead-worker', 1, { subject: 'x' });
      await sleep(20);
      const p = await peer();
      const [x, y] = await Promise.all([s.takeOverExpired('sweeper-1', 10_000, 1000), p.takeOverExpired('sweeper-2', 10_000, 1000)]);
      const mine = [...x, ...y].filter((c) => c.agent_turn_id === a.agent_turn_id);
      assert.equal(mine.length, 1, 'one sweeper gets it');
      const c = await s.getClaim(a);
      assert.ok(c?.worker_id.startsWith('sweeper-'));
      assert.deepEqual(c?.context, { subject: 'x' });
      // a live lease is never taken
      const live = anchor();
      await s.claim(live, null, 'alive', 60_000, {});
      const again = await s.takeOverExpired('sweeper-3', 10_000, 1000);
      assert.equal(again.filter((q) => q.agent_turn_id === live.agent_turn_id).length, 0);
    });

    test('answer: only the owner of a running claim answers, once; card + report are atomic', async () => {
      const a = anchor();
      await s.claim(a, null, 'owner', 60_000, {});
      const intruder = await s.answer(answerInput(a, 'intruder'));
      assert.equal(intruder.ok, false);
      assert.equal(await s.countResultCards(a), 0, 'a refused answer writes nothing');
      assert.equal((await s.listInbox({ anchor: a })).length, 0);
      const input = answerInput(a, 'owner');
      assert.deepEqual(await s.answer(input), { ok: true });
      const again = await s.answer(answerInput(a, 'owner'));
      assert.equal(again.ok, false, 'a second answer is refused');
      assert.ok(!again.ok && again.existing?.state === 'answered');
      assert.equal(await s.countResultCards(a), 1);
      const inbox = await s.listInbox({ anchor: a });
      assert.equal(inbox.length, 1);
      assert.deepEqual(inbox[0]?.payload, input.report.payload);
      const c = await s.getClaim(a);
      assert.equal(c?.result_card_id, input.card.card_id);
      assert.deepEqual(c?.wakeup, input.wakeup);
      assert.equal(c?.woken, false);
      assert.deepEqual(await s.getResultCardFor(a), input.card);
    });

    test('answer: concurrent answers by the owner and a sweeper that took over: exactly one lands', async () => {
      const a = anchor();
      await s.claim(a, null, 'slow-owner', 1, {});
      await sleep(20);
      const p = await peer();
      const taken = await p.takeOverExpired('sweeper', 60_000, 1000);
      assert.ok(taken.some((c) => c.tool_call_id === a.tool_call_id));
      const [x, y] = await Promise.all([s.answer(answerInput(a, 'slow-owner')), p.answer(answerInput(a, 'sweeper'))]);
      assert.equal(x.ok, false, 'the old owner lost its claim');
      assert.equal(y.ok, true);
      assert.equal(await s.countResultCards(a), 1);
      assert.equal((await s.listInbox({ anchor: a })).length, 1);
    });

    test('answer: a unique violation (its result card id taken already) rolls the claim back', async () => {
      const a = anchor();
      await s.claim(a, null, 'w', 60_000, {});
      const input = answerInput(a, 'w');
      await s.putCard({ card_id: input.card.card_id, type: 'tool.call', created_at: '2025-01-31T12:00:00Z', content: {} });
      const r = await s.answer(input);
      assert.equal(r.ok, false);
      assert.equal((await s.getClaim(a))?.state, 'running', 'the claim is unchanged');
      assert.equal((await s.listInbox({ anchor: a })).length, 0, 'no report without its card');
    });

    test('wakeups: unwoken answers are listed until marked woken', async () => {
      const a = anchor();
      await s.claim(a, null, 'w', 60_000, {});
      await s.answer(answerInput(a, 'w'));
      await sleep(15);
      assert.ok((await s.unwokenAnswers(10, 10_000)).some((c) => c.tool_call_id === a.tool_call_id));
      assert.ok(!(await s.unwokenAnswers(60_000, 10_000)).some((c) => c.tool_call_id === a.tool_call_id), 'not before the delay');
      await s.markWoken(a);
      assert.ok(!(await s.unwokenAnswers(10, 10_000)).some((c) => c.tool_call_id === a.tool_call_id));
      assert.equal((await s.getClaim(a))?.woken, true);
    });

    test('inbox: filter by agent', async () => {
      const a = anchor();
      await s.claim(a, null, 'w', 60_000, {});
      const input = answerInput(a, 'w');
      input.report.agent_id = `agent-${randomUUID()}`;
      await s.answer(input);
      const got = await s.listInbox({ agent_id: input.report.agent_id });
      assert.equal(got.length, 1);
      assert.equal(got[0]?.kind, 'tool.report');
      assert.equal(got[0]?.tool_call_id, a.tool_call_id);
    });

    test('approvals: create, list pending, decide once', async () => {
      const a = anchor();
      const id = `apr-${randomUUID()}`;
      const now = await s.now();
      const rec = await s.createApproval({ id, ...a, project_id: 'p', tool_name: 'python.run', summary: { arguments: { code: '1+1' } }, expires_at: now + 60_000 });
      assert.equal(rec.state, 'pending');
      assert.ok((await s.listApprovals('pending')).some((x) => x.id === id));
      const p = await peer();
      const [x, y] = await Promise.all([s.decideApproval(id, 'approved', 'alice', null), p.decideApproval(id, 'rejected', 'bob', 'no')]);
      assert.equal(Number(x) + Number(y), 1, 'exactly one decision lands');
      const got = await s.getApproval(id);
      assert.ok(got && (got.state === 'approved' || got.state === 'rejected'));
      assert.ok(got.decided_at !== null);
      assert.deepEqual(got.summary, { arguments: { code: '1+1' } });
      assert.ok(!(await s.listApprovals('pending')).some((q) => q.id === id));
      assert.equal(await s.getApproval('apr-none'), undefined);
    });

    test('approvals: the operator\'s signature is stored with the decision (and only with it)', async () => {
      const a = anchor();
      const id = `apr-${randomUUID()}`;
      const rec = await s.createApproval({ id, ...a, project_id: 'p', tool_name: 'echo', summary: {}, expires_at: (await s.now()) + 60_000 });
      assert.equal(rec.signature, null);
      assert.equal(await s.decideApproval(id, 'approved', 'alice', null, '{"alg":"ed25519","signature":"x"}'), true);
      assert.equal((await s.getApproval(id))?.signature, '{"alg":"ed25519","signature":"x"}');
      const id2 = `apr-${randomUUID()}`;
      await s.createApproval({ id: id2, ...anchor(), project_id: 'p', tool_name: 'echo', summary: {}, expires_at: (await s.now()) + 60_000 });
      assert.equal(await s.decideApproval(id2, 'rejected', 'bob', 'no'), true);
      assert.equal((await s.getApproval(id2))?.signature, null);
    });
  });
}
