// npm run bench:sweep — what one sweep of a UTP worker costs as a store fills up. Every worker
// sweeps every `sweepMs` (15 s by default): expired claims taken over (takeOverExpired) and answered
// claims whose wakeup is not known sent published again (unwokenAnswers). Each store gets
// BENCH_SWEEP_CLAIMS (default 300,000) answered claims, then both queries run 50 times: p50 and p99,
// and the plan each query takes (its partial index, or a scan of every answered claim).
// Needs PostgreSQL (AIRLOCK_BENCH_PG overrides the default URL); SQLite is a file in TMPDIR.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import Database from 'better-sqlite3';
import pg from 'pg';
import { SqliteStore, SWEEP_SQL as SQLITE_SWEEP } from '../dist/src/store/sqlite.js';
import { PostgresStore, SWEEP_SQL as PG_SWEEP } from '../dist/src/store/postgres.js';
import { fmt, summary } from './stats.mjs';

const N = Number(process.env.BENCH_SWEEP_CLAIMS ?? 300_000);
const R = 50;
const PG = process.env.AIRLOCK_BENCH_PG ?? 'postgres://postgres@127.0.0.1:5432/test';
const now = Date.now();

async function timed(name, fn) {
  const xs = [];
  for (let i = 0; i < R; i++) {
    const t = performance.now();
    await fn();
    xs.push(performance.now() - t);
  }
  const s = summary(xs);
  console.log(`  ${name.padEnd(16)} p50 ${fmt(s.p50, 3).padStart(8)} ms  p99 ${fmt(s.p99, 3).padStart(8)} ms`);
}

console.log(`SQLite, ${N.toLocaleString('en')} answered claims:`);
const dir = mkdtempSync(join(tmpdir(), 'airlock-bench-sweep-'));
try {
  const file = join(dir, 'airlock.db');
  const store = new SqliteStore(file);
  await store.init();
  const db = new Database(file);
  const ins = db.prepare("INSERT INTO claims (agent_turn_id, tool_call_id, tool_call_card_id, context, worker_id, state, lease_until, wakeup, woken, created_at, updated_at) VALUES (?, 'c', 'card', '{}', 'w1', 'answered', ?, '{}', 1, ?, ?)");
  db.transaction(() => {
    for (let i = 0; i < N; i++) ins.run(`done-${i}`, now - 1e6, now - 1e6, now - 1e6 + i);
  })();
  for (const [k, sql] of Object.entries(SQLITE_SWEEP)) {
    const plan = db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...sql.split('?').slice(1).map(() => 0)).map((r) => r.detail).join(' | ');
    console.log(`  plan, ${k}: ${plan}`);
  }
  db.close();
  await timed('unwokenAnswers', () => store.unwokenAnswers(10_000, 100));
  await timed('takeOverExpired', () => store.takeOverExpired('w2', 30_000, 100));
  await store.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}

console.log(`PostgreSQL, ${N.toLocaleString('en')} answered claims:`);
const schema = `airlock_bench_sweep_${randomBytes(4).toString('hex')}`;
const store = new PostgresStore(PG, { schema });
await store.init();
const c = new pg.Client({ connectionString: PG, options: `-c search_path=${schema}` });
await c.connect();
try {
  await c.query(
    `INSERT INTO claims (agent_turn_id, tool_call_id, tool_call_card_id, context, worker_id, state, lease_until, wakeup, woken, created_at, updated_at)
     SELECT 'done-' || g, 'c', 'card', '{}', 'w1', 'answered', $1::bigint, '{}', true, $1::bigint, $1::bigint + g FROM generate_series(1, $2::int) g`,
    [now - 1e6, N],
  );
  await c.query('ANALYZE claims');
  for (const [k, sql] of Object.entries(PG_SWEEP)) {
    await c.query(`PREPARE sweep_${k} AS ${sql}`);
    const args = k === 'unwoken' ? '10000, 100' : "'w2', 30000, 100";
    const plan = (await c.query(`EXPLAIN EXECUTE sweep_${k}(${args})`)).rows.map((r) => r['QUERY PLAN'].trim()).join(' | ');
    console.log(`  plan, ${k}: ${plan}`);
  }
  await timed('unwokenAnswers', () => store.unwokenAnswers(10_000, 100));
  await timed('takeOverExpired', () => store.takeOverExpired('w2', 30_000, 100));
} finally {
  await c.end();
  await store.dropSchema();
  await store.close();
}
