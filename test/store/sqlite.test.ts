import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SqliteStore } from '../../src/store/sqlite.js';
import { storeSuite } from './suite.js';

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
