// The tunnel's ClientHello reader (pure logic): real ClientHellos from Node's TLS client, hand-built
// ones for the hostile shapes (hidden names, two names, split records), and random bytes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type AddressInfo } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import fc from 'fast-check';
import { helloRefusal, readClientHello, type HelloRead } from '../../src/sandbox/egress/client-hello.js';

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

const u16 = (n: number) => Buffer.from([n >> 8, n & 255]);
const vec2 = (b: Buffer) => Buffer.concat([u16(b.length), b]);
const ext = (type: number, data: Buffer) => Buffer.concat([u16(type), vec2(data)]);
const sni = (...names: string[]) => ext(0, vec2(Buffer.concat(names.map((n) => Buffer.concat([Buffer.from([0]), vec2(Buffer.from(n, 'latin1'))])))));

/** A ClientHello with these extensions, cut into TLS records of at most `recordSize` bytes. */
function hello(exts: Buffer[], recordSize = 16_384): Buffer {
  const body = Buffer.concat([Buffer.from([3, 3]), Buffer.alloc(32, 7), Buffer.from([0]), vec2(Buffer.from([0x13, 0x01])), Buffer.from([1, 0]), vec2(Buffer.concat(exts))]);
  const msg = Buffer.concat([Buffer.from([1, body.length >> 16, (body.length >> 8) & 255, body.length & 255]), body]);
  const records: Buffer[] = [];
  for (let at = 0; at < msg.length; at += recordSize) {
    const frag = msg.subarray(at, at + recordSize);
    records.push(Buffer.from([0x16, 3, 1]), u16(frag.length), frag);
  }
  return Buffer.concat(records);
}

const decided = (b: Buffer): Exclude<HelloRead, { kind: 'more' }> => {
  const r = readClientHello(b);
  assert.notEqual(r.kind, 'more', 'a whole ClientHello reads as more');
  return r as Exclude<HelloRead, { kind: 'more' }>;
};

test('a real ClientHello (Node\'s TLS client) is read: its server name, and every prefix of it asks for more', async () => {
  const b = await realHello('API.Example.org');
  assert.deepEqual(decided(b), { kind: 'hello', names: ['API.Example.org'], hidden: false });
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
  assert.deepEqual(none, { kind: 'hello', names: [], hidden: false });
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
  assert.deepEqual(decided(split), { kind: 'hello', names: ['api.example.org'], hidden: false });
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
