// The host proxy on its own (no sandbox): raw HTTP a hostile program can write to 127.0.0.1:3128.
// A raw TCP server on 127.0.0.1 stands in for an allowed destination and keeps the bytes it got;
// the names map to it through `mapResolver`, the policy names 127.0.0.1:<port> explicitly.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { networkGrant } from '../../src/base/allowlist.js';
import { NetworkProxy } from '../../src/sandbox/egress/proxy.js';
import type { NetworkCapName, NetworkCaps } from '../../src/sandbox/egress/records.js';
import { mapResolver } from '../../src/sandbox/egress/resolver.js';

let upstream: Server;
let port = 0;
/** What the upstream got, one string per connection; `reply` is its answer (null: it never answers). */
const got: string[] = [];
let reply: string | null = 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok';
let upOpen = 0;
let upPeak = 0;

before(async () => {
  upstream = createServer((s: Socket) => {
    const i = got.push('') - 1;
    upPeak = Math.max(upPeak, ++upOpen);
    s.on('close', () => upOpen--);
    s.on('error', () => undefined);
    s.on('data', (d: Buffer) => (got[i] += d.toString('latin1')));
    // Answers once the request (and whatever follows it) has arrived.
    const answer = reply;
    if (answer !== null) setTimeout(() => s.end(answer), 100);
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  port = (upstream.address() as AddressInfo).port;
});

after(() => upstream.close());

async function withProxy(caps: Partial<NetworkCaps>, fn: (pport: number, hits: NetworkCapName[], proxy: NetworkProxy) => Promise<void>, asked = [`api.airlock.test:${port}`]): Promise<void> {
  got.length = 0;
  upPeak = 0;
  const { grant } = networkGrant(asked, { allow: true, allowlist: [`*.airlock.test:${port}`, `127.0.0.1:${port}`] });
  const hits: NetworkCapName[] = [];
  const proxy = new NetworkProxy({ grant, caps: { bytesOut: 1 << 20, bytesIn: 1 << 20, connections: 256, ...caps }, resolve: mapResolver({ 'api.airlock.test': ['127.0.0.1'] }), onCap: (c) => hits.push(c) });
  const pport = await proxy.listenTcp();
  try {
    await fn(pport, hits, proxy);
  } finally {
    await proxy.close();
  }
}

/** Writes raw bytes to the proxy and returns what came back within `ms`. */
function raw(pport: number, bytes: string, ms = 600): Promise<string> {
  return new Promise((resolve) => {
    const s = connect(pport, '127.0.0.1');
    let out = '';
    s.on('data', (d: Buffer) => (out += d.toString('latin1')));
    s.on('error', () => undefined);
    s.write(bytes);
    setTimeout(() => {
      s.destroy();
      resolve(out);
    }, ms);
  });
}

const records = (p: NetworkProxy) => p.observation({ address: '127.0.0.1', port: 0, bridge: 'test' }, []).connections;

test('the request line counts against the bytes-out cap (a long URL is bytes out too)', async () => {
  await withProxy({ bytesOut: 4096 }, async (pport, hits, proxy) => {
    for (let i = 0; i < 3; i++) await raw(pport, `GET http://api.airlock.test:${port}/${'x'.repeat(12_000)} HTTP/1.1\r\nHost: x\r\n\r\n`, 300);
    const sent = got.reduce((n, g) => n + g.length, 0);
    assert.ok(sent <= 4096 || hits.includes('networkBytesOut'), `${sent} bytes reached the destination past a bytes-out cap of 4096, and no cap was hit`);
    assert.ok(records(proxy).some((r) => r.code === 'NET_CAP_BYTES_OUT'));
  });
});

test('a body on a GET is framed upstream: no second request is smuggled behind the first', async () => {
  await withProxy({}, async (pport) => {
    const inner = 'GET /smuggled HTTP/1.1\r\nHost: internal.example\r\n\r\n';
    await raw(pport, `GET http://api.airlock.test:${port}/a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n${inner.length.toString(16)}\r\n${inner}\r\n0\r\n\r\n`);
    assert.equal(got.length, 1);
    const [head] = got[0]!.split('\r\n\r\n');
    assert.match(head!, /^GET \/a HTTP\/1\.1\r\n/);
    assert.match(head!, /\r\ntransfer-encoding: chunked|\r\ncontent-length: \d+/i, `the body travels without framing: ${JSON.stringify(got[0])}`);
  });
});

test('an Expect the proxy does not meet is refused and on the record', async () => {
  await withProxy({}, async (pport, _hits, proxy) => {
    const out = await raw(pport, `GET http://api.airlock.test:${port}/a HTTP/1.1\r\nHost: x\r\nExpect: something-else\r\n\r\n`);
    assert.match(out, /^HTTP\/1\.1 417 /);
    assert.equal(got.length, 0);
    const r = records(proxy);
    assert.equal(r.length, 1, 'the refused request is recorded');
    assert.equal(r[0]!.allowed, false);
    assert.equal(r[0]!.code, 'NET_BAD_REQUEST');
  });
});

test('every Location of a redirect is checked: an off-list one behind an on-list one is withheld', async () => {
  const saved = reply;
  reply = `HTTP/1.1 302 Found\r\nLocation: http://api.airlock.test:${port}/fine\r\nLocation: http://evil.example.net/x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`;
  try {
    await withProxy({}, async (pport, _hits, proxy) => {
      const out = await raw(pport, `GET http://api.airlock.test:${port}/a HTTP/1.1\r\nHost: x\r\n\r\n`);
      assert.doesNotMatch(out, /evil\.example\.net\/x/, `the off-list Location reached the program: ${out}`);
      assert.match(out, /^HTTP\/1\.1 403 /);
      assert.ok(records(proxy).some((r) => r.via === 'redirect' && r.code === 'NET_REDIRECT_OFF_LIST' && r.host === 'evil.example.net'), JSON.stringify(records(proxy)));
    });
  } finally {
    reply = saved;
  }
});

test('pipelined plain-HTTP requests on one connection cannot open more upstream connections than the open-connections cap', async () => {
  const saved = reply;
  reply = null; // the destination never answers: each request holds its upstream connection
  try {
    await withProxy({ openConnections: 4 }, async (pport, _hits, proxy) => {
      let req = '';
      for (let i = 0; i < 40; i++) req += `GET http://api.airlock.test:${port}/${i} HTTP/1.1\r\nHost: x\r\n\r\n`;
      req += 'GET http://evil.example.net/ HTTP/1.1\r\nHost: x\r\n\r\n';
      await raw(pport, req, 1000);
      const r = records(proxy);
      assert.equal(r.length, 41, 'every pipelined request is on the record at once, waiting or not');
      assert.equal(r[40]!.code, 'NET_NAME_NOT_ALLOWED', 'a refused request behind a waiting one is recorded');
      assert.ok(upPeak >= 1, 'the first request reached the destination');
      assert.ok(upPeak <= 4, `${upPeak} upstream connections were open at once from one client connection (cap 4)`);
    });
  } finally {
    reply = saved;
  }
});

/**
 * Opens a CONNECT tunnel to `target` and sends `first` through it once it is established (each
 * piece in its own write, 50 ms apart); resolves with what came back and whether the proxy closed it.
 */
function tunnel(pport: number, target: string, first: (s: Socket) => void, ms = 600): Promise<{ reply: string; closed: boolean }> {
  return new Promise((resolve) => {
    const s = connect(pport, '127.0.0.1');
    let reply = '';
    let closed = false;
    let opened = false;
    s.on('data', (d: Buffer) => {
      reply += d.toString('latin1');
      if (!opened && reply.includes('\r\n\r\n')) {
        opened = true;
        if (reply.startsWith('HTTP/1.1 200')) first(s);
      }
    });
    s.on('close', () => (closed = true));
    s.on('error', () => undefined);
    s.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
    setTimeout(() => {
      s.destroy();
      resolve({ reply, closed });
    }, ms);
  });
}

/** A real TLS client (Node's) speaking through the tunnel, asking for `servername`. */
const tlsFor = (servername: string) => (s: Socket) => tlsConnect({ socket: s, servername, rejectUnauthorized: false }).on('error', () => undefined);

test('a tunnel to a name carries TLS for that name: the ClientHello reaches the destination, its name on the record', async () => {
  await withProxy({}, async (pport, _hits, proxy) => {
    await tunnel(pport, `api.airlock.test:${port}`, tlsFor('api.airlock.test'));
    const r = records(proxy);
    assert.equal(r.length, 1);
    assert.equal(r[0]!.allowed, true, JSON.stringify(r));
    assert.equal(r[0]!.sni, 'api.airlock.test');
    assert.equal(got.length, 1);
    assert.equal(got[0]!.charCodeAt(0), 0x16, 'the destination got the ClientHello');
    assert.equal(r[0]!.bytesOut, got[0]!.length);
  });
});

test('domain fronting by SNI: a tunnel allowed for one name that asks TLS for another is cut before a byte leaves', async () => {
  await withProxy({}, async (pport, _hits, proxy) => {
    const t = await tunnel(pport, `api.airlock.test:${port}`, tlsFor('evil.example.net'));
    assert.equal(t.closed, true, 'the proxy closed the tunnel');
    const r = records(proxy);
    assert.equal(r[0]!.allowed, false);
    assert.equal(r[0]!.code, 'NET_SNI_MISMATCH');
    assert.match(r[0]!.reason, /evil\.example\.net.*closed before a byte reached the destination/);
    assert.equal(r[0]!.sni, 'evil.example.net');
    assert.deepEqual(got, [''], 'the destination got nothing');
    assert.equal(r[0]!.bytesOut, 0);
  });
});

test('plain HTTP inside a tunnel to a name (a Host header for another site) is refused; so is a hidden name', async () => {
  await withProxy({}, async (pport, _hits, proxy) => {
    await tunnel(pport, `api.airlock.test:${port}`, (s) => s.write('GET / HTTP/1.1\r\nHost: evil.example.net\r\n\r\n'));
    // An encrypted ClientHello (ECH) whose outer name is the allowed one: the real one is hidden.
    const inner = Buffer.from('api.airlock.test');
    const names = Buffer.concat([Buffer.from([0, inner.length + 3, 0, 0, inner.length]), inner]);
    const exts = Buffer.concat([Buffer.from([0, 0, 0, names.length]), names, Buffer.from([0xfe, 0x0d, 0, 4, 1, 2, 3, 4])]);
    const body = Buffer.concat([Buffer.from([3, 3]), Buffer.alloc(32), Buffer.from([0, 0, 2, 0x13, 1, 1, 0, 0, exts.length]), exts]);
    const hello = Buffer.concat([Buffer.from([0x16, 3, 1, 0, body.length + 4, 1, 0, 0, body.length]), body]);
    await tunnel(pport, `api.airlock.test:${port}`, (s) => s.write(hello));
    const r = records(proxy);
    assert.deepEqual(r.map((x) => [x.allowed, x.code]), [[false, 'NET_TUNNEL_NOT_TLS'], [false, 'NET_SNI_HIDDEN']], JSON.stringify(r));
    assert.deepEqual(got, ['', ''], 'the destination got nothing');
  });
});

test('a ClientHello sent a few bytes at a time is waited for, then forwarded whole', async () => {
  await withProxy({}, async (pport, _hits, proxy) => {
    let hello = Buffer.alloc(0);
    // Node's real ClientHello, captured through a first tunnel (which forwards it), then replayed in pieces.
    await tunnel(pport, `api.airlock.test:${port}`, tlsFor('api.airlock.test'));
    hello = Buffer.from(got[0]!, 'latin1');
    await tunnel(
      pport,
      `api.airlock.test:${port}`,
      (s) => {
        for (let at = 0, i = 0; at < hello.length; at += 100, i++) setTimeout(() => s.write(hello.subarray(at, at + 100)), 20 * i);
        // (a byte at a time would do too; 100 keeps the test short)
      },
      1200,
    );
    assert.equal(records(proxy)[1]!.allowed, true, JSON.stringify(records(proxy)));
    assert.equal(got[1], got[0], 'the destination got the same bytes');
  });
});

test('a tunnel to a listed IP address stays opaque (any protocol)', async () => {
  await withProxy(
    {},
    async (pport, _hits, proxy) => {
      await tunnel(pport, `127.0.0.1:${port}`, (s) => s.write('SSH-2.0-test\r\n'));
      assert.equal(records(proxy)[0]!.allowed, true, JSON.stringify(records(proxy)));
      assert.deepEqual(got, ['SSH-2.0-test\r\n']);
    },
    [`127.0.0.1:${port}`],
  );
});
