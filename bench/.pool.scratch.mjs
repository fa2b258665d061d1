import pg from 'pg';
const URL = 'postgres://postgres@127.0.0.1:5432/test';
const pool = new pg.Pool({ connectionString: URL, max: 4 });
const cl = new pg.Client({ connectionString: URL }); await cl.connect();
const T = { pool: [], client: [] };
const q = { name: 'x', text: 'SELECT $1::text AS a', values: ['hello'] };
for (let i = 0; i < 6000; i++) {
  let t = performance.now(); await pool.query(q); const a = performance.now() - t;
  t = performance.now(); await cl.query(q); const b = performance.now() - t;
  if (i > 1000) { T.pool.push(a); T.client.push(b); }
}
const p50 = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)].toFixed(4); };
console.log('pool', p50(T.pool), 'client', p50(T.client));
await pool.end(); await cl.end();
