import { randomBytes } from 'node:crypto';
import { PostgresStore } from '../../src/store/postgres.js';

/** The real services the UTP and store tests use (CI and this machine run both). */
export const PG_URL = process.env.AIRLOCK_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/test';
export const NATS_URL = process.env.AIRLOCK_TEST_NATS ?? 'nats://127.0.0.1:4222';

export const uniqueName = (prefix: string): string => `${prefix}_${process.pid}_${randomBytes(4).toString('hex')}`;

/** A PostgreSQL store in a fresh schema; fails with a message naming the service when it is down. */
export async function freshPostgres(): Promise<PostgresStore> {
  const store = new PostgresStore(PG_URL, { schema: uniqueName('airlock_t') });
  try {
    await store.init();
  } catch (e) {
    throw new Error(`PostgreSQL is required for this test and is not usable at ${PG_URL}: ${(e as Error).message}\nStart it (e.g. \`service postgresql start\`) or set AIRLOCK_TEST_PG.`, { cause: e });
  }
  return store;
}

/** Drops the test schema and closes the pool. */
export async function disposePostgres(store: PostgresStore): Promise<void> {
  await store.dropSchema().catch(() => undefined);
  await store.close();
}
