import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { after, before, test } from 'node:test';
import { PostgresStore } from '../../src/store/postgres.js';
import { PG_URL, uniqueName } from './services.js';

// PostgreSQL stops answering while many calls are in flight: the calls that share a statement must
// fail together, promptly — not be retried one after another, each waiting out the connect timeout.
// And a server that goes silent on open connections (no reset, no error) must not hold calls forever.

/** A TCP proxy in front of PostgreSQL that can stop answering new connections, or go silent on open ones. */
class FlakyProxy {
  private server!: Server;
  /** New connections are accepted and never answered. */
  blackhole = false;
  private readonly sockets = new Set<Socket>();
  private readonly pairs = new Set<[Socket, Socket]>();
  url!: URL;

  async start(): Promise<this> {
    const target = new URL(PG_URL);
    this.server = createServer((client) => {
      this.track(client);
      if (this.blackhole) return;
      const upstream = createConnection({ host: target.hostname, port: Number(target.port || 5432) });
      this.track(upstream);
      upstream.on('error', () => client.destroy());
      const pair: [Socket, Socket] = [client, upstream];
      this.pairs.add(pair);
      upstream.on('close', () => this.pairs.delete(pair));
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = new URL(PG_URL);
    this.url.host = `127.0.0.1:${(this.server.address() as { port: number }).port}`;
    return this;
  }

  private track(s: Socket): void {
    this.sockets.add(s);
    s.on('close', () => this.sockets.delete(s));
    s.on('error', () => undefined);
  }

  /** Open connections stay open but no byte moves either way (a hung server, a dead route). */
  silence(): void {
    for (const [client, upstream] of this.pairs) {
      client.unpipe(upstream);
      upstream.unpipe(client);
    }
  }

  dropAll(): void {
    for (const s of this.sockets) s.destroy();
  }

  close(): void {
    this.dropAll();
    this.server.close();
  }
}

const anchor = () => ({ agent_turn_id: `turn-${randomUUID()}`, tool_call_id: `call-${randomUUID()}` });
const schema = uniqueName('airlock_outage');
const proxies: FlakyProxy[] = [];
const stores: PostgresStore[] = [];

async function storeBehindProxy(params: Record<string, string> = {}): Promise<{ proxy: FlakyProxy; store: PostgresStore }> {
  const proxy = await new FlakyProxy().start();
  proxies.push(proxy);
  for (const [k, v] of Object.entries(params)) proxy.url.searchParams.set(k, v);
  const store = new PostgresStore(proxy.url.toString(), { schema });
  stores.push(store);
  await store.init();
  // several pooled connections through the proxy
  await Promise.all(Array.from({ length: 6 }, () => store.claim(anchor(), null, 'w', 60_000, {})));
  return { proxy, store };
}

before(async () => {
  const direct = new PostgresStore(PG_URL, { schema });
  await direct.init();
  await direct.close();
});

after(async () => {
  for (const p of proxies) p.close(); // first: a statement stuck on a silent connection then fails
  for (const s of stores) await s.close().catch(() => undefined);
  const direct = new PostgresStore(PG_URL, { schema });
  await direct.init();
  await direct.dropSchema();
  await direct.close();
});

test('PostgreSQL silent on open connections: statements fail after query_timeout_ms instead of hanging; new connections serve again', { timeout: 30_000 }, async () => {
  const { proxy, store } = await storeBehindProxy({ query_timeout_ms: '1500' });
  proxy.silence();
  proxy.blackhole = true;
  const t0 = Date.now();
  const outcomes = await Promise.allSettled(Array.from({ length: 12 }, () => store.claim(anchor(), null, 'w', 60_000, {})));
  const elapsed = Date.now() - t0;
  for (const o of outcomes) {
    assert.equal(o.status, 'rejected', 'a claim on a silent server fails');
    assert.match(String((o as PromiseRejectedResult).reason), /timeout/i);
  }
  // two statements go out at once, the other ten share the next one: about two timeouts
  assert.ok(elapsed < 6_000, `failed within ${elapsed} ms`);

  // the server answers new connections again: a timed-out connection was dropped, not reused
  proxy.blackhole = false;
  proxy.dropAll();
  // As after a real restart, the connections' ends are seen before the next statement: one sent in
  // the same tick as the close goes out on the dead connection, held or pooled, and fails (the same
  // with the pool alone, given an idle connection: checked with 7f0a421).
  await new Promise((r) => setTimeout(r, 100));
  const a = anchor();
  const again = await store.claim(a, null, 'w', 60_000, {});
  assert.equal(again.claimed, true, 'the store serves again');
  assert.equal((await store.getClaim(a))?.worker_id, 'w');
});

test('a query_timeout_ms that is not a positive whole number is refused with the value named', () => {
  const url = new URL(PG_URL);
  url.searchParams.set('query_timeout_ms', 'soon');
  assert.throws(() => new PostgresStore(url.toString()), /query_timeout_ms must be a whole number of milliseconds above 0, not "soon"/);
});

test('PostgreSQL unreachable mid-load: a batch of claims fails together within two connect timeouts, every caller told', async () => {
  const { proxy, store } = await storeBehindProxy();
  proxy.blackhole = true;
  proxy.dropAll();
  const t0 = Date.now();
  const outcomes = await Promise.allSettled(Array.from({ length: 12 }, () => store.claim(anchor(), null, 'w', 60_000, {})));
  const elapsed = Date.now() - t0;
  assert.ok(outcomes.every((o) => o.status === 'rejected'), 'every claim failed');
  // the store's connect timeout is 3 s: the lone statements in flight time out, then the batch once
  // (a one-by-one retry of the batch would take ~3 s per call: 30 s here)
  assert.ok(elapsed < 9_000, `failed within ${elapsed} ms`);
});

test('the server ends every connection of the store (a restart): once the ends are seen, every kind of statement works again on new connections', async () => {
  const url = new URL(PG_URL);
  const app = uniqueName('airlock_held');
  url.searchParams.set('application_name', app);
  const store = new PostgresStore(url.toString(), { schema });
  stores.push(store);
  await store.init();
  const a = anchor();
  await store.putCard({ card_id: `card-${a.tool_call_id}`, type: 'tool.call', created_at: '2026-11-27T00:00:00Z', content: {} });
  assert.equal((await store.claim(a, null, 'w', 60_000, {})).claimed, true);
  const admin = new PostgresStore(PG_URL, { schema });
  stores.push(admin);
  await admin.init();
  const pids = async (): Promise<number[]> => {
    const r = await (admin as unknown as { q(sql: string, args: unknown[]): Promise<{ rows: { pid: number }[] }> }).q('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [app]);
    return r.rows.map((x) => Number(x.pid));
  };
  const before = await pids();
  assert.ok(before.length >= 2, `the store holds connections (${before.length})`);
  await (admin as unknown as { q(sql: string, args: unknown[]): Promise<unknown> }).q('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [app]);
  await new Promise((r) => setTimeout(r, 200));
  const b = anchor();
  const card = { card_id: `card-${b.tool_call_id}`, type: 'tool.call', created_at: '2026-11-27T00:00:00Z', content: { n: 1 } };
  assert.equal(await store.putCard(card), true);
  assert.deepEqual((await store.claim(b, card.card_id, 'w', 60_000, {}, card.card_id)).card, card);
  assert.equal((await store.getClaim(a))?.worker_id, 'w');
  const after = await pids();
  assert.ok(after.length > 0 && after.every((p) => !before.includes(p)), `only new connections serve (${JSON.stringify({ before, after })})`);
});

test('a quiet store whose idle connections went silent (a NAT or firewall forgot them): after the pool idle timeout the next statement takes a new connection', { timeout: 40_000 }, async () => {
  const { proxy, store } = await storeBehindProxy({ query_timeout_ms: '1500' });
  // Quiet for longer than the pool's idle timeout (10 s): the pool closes its idle connections, so a
  // connection forgotten by the network in the meantime is never used again.
  await new Promise((r) => setTimeout(r, 10_500));
  proxy.silence(); // the open connections stay open but no byte moves; new connections work
  const a = anchor();
  const t0 = Date.now();
  const outcome = await store.claim(a, null, 'w', 60_000, {}).catch((e: Error) => e);
  assert.ok(!(outcome instanceof Error), `the claim went on a connection idle for ${Date.now() - t0 + 10_500} ms: ${String(outcome)}`);
  assert.equal(outcome.claimed, true);
  assert.equal((await store.getClaim(a))?.worker_id, 'w');
});

test('a small pool keeps all its connections for the statements that go through it: one blocked statement does not starve the next while the held connection idles', { timeout: 20_000 }, async () => {
  const store = new PostgresStore(PG_URL, { schema, poolSize: 2 });
  stores.push(store);
  await store.init();
  await new Promise((r) => setTimeout(r, 100)); // the held connections are taken meanwhile
  const a = anchor();
  await store.claim(a, null, 'w', 60_000, {});
  const admin = new PostgresStore(PG_URL, { schema, poolSize: 1 });
  stores.push(admin);
  await admin.init();
  const lock = await (admin as unknown as { p: { connect(): Promise<{ query(sql: string, args?: unknown[]): Promise<unknown>; release(): void }> } }).p.connect();
  try {
    await lock.query('BEGIN');
    await lock.query('SELECT 1 FROM claims WHERE agent_turn_id = $1 FOR UPDATE', [a.agent_turn_id]);
    const cancel = store.requestCancel(a); // waits on the row lock, on one of the pool's two connections
    await new Promise((r) => setTimeout(r, 50));
    // with the pool alone (2535118) the second connection serves it at once
    const listed = await store.listInbox({ limit: 1 }).then(
      () => 'ok',
      (e: Error) => e.message,
    );
    assert.equal(listed, 'ok', 'a statement beside a blocked one is served');
    await lock.query('ROLLBACK');
    assert.equal((await cancel)?.cancel_requested, true);
  } finally {
    await lock.query('ROLLBACK').catch(() => undefined);
    lock.release();
  }
});

test('the held connections keep their pools\' durability: claims and answers flush their commit, only the tool.call card and woken flags do not', async () => {
  const store = new PostgresStore(PG_URL, { schema });
  stores.push(store);
  await store.init();
  await new Promise((r) => setTimeout(r, 100)); // the held connections are taken meanwhile
  type Private = { qp(n: string, s: string, a: unknown[]): Promise<{ rows: { synchronous_commit: string }[] }>; qr: Private['qp']; held: unknown; heldRelaxed: unknown };
  const p = store as unknown as Private;
  assert.ok(p.held && p.heldRelaxed, 'both pools hold a connection');
  // Twice each: the first may go through the pool while a connection is being taken; the second finds it held.
  for (let i = 0; i < 2; i++) {
    assert.equal((await p.qp('sc', 'SHOW synchronous_commit', [])).rows[0]?.synchronous_commit, 'on');
    assert.equal((await p.qr('sc', 'SHOW synchronous_commit', [])).rows[0]?.synchronous_commit, 'off');
  }
});
