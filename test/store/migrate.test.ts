import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import pg from 'pg';
import { PostgresStore } from '../../src/store/postgres.js';
import { SqliteStore } from '../../src/store/sqlite.js';
import { PG_URL, uniqueName } from './services.js';

/**
 * Stores made before signed UTP approvals (an approvals table without `signature`) are brought up
 * to date when a new Airlock opens them: the column is added, old rows keep their data (and read
 * as unsigned, so an old "approved" row approves nothing), new decisions store their signature.
 */

// The approvals table as earlier versions created it.
const OLD_APPROVALS = (text: string, bigint: string) => `CREATE TABLE approvals (
  id ${text} PRIMARY KEY, agent_turn_id ${text} NOT NULL, tool_call_id ${text} NOT NULL, project_id ${text} NOT NULL,
  tool_name ${text} NOT NULL, summary ${text} NOT NULL, state ${text} NOT NULL, decided_by ${text}, reason ${text},
  created_at ${bigint} NOT NULL, expires_at ${bigint} NOT NULL, decided_at ${bigint})`;

test('SQLite: an old store gets approvals.signature; its rows survive, unsigned', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-migrate-'));
  try {
    const file = join(dir, 'airlock.db');
    const old = new Database(file);
    old.exec(OLD_APPROVALS('TEXT', 'INTEGER'));
    old.prepare("INSERT INTO approvals VALUES ('apr-old', 't', 'c', 'p', 'echo', '{\"arguments\":{}}', 'approved', 'alice', NULL, 1, 2, 3)").run();
    old.close();
    const s = new SqliteStore(file);
    await s.init();
    const got = await s.getApproval('apr-old');
    assert.equal(got?.state, 'approved');
    assert.equal(got?.decided_by, 'alice');
    assert.equal(got?.signature, null);
    await s.createApproval({ id: 'apr-new', agent_turn_id: 't', tool_call_id: 'c2', project_id: 'p', tool_name: 'echo', summary: {}, expires_at: Date.now() + 60_000 });
    assert.equal(await s.decideApproval('apr-new', 'approved', 'alice', null, 'sig'), true);
    assert.equal((await s.getApproval('apr-new'))?.signature, 'sig');
    await s.close();
    // A second open (another worker) finds the column there: nothing to do, no error.
    const again = new SqliteStore(file);
    await again.init();
    await again.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('PostgreSQL: an old store gets approvals.signature; its rows survive, unsigned; workers opening it at once agree', async () => {
  const schema = uniqueName('airlock_mig');
  const c = new pg.Client({ connectionString: PG_URL });
  await c.connect();
  try {
    await c.query(`CREATE SCHEMA ${schema}`);
    await c.query(`SET search_path = ${schema}`);
    await c.query(OLD_APPROVALS('text', 'bigint').replace('summary text', 'summary jsonb'));
    await c.query(`INSERT INTO approvals VALUES ('apr-old', 't', 'c', 'p', 'echo', '{"arguments":{}}', 'approved', 'alice', NULL, 1, 2, 3)`);
    const stores = [new PostgresStore(PG_URL, { schema }), new PostgresStore(PG_URL, { schema })];
    await Promise.all(stores.map((s) => s.init()));
    const [s] = stores as [PostgresStore, PostgresStore];
    const got = await s.getApproval('apr-old');
    assert.equal(got?.state, 'approved');
    assert.equal(got?.signature, null);
    await s.createApproval({ id: 'apr-new', agent_turn_id: 't', tool_call_id: 'c2', project_id: 'p', tool_name: 'echo', summary: {}, expires_at: Date.now() + 60_000 });
    assert.equal(await s.decideApproval('apr-new', 'approved', 'alice', null, 'sig'), true);
    assert.equal((await s.getApproval('apr-new'))?.signature, 'sig');
    for (const x of stores) await x.close();
  } finally {
    await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined);
    await c.end();
  }
});
