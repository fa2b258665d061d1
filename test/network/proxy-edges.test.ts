// The host proxy on its own (no sandbox): raw HTTP a hostile program can write to 127.0.0.1:3128.
// A raw TCP server on 127.0.0.1 stands in for an allowed destination and keeps the bytes it got;
// the names map to it through `mapResolver`, the policy names 127.0.0.1:<port> explicitly.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { connect as tlsConnect, createServer as createTlsServer, type Server as TlsServer } from 'node:tls';
import { ext, hello, makeCert, record, RETRY_RANDOM, retryingHello, sni } from './helpers-tls.js';
import { networkGrant } from '../../src/base/allowlist.js';
import { NetworkProxy, type ProxyOptions } from '../../src/sandbox/egress/proxy.js';
import type { NetworkCapName, NetworkCaps } from '../../src/sandbox/egress/records.js';
import { mapResolver } from '../../src/sandbox/egress/resolver.js';

let upstream: Server;
let port = 0;
/** What the upstream got, one string per connection; `reply` is its answer (null: it never answers). */
const got: string[] = [];
let reply: string | null = 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok';
let upOpen = 0;
let upPeak = 0;
// TLS destinations for the tunnel tests: TCP connections they got, and the names their clients asked for.
let secure: TlsServer;
let retrying: TlsServer;
let tlsPort = 0;
let retryPort = 0;
let tlsConnections = 0;
const askedNames: string[] = [];

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
  const { key, cert } = makeCert('api.airlock.test');
  const serve = (ecdhCurve?: string) => {
    const srv = createTlsServer({ key, cert, ...(ecdhCurve ? { ecdhCurve } : {}), SNICallback: (name, cb) => (askedNames.push(name), cb(null, undefined)) }, (s) => s.end('hello over tls'));
    srv.on('connection', () => tlsConnections++);
    srv.on('tlsClientError', () => undefined);
    return srv;
  };
  secure = serve();
  // Only P-384: Node's client offers an X25519 key share first, so this server asks it to retry.
  retrying = serve('P-384');
  await new Promise<void>((r) => secure.listen(0, '127.0.0.1', r));
  await new Promise<void>((r) => retrying.listen(0, '127.0.0.1', r));
  tlsPort = (secure.address() as AddressInfo).port;
  retryPort = (retrying.address() as AddressInfo).port;
});

after(() => {
  upstream.close();
  secure.close();
  retrying.close();
});

