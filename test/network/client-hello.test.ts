// The tunnel's ClientHello reader (pure logic): real ClientHellos from Node's TLS client, hand-built
// ones for the hostile shapes (hidden names, two names, split records), and random bytes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type AddressInfo } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import fc from 'fast-check';
import { helloRefusal, MAX_HELLO_BYTES, readClientHello, readServerHello, type HelloRead } from '../../src/sandbox/egress/client-hello.js';
import { TunnelGate } from '../../src/sandbox/egress/tunnel-gate.js';
import { ext, hello, record, RETRY_RANDOM, serverHello, sni, u16, vec2 } from './helpers-tls.js';

/** The first bytes Node's TLS client sends for `servername` (a real ClientHello, OpenSSL's). */
async function realHello(servername: string | undefined): Promise<Buffer> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  const got = new Promise<Buffer>((resolve) =>
    server.once('connection', (s) => {
      let b = Buffer.alloc(0);
      s.on('data', (d: Buffer) => {
        b = Buffer.concat([b, d]);
        if (readClientHello(b).kind !== 'more') {
          resolve(b);
          s.destroy();
        }
      });
    }),
  );
  const c = tlsConnect({ host: '127.0.0.1', port, servername: servername ?? '', rejectUnauthorized: false });
  c.on('error', () => undefined);
  try {
    return await got;
  } finally {
    c.destroy();
    server.close();
  }
}

const decided = (b: Buffer, afterRetry = false): Exclude<HelloRead, { kind: 'more' }> => {
  const r = readClientHello(b, afterRetry);
  assert.notEqual(r.kind, 'more', 'a whole ClientHello reads as more');
  return r as Exclude<HelloRead, { kind: 'more' }>;
};

test('a real ClientHello (Node\'s TLS client) is read: its server name, and every prefix of it asks for more', async () => {
  const b = await realHello('API.Example.org');
  assert.deepEqual(decided(b), { kind: 'hello', names: ['API.Example.org'], hidden: false, end: b.length });
  assert.equal(helloRefusal('api.example.org', decided(b)), null, 'the name matches case-insensitively');
  for (let n = 0; n < b.length; n++) assert.equal(readClientHello(b.subarray(0, n)).kind, 'more', `prefix of ${n} bytes`);
  // What follows the ClientHello (the client's next flight) does not change the reading.
  assert.deepEqual(decided(Buffer.concat([b, Buffer.from('trailing')])), decided(b));
});

test('a ClientHello for another name, for none, or not TLS at all is refused with its code', async () => {
  const other = decided(await realHello('evil.example.net'));
  assert.equal(helloRefusal('api.example.org', other)?.code, 'NET_SNI_MISMATCH');
  assert.match(helloRefusal('api.example.org', other)!.reason, /evil\.example\.net/);
  const none = decided(await realHello(undefined));
  assert.deepEqual({ ...none, end: 0 }, { kind: 'hello', names: [], hidden: false, end: 0 });
  assert.equal(helloRefusal('api.example.org', none)?.code, 'NET_SNI_MISMATCH');
  const plain = decided(Buffer.from('GET / HTTP/1.1\r\nHost: evil.example.net\r\n\r\n'));
  assert.equal(helloRefusal('api.example.org', plain)?.code, 'NET_TUNNEL_NOT_TLS');
  assert.equal(helloRefusal('api.example.org', decided(Buffer.from([0x80, 0x2e, 0x01])))?.code, 'NET_TUNNEL_NOT_TLS', 'an SSL 2 hello');
  assert.equal(helloRefusal('api.example.org', decided(hello([sni('api.example.org.')]))), null, 'a trailing dot');
  assert.equal(helloRefusal('api.example.org', decided(hello([sni('api.example.org\u0000.evil.net')])))?.code, 'NET_SNI_MISMATCH');
});

