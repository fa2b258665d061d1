// The floor of a UTP call on this machine: the same hops as Airlock's echo path, with bare
// statements and no Airlock code. The caller commits a card, publishes the command through JetStream;
// a worker process (pull consumer) commits a claim while reading the card, commits the result card +
// inbox report + claim update in one transaction, publishes the wakeup and acks; the caller reads the
// result card. Same durability as the stores (SQLite WAL synchronous=NORMAL; PostgreSQL as the server
// is set, except the caller's card commit, which does not wait for its own WAL flush, as in the
// store). What Airlock adds on top of this row is its own cost; what this row costs is the machine's.
//
// Used by bench/utp.mjs: `measureFloor(kind, cfg)` in the caller; `node bench/utp-floor.mjs <json>` is
// the worker process.
import { Buffer } from 'node:buffer';
import { randomBytes, randomUUID } from 'node:crypto';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { readFileSync, writeFileSync } from 'node:fs';
import { AckPolicy, RetentionPolicy, StorageType, connect, headers, nanos } from 'nats';

const SQLITE_SCHEMA = `
CREATE TABLE IF NOT EXISTS cards (card_id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS claims (t TEXT NOT NULL, c TEXT NOT NULL, state TEXT NOT NULL, result_card_id TEXT, PRIMARY KEY (t, c));
CREATE TABLE IF NOT EXISTS inbox (id INTEGER PRIMARY KEY, t TEXT NOT NULL, c TEXT NOT NULL, payload TEXT NOT NULL);`;
const PG_SCHEMA = (s) => `CREATE SCHEMA ${s};
CREATE TABLE ${s}.cards (card_id text PRIMARY KEY, body jsonb NOT NULL);
CREATE TABLE ${s}.claims (t text NOT NULL, c text NOT NULL, state text NOT NULL, result_card_id text, PRIMARY KEY (t, c));
CREATE TABLE ${s}.inbox (id bigserial PRIMARY KEY, t text NOT NULL, c text NOT NULL, payload jsonb NOT NULL);`;

/** Bare store steps over one connection: SQLite (better-sqlite3) or PostgreSQL (pg). */
async function openBare(cfg) {
  if (cfg.kind === 'sqlite') {
    const { default: Database } = await import('better-sqlite3');
    const db = new Database(cfg.sqlite);
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.pragma('busy_timeout = 5000');
    db.exec(SQLITE_SCHEMA);
    const put = db.prepare('INSERT INTO cards (card_id, body) VALUES (?, ?)');
    const get = db.prepare('SELECT body FROM cards WHERE card_id = ?');
    const claim = db.prepare("INSERT INTO claims (t, c, state) VALUES (?, ?, 'running') ON CONFLICT DO NOTHING RETURNING t");
    const upd = db.prepare("UPDATE claims SET state = 'answered', result_card_id = ? WHERE t = ? AND c = ?");
    const inbox = db.prepare('INSERT INTO inbox (t, c, payload) VALUES (?, ?, ?)');
    const claimTx = db.transaction((t, c, cardId) => ({ won: claim.get(t, c) !== undefined, card: get.get(cardId)?.body }));
    const answerTx = db.transaction((t, c, card, payload) => {
      put.run(card.card_id, JSON.stringify(card));
      inbox.run(t, c, payload);
      upd.run(card.card_id, t, c);
    });
    return {
      putCard: async (card) => void put.run(card.card_id, JSON.stringify(card)),
      getCard: async (id) => JSON.parse(get.get(id).body),
      claim: async (t, c, cardId) => claimTx.immediate(t, c, cardId),
      answer: async (t, c, card, payload) => answerTx.immediate(t, c, card, payload),
      close: async () => db.close(),
    };
  }
  const { default: pg } = await import('pg');
  // The caller's connection commits the tool.call card without waiting for its own WAL flush, as
  // Airlock's PostgreSQL store does (the worker's flushed claim makes it durable); the worker's
  // connection (claim, answer) flushes every commit. Many calls in flight (`cfg.pool`): a pool of
  // that many connections, as Airlock's store keeps.
  const conn = { connectionString: cfg.pg, application_name: `airlock-bench-${cfg.schema}`, options: `-c search_path=${cfg.schema}${cfg.caller ? ' -c synchronous_commit=off' : ''}` };
  const client = cfg.pool ? new pg.Pool({ ...conn, max: cfg.pool }) : new pg.Client(conn);
  if (!cfg.pool) await client.connect();
  const q = (name, text, values) => client.query({ name, text, values });
  return {
    putCard: (card) => q('put', 'INSERT INTO cards (card_id, body) VALUES ($1, $2)', [card.card_id, JSON.stringify(card)]),
    getCard: async (id) => (await q('get', 'SELECT body FROM cards WHERE card_id = $1', [id])).rows[0].body,
    claim: async (t, c, cardId) => {
      const r = await q('claim', `WITH ins AS (INSERT INTO claims (t, c, state) VALUES ($1, $2, 'running') ON CONFLICT DO NOTHING RETURNING t)
        SELECT (SELECT count(*) FROM ins) AS won, (SELECT body FROM cards WHERE card_id = $3) AS card`, [t, c, cardId]);
      return { won: Number(r.rows[0].won) === 1, card: r.rows[0].card };
    },
    answer: (t, c, card, payload) =>
      q('answer', `WITH cd AS (INSERT INTO cards (card_id, body) VALUES ($3, $4)), ib AS (INSERT INTO inbox (t, c, payload) VALUES ($1, $2, $5))
        UPDATE claims SET state = 'answered', result_card_id = $3 WHERE t = $1 AND c = $2`, [t, c, card.card_id, JSON.stringify(card), payload]),
    close: () => client.end(),
  };
}

