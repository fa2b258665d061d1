import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { after, before, test } from 'node:test';
import { PostgresStore } from '../../src/store/postgres.js';
import { PG_URL, uniqueName } from './services.js';

// PostgreSQL stops answering while many calls are in flight: the calls that share a statement must
// fail together, promptly — not be retried one after another, each waiting out the connect timeout.

let proxy: Server;
let mode: 'forward' | 'blackhole' = 'forward';
const sockets = new Set<Socket>();
let store: PostgresStore;
let schema: string;

before(async () => {
  const target = new URL(PG_URL);
  proxy = createServer((client) => {
    sockets.add(client);
    client.on('close', () => sockets.delete(client));
    client.on('error', () => undefined);
    if (mode === 'blackhole') return; // accepted, never answered
    const server = createConnection({ host: target.hostname, port: Number(target.port || 5432) });
    sockets.add(server);
    server.on('close', () => sockets.delete(server));
    server.on('error', () => client.destroy());
    client.pipe(server).pipe(client);
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  const port = (proxy.address() as { port: number }).port;
  const viaProxy = new URL(PG_URL);
  viaProxy.host = `127.0.0.1:${port}`;
  schema = uniqueName('airlock_outage');
  store = new PostgresStore(viaProxy.toString(), { schema });
  await store.init();
});

after(async () => {
  await store?.close().catch(() => undefined);
  for (const s of sockets) s.destroy();
  proxy?.close();
  const direct = new PostgresStore(PG_URL, { schema });
  await direct.init();
  await direct.dropSchema();
  await direct.close();
});

test('PostgreSQL unreachable mid-load: a batch of claims fails together within two connect timeouts, every caller told', async () => {
  const anchor = () => ({ agent_turn_id: `turn-${randomUUID()}`, tool_call_id: `call-${randomUUID()}` });
  // warm: several pooled connections through the proxy
  await Promise.all(Array.from({ length: 6 }, () => store.claim(anchor(), null, 'w', 60_000, {})));
  mode = 'blackhole';
  for (const s of sockets) s.destroy();
  const t0 = Date.now();
  const outcomes = await Promise.allSettled(Array.from({ length: 12 }, () => store.claim(anchor(), null, 'w', 60_000, {})));
  const elapsed = Date.now() - t0;
  assert.ok(outcomes.every((o) => o.status === 'rejected'), 'every claim failed');
  // the store's connect timeout is 3 s: the lone statements in flight time out, then the batch once
  // (a one-by-one retry of the batch would take ~3 s per call: 30 s here)
  assert.ok(elapsed < 9_000, `failed within ${elapsed} ms`);
});
