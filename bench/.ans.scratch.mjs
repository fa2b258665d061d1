import pg from 'pg';
import { randomUUID, randomBytes } from 'node:crypto';
import { PostgresStore } from '../dist/src/store/postgres.js';
const URL = 'postgres://postgres@127.0.0.1:5432/test';
const N = Number(process.env.N ?? 2000);
const now = () => performance.now();
const NOW = `(extract(epoch from clock_timestamp()) * 1000)::bigint`;
const s = `airlock_scra_${randomBytes(3).toString('hex')}`; const st = new PostgresStore(URL, { schema: s }); await st.init(); await st.close();
const c = new pg.Client({ connectionString: URL, options: `-c search_path=${s}` }); await c.connect();
const claimB = `WITH ins AS (INSERT INTO claims (agent_turn_id, tool_call_id, tool_call_card_id, context, worker_id, state, lease_until, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, 'running', ${NOW} + $6, ${NOW}, ${NOW}) ON CONFLICT DO NOTHING RETURNING 1)
       SELECT EXISTS (SELECT 1 FROM ins) AS won, (SELECT body FROM cards WHERE card_id = $7) AS card`;
const A = {
 cur: `WITH u AS (
           UPDATE claims SET state = 'answered', result_card_id = $1, wakeup = $2, updated_at = ${NOW}
           WHERE agent_turn_id = $3 AND tool_call_id = $4 AND state = 'running' AND worker_id = $5 RETURNING 1),
         c AS (
           INSERT INTO cards (card_id, type, agent_turn_id, tool_call_id, body, created_at)
           SELECT $1, 'tool.result', $3, $4, $6, ${NOW} WHERE EXISTS (SELECT 1 FROM u) RETURNING 1),
         i AS (
           INSERT INTO inbox (agent_id, agent_turn_id, tool_call_id, kind, payload, created_at)
           SELECT $7, $3, $4, $8, $9, ${NOW} WHERE EXISTS (SELECT 1 FROM u) RETURNING 1)
         SELECT (SELECT count(*) FROM u) AS u, (SELECT count(*) FROM c) AS c, (SELECT count(*) FROM i) AS i`,
 onecount: `WITH u AS (
           UPDATE claims SET state = 'answered', result_card_id = $1, wakeup = $2, updated_at = ${NOW}
           WHERE agent_turn_id = $3 AND tool_call_id = $4 AND state = 'running' AND worker_id = $5 RETURNING 1),
         c AS (
           INSERT INTO cards (card_id, type, agent_turn_id, tool_call_id, body, created_at)
           SELECT $1, 'tool.result', $3, $4, $6, ${NOW} WHERE EXISTS (SELECT 1 FROM u)),
         i AS (
           INSERT INTO inbox (agent_id, agent_turn_id, tool_call_id, kind, payload, created_at)
           SELECT $7, $3, $4, $8, $9, ${NOW} WHERE EXISTS (SELECT 1 FROM u))
         SELECT count(*) AS u FROM u`,
 now1: `WITH t AS (SELECT ${NOW} AS now), u AS (
           UPDATE claims SET state = 'answered', result_card_id = $1, wakeup = $2, updated_at = (SELECT now FROM t)
           WHERE agent_turn_id = $3 AND tool_call_id = $4 AND state = 'running' AND worker_id = $5 RETURNING 1),
         c AS (
           INSERT INTO cards (card_id, type, agent_turn_id, tool_call_id, body, created_at)
           SELECT $1, 'tool.result', $3, $4, $6, now FROM t WHERE EXISTS (SELECT 1 FROM u)),
         i AS (
           INSERT INTO inbox (agent_id, agent_turn_id, tool_call_id, kind, payload, created_at)
           SELECT $7, $3, $4, $8, $9, now FROM t WHERE EXISTS (SELECT 1 FROM u))
         SELECT count(*) AS u FROM u`,
};
const T = {};
async function one(name, on) {
  const t = `turn-${randomUUID()}`, k = `call-${randomUUID()}`;
  await c.query({ name: 'claimB', text: claimB, values: [t, k, 'card-x', JSON.stringify({ agent_id: 'bench', subject: 'cg.v1.p.c.cmd.tool.echo', project_id: 'p' }), 'w1', 30000, 'card-x'] });
  const res = { card_id: `card-result-${randomUUID()}`, type: 'tool.result', created_at: new Date().toISOString(), content: { tool_call_id: k, status: 'success', after_execution: 'suspend', result: { runner: 'echo', echo: { x: 1 } } } };
  const payload = { agent_id: 'bench', agent_turn_id: t, turn_epoch: 1, tool_call_id: k, tool_result_card_id: res.card_id, status: 'success', after_execution: 'suspend' };
  const wakeup = { subject: 'cg.v1.bxxxx.c.cmd.agent.bench.wakeup', payload, headers: { 'CG-Project-Id': 'bxxxx', 'CG-Channel-Id': 'c', 'CG-Agent-Id': 'bench', 'CG-Turn-Id': t, 'CG-Turn-Epoch': '1', 'CG-Tool-Call-Id': k } };
  const t0 = now();
  const r = await c.query({ name: 'a_' + name, text: A[name], values: [res.card_id, JSON.stringify(wakeup), t, k, 'w1', JSON.stringify(res), 'bench', 'tool.report', JSON.stringify(payload)] });
  if (Number(r.rows[0].u) !== 1) throw new Error('not landed');
  if (on) (T[name] ??= []).push(now() - t0);
}
const names = Object.keys(A);
for (let i = 0; i < 300; i++) for (const n of names) await one(n, false);
for (let i = 0; i < N; i++) for (const n of names) await one(n, true);
const p50 = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)].toFixed(3); };
for (const k of names) console.log(k.padEnd(12), p50(T[k]));
await c.end(); const a = new pg.Client({ connectionString: URL }); await a.connect(); await a.query(`DROP SCHEMA ${s} CASCADE`); await a.end();