test('hostile shapes: a hidden name (ECH), two names, a name of another type, a duplicated extension, a ClientHello split over many records', () => {
  const ech = decided(hello([sni('api.example.org'), ext(0xfe0d, Buffer.alloc(40, 1))]));
  assert.equal(ech.kind === 'hello' && ech.hidden, true);
  assert.equal(helloRefusal('api.example.org', ech)?.code, 'NET_SNI_HIDDEN');
  assert.equal(helloRefusal('api.example.org', decided(hello([sni('api.example.org'), ext(0xffce, Buffer.alloc(8))])))?.code, 'NET_SNI_HIDDEN');
  const two = decided(hello([sni('api.example.org', 'evil.example.net')]));
  assert.equal(helloRefusal('api.example.org', two)?.code, 'NET_SNI_MISMATCH');
  const dup = decided(hello([sni('api.example.org'), sni('evil.example.net')]));
  assert.equal(dup.kind, 'bad');
  assert.equal(helloRefusal('api.example.org', dup)?.code, 'NET_TUNNEL_NOT_TLS');
  const split = hello([sni('api.example.org'), ext(21, Buffer.alloc(3000))], 60);
  assert.deepEqual(decided(split), { kind: 'hello', names: ['api.example.org'], hidden: false, end: split.length });
  for (const n of [5, 12, 400, split.length - 1]) {
    const r = readClientHello(split.subarray(0, n));
    assert.ok(r.kind === 'more' && r.need > n && r.need <= split.length, `prefix of ${n}: ${JSON.stringify(r)}`);
  }
  // Cut into more records than any real client uses: refused, so a drip of records costs the host little.
  assert.equal(decided(hello([sni('api.example.org'), ext(21, Buffer.alloc(3000))], 7)).kind, 'bad');
  // A server name of a type other than host_name (servers differ on what they make of it).
  const odd = ext(0, vec2(Buffer.concat([Buffer.from([1]), vec2(Buffer.from('evil.example.net')), Buffer.from([0]), vec2(Buffer.from('api.example.org'))])));
  assert.equal(decided(hello([odd])).kind, 'bad');
  // A record of another type inside the ClientHello, and a first message that is not a ClientHello.
  const cut = hello([sni('api.example.org')], 20);
  const wrongType = Buffer.from(cut);
  wrongType[25] = 0x17;
  assert.equal(decided(wrongType).kind, 'bad');
  const notHello = Buffer.from(cut);
  notHello[5] = 2;
  assert.equal(decided(notHello).kind, 'bad');
});

test('any bytes: the reader never throws, never reads a name past its end, and a longer prefix never undoes a decision', () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 600 }), fc.boolean(), (bytes, asRecord) => {
      const b = Buffer.from(bytes);
      const input = asRecord ? Buffer.concat([Buffer.from([0x16, 3, 1]), u16(b.length), b]) : b;
      const r = readClientHello(input);
      if (r.kind === 'more') return;
      assert.deepEqual(readClientHello(Buffer.concat([input, Buffer.from([1, 2, 3])])), r);
      if (r.kind === 'hello') for (const n of r.names) assert.ok(n.length <= input.length);
    }),
    { numRuns: 3000 },
  );
});

test('a ClientHello must end with its record; after a HelloRetryRequest one change_cipher_spec record may come first', () => {
  const one = hello([sni('api.example.org')]);
  // Another handshake message inside the ClientHello's last record: a server could read it as a second hello.
  const packed = Buffer.from(one);
  packed.writeUInt16BE(packed.readUInt16BE(3) + 4, 3);
  assert.equal(decided(Buffer.concat([packed, Buffer.from([1, 0, 0, 0])])).kind, 'bad');
  const ccs = record(0x14, Buffer.from([1]));
  assert.equal(decided(Buffer.concat([ccs, one])).kind, 'not-tls', 'a change_cipher_spec first is refused for a first ClientHello');
  const second = decided(Buffer.concat([ccs, one]), true);
  assert.deepEqual(second, { kind: 'hello', names: ['api.example.org'], hidden: false, end: ccs.length + one.length });
  assert.equal(decided(Buffer.concat([record(0x14, Buffer.from([2])), one]), true).kind, 'bad');
});

test('the server\'s first message: a ServerHello, a HelloRetryRequest (its fixed random), an alert, or not TLS', () => {
  assert.equal(readServerHello(serverHello(RETRY_RANDOM)).kind, 'retry');
  assert.equal(readServerHello(serverHello(Buffer.alloc(32, 9))).kind, 'server-hello');
  // TLS 1.2 sends its Certificate in the ServerHello's record.
  assert.equal(readServerHello(serverHello(Buffer.alloc(32, 9), Buffer.from([11, 0, 0, 0]))).kind, 'server-hello');
  assert.equal(readServerHello(record(0x15, Buffer.from([2, 40]))).kind, 'alert');
  assert.equal(readServerHello(Buffer.from('220 smtp.example ESMTP\r\n')).kind, 'not-tls');
  const whole = serverHello(RETRY_RANDOM);
  for (let n = 0; n < whole.length; n++) assert.equal(readServerHello(whole.subarray(0, n)).kind, 'more', `prefix of ${n}`);
});

