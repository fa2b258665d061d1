import { join, resolve } from 'node:path';
import type { Store } from './types.js';

export * from './types.js';

/**
 * `--db`: a `postgres://` / `postgresql://` URL (optionally `?schema=name`), else a SQLite file
 * path; absent: `<workspace>/airlock.db`. The drivers are imported here, on demand, so the CLI
 * pays for them only when a store is used.
 */
export async function openStore(db: string | undefined, workspaceRoot: string): Promise<Store> {
  let store: Store;
  if (db !== undefined && /^postgres(ql)?:\/\//i.test(db)) {
    const { PostgresStore } = await import('./postgres.js');
    store = new PostgresStore(db);
  } else {
    const { SqliteStore } = await import('./sqlite.js');
    store = new SqliteStore(db === undefined ? join(workspaceRoot, 'airlock.db') : resolve(db));
  }
  await store.init();
  return store;
}
