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
