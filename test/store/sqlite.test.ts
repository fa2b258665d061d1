import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { SqliteStore } from '../../src/store/sqlite.js';
import { answerInput, storeSuite } from './suite.js';

storeSuite('SQLite', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-store-'));
  const file = join(dir, 'airlock.db');
  const store = new SqliteStore(file);
  await store.init();
  return {
    store,
    peer: async () => {
      const p = new SqliteStore(file);
      await p.init();
      return p;
    },
    dispose: async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

test('a SQLite store closed and opened again claims and answers: nothing of the closed connection is reused', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-store-'));
  try {
    const store = new SqliteStore(join(dir, 'airlock.db'));
    for (const round of [1, 2]) {
      await store.init();
      const a = { agent_turn_id: `turn-${round}`, tool_call_id: 'call-1' };
      assert.equal((await store.claim(a, null, 'w1', 60_000, {})).claimed, true);
      assert.deepEqual(await store.answer(answerInput(a, 'w1')), { ok: true });
      await store.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
