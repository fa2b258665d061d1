// The sweeper runs every few seconds in every worker: its two queries must read the few rows they
// look for (running claims past their lease, answered claims whose wakeup is not known sent), never
// every claim the store has answered. Each store is filled with 50,000 answered claims and a few
// of each kind the sweeper wants; the sweep finds exactly those, and the query plans go through the
// partial indexes (an index by state used to make each sweep read every answered claim).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import pg from 'pg';
import { PostgresStore, SWEEP_SQL as PG_SWEEP } from '../../src/store/postgres.js';
import { SqliteStore, SWEEP_SQL as SQLITE_SWEEP } from '../../src/store/sqlite.js';
import { disposePostgres, freshPostgres, PG_URL } from './services.js';

const ANSWERED = 50_000;
const now = Date.now();
/** Claims as rows: [turn, call, state, lease_until, woken, updated_at]. */
const wanted = {
  expired: [0, 1, 2].map((i) => [`run-${i}`, 'c', 'running', now - 60_000 + i, false, now - 60_000]),
  unwoken: [0, 1, 2].map((i) => [`unwoken-${i}`, 'c', 'answered', now - 120_000, false, now - 90_000 + i]),
  // Not wanted: a running claim within its lease, an unwoken answer too recent to publish again.
  others: [
    ['live', 'c', 'running', now + 60_000, false, now],
    ['fresh', 'c', 'answered', now - 120_000, false, now],
  ],
} as const;

const ids = (rows: { agent_turn_id: string }[]) => rows.map((r) => r.agent_turn_id).sort();

test('SQLite: the sweep finds exactly the expired and unwoken claims among 50,000 answered, through its partial indexes', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-sweep-'));
  try {
    const file = join(dir, 'airlock.db');
    // A store made by an earlier version, with its index of every claim by state: opened again, it
    // gets the partial indexes and loses that one.
    await new SqliteStore(file).init();
    const old = new Database(file);
    old.exec('DROP INDEX claims_lease; DROP INDEX claims_unwoken; CREATE INDEX claims_running ON claims (state, lease_until)');
    old.close();
    const store = new SqliteStore(file);
    await store.init();
    const db = new Database(file);
    const indexes = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'claims' AND sql IS NOT NULL ORDER BY name").all() as { name: string }[]).map((r) => r.name);
    assert.deepEqual(indexes, ['claims_lease', 'claims_unwoken']);
    const ins = db.prepare(
      "INSERT INTO claims (agent_turn_id, tool_call_id, tool_call_card_id, context, worker_id, state, lease_until, result_card_id, wakeup, woken, created_at, updated_at) VALUES (?, ?, 'card', '{}', 'w1', ?, ?, NULL, '{}', ?, ?, ?)",
    );
    db.transaction(() => {
      for (let i = 0; i < ANSWERED; i++) ins.run(`done-${i}`, 'c', 'answered', now - 1e6, 1, now - 1e6, now - 1e6 + i);
      for (const [t, c, state, lease, woken, updated] of [...wanted.expired, ...wanted.unwoken, ...wanted.others]) ins.run(t, c, state, lease, woken ? 1 : 0, updated, updated);
    })();
    const plan = (sql: string) => (db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...sql.split('?').slice(1).map(() => 0)) as { detail: string }[]).map((r) => r.detail).join(' | ');
    assert.match(plan(SQLITE_SWEEP.unwoken), /USING (COVERING )?INDEX claims_unwoken/);
    assert.doesNotMatch(plan(SQLITE_SWEEP.unwoken), /TEMP B-TREE/, 'the index gives the order: no sort of what it read');
    assert.match(plan(SQLITE_SWEEP.expired), /USING (COVERING )?INDEX claims_lease/);
    db.close();
    assert.deepEqual(ids(await store.unwokenAnswers(10_000, 100)), ['unwoken-0', 'unwoken-1', 'unwoken-2']);
    assert.deepEqual(ids(await store.takeOverExpired('w2', 30_000, 100)), ['run-0', 'run-1', 'run-2']);
    await store.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('PostgreSQL: the sweep finds exactly the expired and unwoken claims among 50,000 answered, through its partial indexes', async () => {
  const made = await freshPostgres();
  const c = new pg.Client({ connectionString: PG_URL, options: `-c search_path=${made.schema}` });
  await c.connect();
  // As an earlier version left it (an index of every claim by state), then opened again.
  await c.query('DROP INDEX claims_lease; DROP INDEX claims_unwoken; CREATE INDEX claims_running ON claims (state, lease_until)');
  await made.close();
  const store = new PostgresStore(PG_URL, { schema: made.schema });
  await store.init();
  try {
    const indexes = (await c.query("SELECT indexname FROM pg_indexes WHERE tablename = 'claims' AND schemaname = $1 AND indexname <> 'claims_pkey' ORDER BY indexname", [store.schema])).rows.map((r: { indexname: string }) => r.indexname);
    assert.deepEqual(indexes, ['claims_lease', 'claims_unwoken']);
    await c.query(
      `INSERT INTO claims (agent_turn_id, tool_call_id, tool_call_card_id, context, worker_id, state, lease_until, wakeup, woken, created_at, updated_at)
       SELECT 'done-' || g, 'c', 'card', '{}', 'w1', 'answered', $1::bigint, '{}', true, $1::bigint, $1::bigint + g FROM generate_series(1, $2::int) g`,
      [now - 1e6, ANSWERED],
    );
    for (const [t, k, state, lease, woken, updated] of [...wanted.expired, ...wanted.unwoken, ...wanted.others]) {
      await c.query("INSERT INTO claims (agent_turn_id, tool_call_id, tool_call_card_id, context, worker_id, state, lease_until, wakeup, woken, created_at, updated_at) VALUES ($1, $2, 'card', '{}', 'w1', $3, $4, '{}', $5, $6, $6)", [t, k, state, lease, woken, updated]);
    }
    await c.query('ANALYZE claims');
    const plan = async (name: string, sql: string, args: string) => {
      await c.query(`PREPARE ${name} AS ${sql}`);
      // An UPDATE's plan is only explained, never run (EXPLAIN without ANALYZE).
      return (await c.query(`EXPLAIN EXECUTE ${name}(${args})`)).rows.map((r: Record<string, string>) => r['QUERY PLAN']).join(' | ');
    };
    const unwoken = await plan('sweep_unwoken', PG_SWEEP.unwoken, '10000, 100');
    assert.match(unwoken, /claims_unwoken/);
    assert.doesNotMatch(unwoken, /Seq Scan|Sort/);
    const expired = await plan('sweep_expired', PG_SWEEP.expired, "'w2', 30000, 100");
    assert.match(expired, /claims_lease/);
    assert.doesNotMatch(expired, /Seq Scan/);
    assert.deepEqual(ids(await store.unwokenAnswers(10_000, 100)), ['unwoken-0', 'unwoken-1', 'unwoken-2']);
    assert.deepEqual(ids(await store.takeOverExpired('w2', 30_000, 100)), ['run-0', 'run-1', 'run-2']);
  } finally {
    await c.end();
    await disposePostgres(store);
  }
});