test('the gate: bytes held each way until the ServerHello, then forwarded in order; one retry only; a bound on what is held', () => {
  const retryHello = () => serverHello(RETRY_RANDOM);
  const ch = hello([sni('api.example.org')]);
  const g = new TunnelGate('api.example.org');
  let o = g.fromClient(Buffer.concat([ch, Buffer.from('early')]));
  assert.deepEqual(o.toServer, [ch], 'the ClientHello alone goes on');
  assert.equal(g.phase, 'server-hello');
  o = g.fromClient(Buffer.from(' more'));
  assert.deepEqual([o.toServer, o.toClient], [[], []], 'later bytes are held');
  const plain = serverHello(Buffer.alloc(32, 9));
  o = g.fromServer(plain);
  assert.equal(o.opened, true);
  assert.deepEqual(o.toClient, [plain]);
  assert.deepEqual(Buffer.concat(o.toServer).toString(), 'early more');

  const twice = new TunnelGate('api.example.org');
  twice.fromClient(ch);
  assert.deepEqual(twice.fromServer(retryHello()).toClient.length, 1);
  assert.equal(twice.phase, 'client-hello');
  assert.deepEqual(twice.fromClient(ch).toServer, [ch]);
  assert.equal(twice.fromServer(retryHello()).refusal?.code, 'NET_TUNNEL_NOT_TLS', 'a second HelloRetryRequest');

  const flood = new TunnelGate('api.example.org');
  flood.fromClient(ch);
  assert.equal(flood.fromClient(Buffer.alloc(MAX_HELLO_BYTES)).refusal, null);
  assert.equal(flood.fromClient(Buffer.alloc(MAX_HELLO_BYTES + 1)).refusal?.code, 'NET_TUNNEL_NOT_TLS', 'more than the bound held while the server is silent');
});

test('after a retry: the server\'s change_cipher_spec in a read of its own, the client\'s early data, and warning alerts are passed over', () => {
  const ccs = record(0x14, Buffer.from([1]));
  const ch = hello([sni('api.example.org')]);
  const g = new TunnelGate('api.example.org');
  g.fromClient(ch);
  assert.equal(g.fromServer(serverHello(RETRY_RANDOM)).toClient.length, 1);
  assert.equal(g.fromServer(ccs).refusal, null, 'the server\'s change_cipher_spec, alone, while the second ClientHello is due');
  // The client's change_cipher_spec and early data (RFC 8446 D.4) come before its second ClientHello.
  const early = record(0x17, Buffer.alloc(40, 5));
  let o = g.fromClient(Buffer.concat([ccs, early, ch]));
  assert.equal(o.refusal, null);
  assert.equal(Buffer.concat(o.toServer).length, ccs.length + early.length + ch.length);
  o = g.fromServer(serverHello(Buffer.alloc(32, 3)));
  assert.equal(o.opened, true, JSON.stringify(o.refusal));
  assert.deepEqual(Buffer.concat(o.toClient), Buffer.concat([ccs, serverHello(Buffer.alloc(32, 3))]));

  const warning = record(0x15, Buffer.from([1, 0]));
  assert.equal(readServerHello(Buffer.concat([warning, serverHello(RETRY_RANDOM)])).kind, 'retry', 'a warning alert does not open the tunnel');
  assert.equal(readServerHello(record(0x15, Buffer.from([2, 40]))).kind, 'alert');
  assert.equal(readServerHello(Buffer.concat([ccs, serverHello(RETRY_RANDOM)])).kind, 'not-tls', 'no change_cipher_spec before the first ServerHello');
  assert.equal(readServerHello(Buffer.concat([record(0x15, Buffer.from([1])), serverHello(RETRY_RANDOM)])).kind, 'bad', 'a malformed alert');
  assert.equal(decided(Buffer.concat([early, ch]), true).kind, 'hello');
  assert.equal(decided(Buffer.concat([early, ch])).kind, 'not-tls', 'early data only after a retry');
});
