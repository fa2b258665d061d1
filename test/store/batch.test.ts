import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DelayedBatch, GroupCommit, ItemFailed } from '../../src/store/batch.js';

// Pure batching logic (the stores' integration tests in suite.ts run it against real databases).

test('group commit: a lone item is flushed at once, alone; items that arrive while a flush is under way go together next', async () => {
  const flushes: number[][] = [];
  let release: () => void = () => undefined;
  const g = new GroupCommit<number, string>(
    async (xs) => {
      flushes.push(xs);
      if (flushes.length === 1) await new Promise<void>((r) => (release = r));
      return xs.map((x) => `r${x}`);
    },
    { maxInFlight: 1 },
  );
  const first = g.add(1);
  assert.deepEqual(flushes, [[1]], 'the first item did not wait');
  const rest = [g.add(2), g.add(3), g.add(4)];
  assert.equal(flushes.length, 1, 'the others wait while the first flush is under way');
  release();
  assert.deepEqual(await Promise.all([first, ...rest]), ['r1', 'r2', 'r3', 'r4'], 'each caller gets its own result');
  assert.deepEqual(flushes, [[1], [2, 3, 4]]);
});

test('group commit: holdTurn gathers the rest of a turn behind a synchronous flush; a failed flush rejects only its own items', async () => {
  const flushes: number[][] = [];
  const g = new GroupCommit<number, number>(
    (xs) => {
      flushes.push(xs);
      if (xs.includes(13)) throw new Error('bad batch');
      return xs.map((x) => x * 10);
    },
    { maxInFlight: 1, holdTurn: true },
  );
  const a = g.add(1);
  const b = g.add(2);
  const c = g.add(13);
  await assert.rejects(c, /bad batch/);
  await assert.rejects(b, /bad batch/, 'b shared the failed flush');
  assert.equal(await a, 10);
  assert.equal(await g.add(5), 50, 'the next flush works');
  assert.deepEqual(flushes, [[1], [2, 13], [5]]);
});

test('group commit: an ItemFailed result rejects that item alone', async () => {
  const g = new GroupCommit<number, number>((xs) => xs.map((x) => (x === 2 ? new ItemFailed(new Error('two')) : x)), { maxInFlight: 1, holdTurn: true });
  const rs = await Promise.allSettled([g.add(1), g.add(2), g.add(3)]);
  assert.deepEqual(rs.map((r) => r.status), ['fulfilled', 'rejected', 'fulfilled']);
});

test('delayed batch: items added within the delay are flushed once, together, after it', async () => {
  const flushes: string[][] = [];
  const b = new DelayedBatch<string>((xs) => void flushes.push(xs), 30);
  const t0 = Date.now();
  const all = Promise.all([b.add('a'), b.add('b')]);
  assert.deepEqual(flushes, [], 'nothing before the delay');
  await all;
  assert.ok(Date.now() - t0 >= 25, 'flushed after the delay');
  assert.deepEqual(flushes, [['a', 'b']]);
  await b.add('c');
  assert.deepEqual(flushes, [['a', 'b'], ['c']]);
  await b.settled();
});

test('delayed batch: settled() waits for a flush still writing, even when the next batch is collecting', async () => {
  let release: () => void = () => undefined;
  const written: string[] = [];
  const b = new DelayedBatch<string>(async (xs) => {
    if (xs[0] === 'slow') await new Promise<void>((r) => (release = r));
    written.push(...xs);
  }, 5);
  void b.add('slow');
  await new Promise((r) => setTimeout(r, 20)); // its flush has started and is waiting
  void b.add('next');
  let settled = false;
  const s = b.settled().then(() => (settled = true));
  await new Promise((r) => setTimeout(r, 30));
  assert.equal(settled, false, 'the slow flush is not done');
  release();
  await s;
  assert.deepEqual(written.sort(), ['next', 'slow']);
});