/**
 * The worker process: a pull consumer that claims, answers and wakes, with bare statements. One
 * message at a time (latency), or with `cfg.concurrent` as many at once as the consumer delivers
 * (calls/s of the simplest implementation of these hops: no batching).
 */
async function worker(cfg) {
  const store = await openBare(cfg);
  const nc = await connect({ servers: cfg.nats });
  const consumer = await nc.jetstream().consumers.get(cfg.stream, 'floor');
  process.stdout.write('ready\n');
  // Timeline runs: the same steps as the service's onStep, on the host's monotonic clock.
  const marks = [];
  const step = cfg.timeline ? (c, s) => marks.push([c, s, hostNow()]) : () => undefined;
  let stopping = false;
  process.on('SIGTERM', () => {
    stopping = true;
    if (cfg.timeline) writeFileSync(cfg.timeline, JSON.stringify(marks));
    void nc.close().then(() => store.close()).then(() => process.exit(0));
  });
  const handle = async (m) => {
    const cmd = JSON.parse(Buffer.from(m.data).toString());
    step(cmd.tool_call_id, 'received');
    const { won, card } = await store.claim(cmd.agent_turn_id, cmd.tool_call_id, cmd.tool_call_card_id);
    step(cmd.tool_call_id, 'claimed');
    if (!won || card === undefined) throw new Error('floor: the claim must be new and the card present');
    const result = { card_id: `card-result-${randomUUID()}`, type: 'tool.result', content: { tool_call_id: cmd.tool_call_id, status: 'success', result: { x: 1 } } };
    const wakeup = JSON.stringify({ agent_id: cmd.agent_id, agent_turn_id: cmd.agent_turn_id, tool_call_id: cmd.tool_call_id, tool_result_card_id: result.card_id });
    step(cmd.tool_call_id, 'ran');
    await store.answer(cmd.agent_turn_id, cmd.tool_call_id, result, wakeup);
    step(cmd.tool_call_id, 'committed');
    nc.publish(cfg.wakeup, wakeup);
    m.ack();
    step(cmd.tool_call_id, 'woken');
  };
  if (cfg.concurrent) {
    const fail = (e) => {
      process.stderr.write(`floor worker: ${e}\n`);
      process.exit(1);
    };
    for await (const m of await consumer.consume({ max_messages: cfg.concurrent })) void handle(m).catch(fail);
    return;
  }
  while (!stopping && !nc.isClosed()) {
    const batch = await consumer.fetch({ max_messages: 64, expires: 1000 });
    for await (const m of batch) await handle(m);
  }
}

/** Milliseconds on the host's monotonic clock (one clock for every process of this host). */
export function hostNow() {
  return Number(process.hrtime.bigint()) / 1e6;
}

/**
 * A floor deployment: the caller's connection here, the worker in its own process. `call()` makes
 * one bare call and returns its stamps (hostNow(): start, card, puback, client_received, done);
 * `close()` stops the worker and, with `timeline`, adds the worker's stamps to the calls made.
 */
