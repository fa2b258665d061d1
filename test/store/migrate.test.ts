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
 * Stores made before signed UTP approvals and registrations (approvals and tools tables without
 * `signature`) are brought up to date when a new Airlock opens them: the column is added, old rows
 * keep their data (and read as unsigned, so an old "approved" row approves nothing and an old tool
 * row is not run), new decisions and registrations store their signature.
 */

// The approvals table as earlier versions created it.
const OLD_APPROVALS = (text: string, bigint: string) => `CREATE TABLE approvals (
  id ${text} PRIMARY KEY, agent_turn_id ${text} NOT NULL, tool_call_id ${text} NOT NULL, project_id ${text} NOT NULL,
  tool_name ${text} NOT NULL, summary ${text} NOT NULL, state ${text} NOT NULL, decided_by ${text}, reason ${text},
  created_at ${bigint} NOT NULL, expires_at ${bigint} NOT NULL, decided_at ${bigint})`;

// The tools table as earlier versions created it, with one row.
const OLD_TOOLS = (text: string, json: string) => `CREATE TABLE tools (
  project_id ${text} NOT NULL, tool_name ${text} NOT NULL, description ${text} NOT NULL, parameters ${json} NOT NULL,
  target_subject ${text} NOT NULL, after_execution ${text} NOT NULL, options ${json} NOT NULL, PRIMARY KEY (project_id, tool_name));
  INSERT INTO tools VALUES ('p', 'echo', 'd', '{"type":"object"}', 'cg.v1.p.c.cmd.tool.echo', 'suspend', '{"runner":"echo"}')`;

/** The old tool row reads back unsigned; a signed registration replaces it with its signature. */
async function toolsMigrated(s: SqliteStore | PostgresStore): Promise<void> {
  const old = await s.getTool('p', 'echo');
  assert.deepEqual([old?.options, old?.signature], [{ runner: 'echo' }, null]);
  await s.upsertTool({ ...old!, signature: 'sig' });
  assert.equal((await s.getTool('p', 'echo'))?.signature, 'sig');
}

test('SQLite: an old store gets approvals.signature and tools.signature; its rows survive, unsigned', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-migrate-'));
  try {
    const file = join(dir, 'airlock.db');
    const old = new Database(file);
    old.exec(OLD_APPROVALS('TEXT', 'INTEGER'));
    old.exec(OLD_TOOLS('TEXT', 'TEXT'));
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
    await toolsMigrated(s);
    await s.close();
    // A second open (another worker) finds the column there: nothing to do, no error.
    const again = new SqliteStore(file);
    await again.init();
    await again.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('PostgreSQL: an old store gets approvals.signature and tools.signature; its rows survive, unsigned; workers opening it at once agree', async () => {
  const schema = uniqueName('airlock_mig');
  const c = new pg.Client({ connectionString: PG_URL });
  await c.connect();
  try {
    await c.query(`CREATE SCHEMA ${schema}`);
    await c.query(`SET search_path = ${schema}`);
    await c.query(OLD_APPROVALS('text', 'bigint').replace('summary text', 'summary jsonb'));
    await c.query(`INSERT INTO approvals VALUES ('apr-old', 't', 'c', 'p', 'echo', '{"arguments":{}}', 'approved', 'alice', NULL, 1, 2, 3)`);
    await c.query(OLD_TOOLS('text', 'jsonb'));
    const stores = [new PostgresStore(PG_URL, { schema }), new PostgresStore(PG_URL, { schema })];
    await Promise.all(stores.map((s) => s.init()));
    const [s] = stores as [PostgresStore, PostgresStore];
    const got = await s.getApproval('apr-old');
    assert.equal(got?.state, 'approved');
    assert.equal(got?.signature, null);
    await s.createApproval({ id: 'apr-new', agent_turn_id: 't', tool_call_id: 'c2', project_id: 'p', tool_name: 'echo', summary: {}, expires_at: Date.now() + 60_000 });
    assert.equal(await s.decideApproval('apr-new', 'approved', 'alice', null, 'sig'), true);
    assert.equal((await s.getApproval('apr-new'))?.signature, 'sig');
    await toolsMigrated(s);
    for (const x of stores) await x.close();
  } finally {
    await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined);
    await c.end();
  }
});
