import pg from 'pg';
import { randomUUID, randomBytes } from 'node:crypto';
import { PostgresStore } from '../dist/src/store/postgres.js';
const URL = 'postgres://postgres@127.0.0.1:5432/test';
const N = Number(process.env.N ?? 1500);
const now = () => Number(process.hrtime.bigint()) / 1e6;
const NOW = `(extract(epoch from clock_timestamp()) * 1000)::bigint`;
const mk = async (drop) => { const s = `airlock_scrv_${randomBytes(3).toString('hex')}`; const st = new PostgresStore(URL, { schema: s }); await st.init(); await st.close();
  const a = new pg.Client({ connectionString: URL }); await a.connect(); for (const d of drop) await a.query(`DROP INDEX ${s}.${d}`); await a.end();
  const c = new pg.Client({ connectionString: URL, options: `-c search_path=${s}` }); await c.connect(); return { s, c }; };
const variants = {
  full: await mk([]),
  noInboxAgent: await mk(['inbox_agent']),
  noClaimIdx: await mk(['claims_lease', 'claims_unwoken']),
  noAll: await mk(['inbox_agent', 'claims_lease', 'claims_unwoken']),
};
const claimA = `WITH ins AS (INSERT INTO claims (agent_turn_id, tool_call_id, tool_call_card_id, context, worker_id, state, lease_until, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, 'running', ${NOW} + $6, ${NOW}, ${NOW}) ON CONFLICT DO NOTHING RETURNING *)
       SELECT (SELECT to_jsonb(ins) FROM ins) AS claim, (SELECT body FROM cards WHERE card_id = $7) AS card`;
const claimB = `WITH ins AS (INSERT INTO claims (agent_turn_id, tool_call_id, tool_call_card_id, context, worker_id, state, lease_until, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, 'running', ${NOW} + $6, ${NOW}, ${NOW}) ON CONFLICT DO NOTHING RETURNING 1)
       SELECT (SELECT count(*) FROM ins) AS won, (SELECT body FROM cards WHERE card_id = $7) AS card`;
const answer = `WITH u AS (
           UPDATE claims SET state = 'answered', result_card_id = $1, wakeup = $2, updated_at = ${NOW}
           WHERE agent_turn_id = $3 AND tool_call_id = $4 AND state = 'running' AND worker_id = $5 RETURNING 1),
         c AS (
           INSERT INTO cards (card_id, type, agent_turn_id, tool_call_id, body, created_at)
           SELECT $1, 'tool.result', $3, $4, $6, ${NOW} WHERE EXISTS (SELECT 1 FROM u) RETURNING 1),
         i AS (
           INSERT INTO inbox (agent_id, agent_turn_id, tool_call_id, kind, payload, created_at)
           SELECT $7, $3, $4, $8, $9, ${NOW} WHERE EXISTS (SELECT 1 FROM u) RETURNING 1)
         SELECT (SELECT count(*) FROM u) AS u, (SELECT count(*) FROM c) AS c, (SELECT count(*) FROM i) AS i`;
const T = {};
const rec = (k, v) => (T[k] ??= []).push(v);
async function one(name, v, claimSql, on) {
  const c = v.c; const t = `turn-${randomUUID()}`, k = `call-${randomUUID()}`;
  const card = { card_id: `card-call-${randomUUID()}`, type: 'tool.call', created_at: new Date().toISOString(), content: { tool_call_id: k, tool_name: 'echo', arguments: { x: 1 }, agent_turn_id: t } };
  await c.query({ name: 'put', text: `INSERT INTO cards (card_id, type, agent_turn_id, tool_call_id, body, created_at) VALUES ($1, $2, $3, $4, $5, ${NOW})`, values: [card.card_id, 'tool.call', t, k, JSON.stringify(card)] });
  const t1 = now();
  await c.query({ name: 'claim' + (claimSql === claimA ? 'A' : 'B'), text: claimSql, values: [t, k, card.card_id, JSON.stringify({ agent_id: 'bench', subject: 'cg.v1.p.c.cmd.tool.echo', project_id: 'p' }), 'w1', 30000, card.card_id] });
  const t2 = now();
  const res = { card_id: `card-result-${randomUUID()}`, type: 'tool.result', created_at: new Date().toISOString(), content: { tool_call_id: k, status: 'success', result: { x: 1 } } };
  const wakeup = { subject: 'cmd.agent.bench.wakeup', payload: { agent_id: 'bench', agent_turn_id: t, tool_call_id: k, tool_result_card_id: res.card_id }, headers: { a: 'b' } };
  await c.query({ name: 'answer', text: answer, values: [res.card_id, JSON.stringify(wakeup), t, k, 'w1', JSON.stringify(res), 'bench', 'tool.report', JSON.stringify(wakeup.payload)] });
  const t3 = now();
  if (on) { rec(`${name} claim`, t2 - t1); rec(`${name} answer`, t3 - t2); }
}
const plan = [['full/A', variants.full, claimA], ['full/B', variants.full, claimB], ['noInboxAgent', variants.noInboxAgent, claimA], ['noClaimIdx', variants.noClaimIdx, claimA], ['noAll/B', variants.noAll, claimB]];
for (let i = 0; i < 200; i++) for (const [n, v, s] of plan) await one(n, v, s, false);
for (let i = 0; i < N; i++) for (const [n, v, s] of plan) await one(n, v, s, true);
const p50 = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)].toFixed(3); };
for (const k of Object.keys(T)) console.log(k.padEnd(22), p50(T[k]));
const a = new pg.Client({ connectionString: URL }); await a.connect();
for (const v of Object.values(variants)) { await v.c.end(); await a.query(`DROP SCHEMA ${v.s} CASCADE`); }
await a.end();