export async function openFloor(kind, { nats, pg, sqlite, timeline = false, concurrent = 0 }) {
  const schema = `airlock_floor_${randomBytes(4).toString('hex')}`;
  const stream = `AIRLOCK_FLOOR_${randomBytes(4).toString('hex').toUpperCase()}`;
  const nc = await connect({ servers: nats });
  const jsm = await nc.jetstreamManager();
  await jsm.streams.add({ name: stream, subjects: [`${stream}.cmd`], retention: RetentionPolicy.Workqueue, storage: StorageType.File, duplicate_window: nanos(120_000) });
  await jsm.consumers.add(stream, { durable_name: 'floor', ack_policy: AckPolicy.Explicit, ack_wait: nanos(30_000), max_ack_pending: 10_000 });
  let admin;
  if (kind === 'postgres') {
    const { default: pgLib } = await import('pg');
    admin = new pgLib.Client({ connectionString: pg });
    await admin.connect();
    await admin.query(PG_SCHEMA(schema));
  }
  // Calls in flight: the worker takes up to 64 messages at once and each side has 16 connections,
  // as the bench's Airlock workers and store do.
  const many = concurrent ? { concurrent: 64, pool: 16 } : {};
  const cfg = { kind, nats, pg, sqlite, schema, stream, wakeup: `${stream}.wakeup`, ...many, ...(timeline ? { timeline: `${sqlite}.timeline.json` } : {}) };
  const store = await openBare({ ...cfg, caller: true }); // the caller's connection (creates the SQLite tables first)
  // AIRLOCK_BENCH_PROF=<dir>: the floor's worker writes a CPU profile there too, to compare with Airlock's.
  const prof = process.env.AIRLOCK_BENCH_PROF ? ['--cpu-prof', '--cpu-prof-dir', process.env.AIRLOCK_BENCH_PROF] : [];
  const child = spawn(process.execPath, [...prof, fileURLToPath(import.meta.url), JSON.stringify(cfg)], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise((resolve, reject) => {
    child.stdout.on('data', (b) => b.toString().includes('ready') && resolve());
    child.on('exit', (c) => reject(new Error(`floor worker exited with ${c}`)));
  });
  const waiters = new Map();
  nc.subscribe(cfg.wakeup, { callback: (_e, m) => waiters.get(JSON.parse(Buffer.from(m.data).toString()).tool_call_id)?.(m) });
  const js = nc.jetstream();
  const calls = [];
  return {
    /** The worker process (its CPU is read from /proc by the timeline). */
    pid: child.pid,
    /** Its PostgreSQL backends carry `airlock-bench-<schema>` as application_name. */
    schema,
    async call() {
      const t = `turn-${randomUUID()}`;
      const c = `call-${randomUUID()}`;
      const cur = { id: c, start: hostNow() };
      const card = { card_id: `card-call-${randomUUID()}`, type: 'tool.call', content: { tool_call_id: c, tool_name: 'echo', arguments: { x: 1 }, agent_turn_id: t } };
      await store.putCard(card);
      cur.card = hostNow();
      const woken = new Promise((r) => waiters.set(c, r));
      const h = headers();
      h.set('CG-Agent-Id', 'bench');
      h.set('CG-Turn-Id', t);
      h.set('CG-Tool-Call-Id', c);
      await js.publish(`${stream}.cmd`, JSON.stringify({ agent_id: 'bench', agent_turn_id: t, turn_epoch: 1, tool_call_id: c, after_execution: 'suspend', tool_call_card_id: card.card_id }), { headers: h });
      cur.puback = hostNow();
      const m = await woken;
      waiters.delete(c);
      cur.client_received = hostNow();
      await store.getCard(JSON.parse(Buffer.from(m.data).toString()).tool_result_card_id);
      cur.done = hostNow();
      calls.push(cur);
      return cur;
    },
    async close() {
      await new Promise((r) => {
        child.removeAllListeners('exit');
        child.on('exit', r);
        child.kill('SIGTERM');
      });
      await store.close();
      await jsm.streams.delete(stream);
      await nc.close();
      if (admin) {
        await admin.query(`DROP SCHEMA ${schema} CASCADE`);
        await admin.end();
      }
      if (!timeline) return;
      const byId = new Map(calls.map((x) => [x.id, x]));
      for (const [id, st, at] of JSON.parse(readFileSync(cfg.timeline, 'utf8'))) {
        const x = byId.get(id);
        if (x) x[st] = at;
      }
    },
  };
}

/** Sequential bare calls from this process against a worker process; returns the latencies in ms. */
export async function measureFloor(kind, { nats, pg, sqlite, n, warmup = 100 }) {
  const f = await openFloor(kind, { nats, pg, sqlite });
  for (let i = 0; i < warmup; i++) await f.call();
  const lat = [];
  for (let i = 0; i < n; i++) {
    const c = await f.call();
    lat.push(c.done - c.start);
  }
  await f.close();
  return lat;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await worker(JSON.parse(process.argv[2]));