async function withProxy(caps: Partial<NetworkCaps>, fn: (pport: number, hits: NetworkCapName[], proxy: NetworkProxy) => Promise<void>, asked = [`api.airlock.test:${port}`], opts: Partial<ProxyOptions> = {}): Promise<void> {
  got.length = 0;
  upPeak = 0;
  const ports = [port, tlsPort, retryPort];
  const { grant } = networkGrant(asked, { allow: true, allowlist: ports.flatMap((p) => [`*.airlock.test:${p}`, `127.0.0.1:${p}`]) });
  const hits: NetworkCapName[] = [];
  const proxy = new NetworkProxy({ grant, caps: { bytesOut: 1 << 20, bytesIn: 1 << 20, connections: 256, ...caps }, resolve: mapResolver({ 'api.airlock.test': ['127.0.0.1'] }), onCap: (c) => hits.push(c), ...opts });
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
 * Opens a CONNECT tunnel to `target` and, once it is established, hands the socket to `use`; resolves
 * with what came back (as latin1) and whether the proxy closed it, after `ms`.
 */
function tunnel(pport: number, target: string, use: (s: Socket) => void, ms = 600): Promise<{ reply: string; closed: boolean }> {
  return new Promise((resolve) => {
    const s = connect(pport, '127.0.0.1');
    let reply = '';
    let closed = false;
    let opened = false;
    const onData = (d: Buffer) => {
      reply += d.toString('latin1');
      if (!opened && reply.includes('\r\n\r\n')) {
        opened = true;
        s.off('data', onData);
        if (reply.startsWith('HTTP/1.1 200')) use(s);
      }
    };
    s.on('data', onData);
    s.on('close', () => (closed = true));
    s.on('error', () => undefined);
    s.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
    setTimeout(() => {
      s.destroy();
      resolve({ reply, closed });
    }, ms);
  });
}

/** Node's TLS client through the tunnel, asking for `servername`; `got` collects what it decrypted. */
function tlsFor(servername: string, got: string[] = []) {
  return (s: Socket) => {
    const t = tlsConnect({ socket: s, servername, rejectUnauthorized: false });
    t.on('data', (d: Buffer) => got.push(d.toString()));
    t.on('error', () => undefined);
  };
}

const tunnelTest = (name: string, fn: (pport: number, proxy: NetworkProxy) => Promise<void>, asked?: () => string[]) =>
  test(name, async () => {
    tlsConnections = 0;
    askedNames.length = 0;
    await withProxy({}, (pport, _hits, proxy) => fn(pport, proxy), asked?.() ?? [`api.airlock.test:${tlsPort}`, `api.airlock.test:${retryPort}`, `api.airlock.test:${port}`]);
  });

tunnelTest('a tunnel to a name carries TLS for that name: the handshake completes, the name is on the record', async (pport, proxy) => {
  const got: string[] = [];
  await tunnel(pport, `api.airlock.test:${tlsPort}`, tlsFor('api.airlock.test', got));
  assert.deepEqual(got, ['hello over tls']);
  const r = records(proxy);
  assert.deepEqual(r.map((x) => [x.allowed, x.code, x.sni]), [[true, 'NET_ALLOWED', 'api.airlock.test']]);
  assert.ok(r[0]!.bytesIn > 0 && r[0]!.bytesOut > 0);
});

tunnelTest('a server that asks the client to retry (HelloRetryRequest): the second ClientHello is checked and let through', async (pport, proxy) => {
  const got: string[] = [];
  await tunnel(pport, `api.airlock.test:${retryPort}`, tlsFor('api.airlock.test', got));
  assert.deepEqual(got, ['hello over tls']);
  assert.deepEqual(records(proxy).map((x) => [x.allowed, x.sni]), [[true, 'api.airlock.test']]);
});

tunnelTest('domain fronting by SNI: a tunnel allowed for one name that asks TLS for another never reaches the destination', async (pport, proxy) => {
  const t = await tunnel(pport, `api.airlock.test:${tlsPort}`, tlsFor('evil.example.net'));
  assert.equal(t.closed, true, 'the proxy closed the tunnel');
  const r = records(proxy);
  assert.deepEqual(r.map((x) => [x.allowed, x.code, x.sni, x.connected, x.bytesOut]), [[false, 'NET_SNI_MISMATCH', 'evil.example.net', false, 0]]);
  assert.match(r[0]!.reason, /evil\.example\.net.*closed before a byte reached the destination/);
  assert.equal(tlsConnections, 0, 'the destination was not even connected to');
});

tunnelTest('domain fronting after a HelloRetryRequest: a second ClientHello that names another server is cut', async (pport, proxy) => {
  // The first ClientHello names the allowed server and offers no key share, so the server must ask
  // for another; the second names another server (the destination would take it).
  let reply = Buffer.alloc(0);
  await tunnel(pport, `api.airlock.test:${tlsPort}`, (s) => {
    s.on('data', (d: Buffer) => {
      reply = Buffer.concat([reply, d]);
      if (reply[0] === 0x16 && reply.length >= 5 + reply.readUInt16BE(3)) s.write(Buffer.concat([record(0x14, Buffer.from([1])), retryingHello('evil.example.net')]));
    });
    s.write(retryingHello('api.airlock.test'));
  });
  assert.deepEqual(reply.subarray(11, 43), RETRY_RANDOM, 'the server asked to retry');
  const r = records(proxy);
  assert.deepEqual(r.map((x) => [x.allowed, x.code, x.sni]), [[false, 'NET_SNI_MISMATCH', 'api.airlock.test, evil.example.net']]);
  assert.match(r[0]!.reason, /^after a HelloRetryRequest, .*evil\.example\.net/);
  assert.ok(!askedNames.includes('evil.example.net'), `the destination was asked for ${askedNames.join(', ')}`);
});

tunnelTest('plain HTTP inside a tunnel to a name, and a hidden name (ECH), never reach the destination', async (pport, proxy) => {
  await tunnel(pport, `api.airlock.test:${tlsPort}`, (s) => s.write('GET / HTTP/1.1\r\nHost: evil.example.net\r\n\r\n'));
  await tunnel(pport, `api.airlock.test:${tlsPort}`, (s) => s.write(hello([sni('api.airlock.test'), ext(0xfe0d, Buffer.from([1, 2, 3, 4]))])));
  assert.deepEqual(records(proxy).map((x) => [x.allowed, x.code]), [[false, 'NET_TUNNEL_NOT_TLS'], [false, 'NET_SNI_HIDDEN']]);
  assert.equal(tlsConnections, 0);
});

tunnelTest('a destination that does not answer with TLS: its answer never reaches the program', async (pport, proxy) => {
  // The raw upstream answers any bytes with an HTTP response: the ClientHello goes, its answer is cut.
  const t = await tunnel(pport, `api.airlock.test:${port}`, tlsFor('api.airlock.test'), 800);
  assert.doesNotMatch(t.reply, /200 OK|Content-Length/, 'the answer reached the program');
  const r = records(proxy);
  assert.deepEqual(r.map((x) => [x.allowed, x.code]), [[false, 'NET_TUNNEL_NOT_TLS']]);
  assert.match(r[0]!.reason, /did not answer the ClientHello with TLS/);
  assert.equal(got[0]!.charCodeAt(0), 0x16, 'only the ClientHello reached it');
});

tunnelTest('a ClientHello dripped 50 bytes at a time is waited for; a tunnel whose client ends mid-hello is closed at once', async (pport, proxy) => {
  const captured: Buffer[] = [];
  const capture = createServer((s) => s.once('data', (d: Buffer) => (captured.push(d), s.destroy())));
  await new Promise<void>((r) => capture.listen(0, '127.0.0.1', r));
  const c = tlsConnect({ host: '127.0.0.1', port: (capture.address() as AddressInfo).port, servername: 'api.airlock.test', rejectUnauthorized: false }).on('error', () => undefined);
  await new Promise((r) => setTimeout(r, 200));
  c.destroy();
  capture.close();
  const whole = captured[0]!;
  const got: string[] = [];
  await tunnel(
    pport,
    `api.airlock.test:${tlsPort}`,
    (s) => {
      for (let at = 0, i = 0; at < whole.length; at += 50, i++) setTimeout(() => s.write(whole.subarray(at, at + 50)), 10 * i);
      s.on('data', (d: Buffer) => got.push(d.toString('latin1')));
    },
    1200,
  );
  assert.equal(records(proxy)[0]!.allowed, true, JSON.stringify(records(proxy)));
  assert.equal(got.join('').charCodeAt(0), 0x16, 'the server answered the dripped ClientHello');
  const t0 = Date.now();
  const t = await tunnel(pport, `api.airlock.test:${tlsPort}`, (s) => s.end(whole.subarray(0, 100)), 300);
  assert.equal(t.closed, true, `the half-closed tunnel was still open ${Date.now() - t0} ms later`);
  assert.match(records(proxy)[1]!.reason, /ended the tunnel before its TLS handshake had started/);
});

tunnelTest(
  'a tunnel to a listed IP address stays opaque (any protocol)',
  async (pport, proxy) => {
    await tunnel(pport, `127.0.0.1:${port}`, (s) => s.write('SSH-2.0-test\r\n'));
    assert.equal(records(proxy)[0]!.allowed, true, JSON.stringify(records(proxy)));
    assert.deepEqual(got, ['SSH-2.0-test\r\n']);
  },
  () => [`127.0.0.1:${port}`],
);

test('a ClientHello past the bytes-out cap is cut there, on the record, and the run is told', async () => {
  tlsConnections = 0;
  await withProxy(
    { bytesOut: 100 },
    async (pport, hits, proxy) => {
      await tunnel(pport, `api.airlock.test:${tlsPort}`, tlsFor('api.airlock.test'));
      assert.deepEqual(records(proxy).map((x) => [x.allowed, x.code]), [[true, 'NET_CAP_BYTES_OUT']]);
      assert.deepEqual(hits, ['networkBytesOut']);
      assert.equal(records(proxy)[0]!.bytesOut, 0, 'nothing went out past the cap');
      assert.equal(tlsConnections, 0, 'the destination was not connected to');
    },
    [`api.airlock.test:${tlsPort}`],
  );
});

test('a ClientHello dripped slower than its time allows is cut when the time is up, not kept open by each byte', async () => {
  tlsConnections = 0;
  await withProxy(
    {},
    async (pport, _hits, proxy) => {
      const t = await tunnel(pport, `api.airlock.test:${tlsPort}`, (s) => {
        const hello = retryingHello('api.airlock.test');
        let i = 0;
        const drip = setInterval(() => (i < hello.length && !s.destroyed ? s.write(hello.subarray(i, ++i)) : clearInterval(drip)), 100);
      }, 1500);
      assert.equal(t.closed, true, 'the tunnel is still open after three times its ClientHello time');
      assert.deepEqual(records(proxy).map((x) => [x.allowed, x.code]), [[false, 'NET_TUNNEL_NOT_TLS']]);
      assert.match(records(proxy)[0]!.reason, /no whole ClientHello within 0\.5 s/);
      assert.equal(tlsConnections, 0);
    },
    [`api.airlock.test:${tlsPort}`],
    { helloTimeoutMs: 500 },
  );
});
