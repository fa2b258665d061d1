// Hand-built TLS messages for the tunnel tests: the shapes a hostile client can send, which Node's
// own TLS client never would (another name after a HelloRetryRequest, a hidden name...).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const u16 = (n: number) => Buffer.from([n >> 8, n & 255]);
export const vec2 = (b: Buffer) => Buffer.concat([u16(b.length), b]);
export const ext = (type: number, data: Buffer) => Buffer.concat([u16(type), vec2(data)]);
/** A server_name extension naming each of `names` (host_name entries). */
export const sni = (...names: string[]) => ext(0, vec2(Buffer.concat(names.map((n) => Buffer.concat([Buffer.from([0]), vec2(Buffer.from(n, 'latin1'))])))));

/** A TLS record of `type` (0x16 handshake, 0x14 change_cipher_spec...). */
export const record = (type: number, fragment: Buffer) => Buffer.concat([Buffer.from([type, 3, 1]), u16(fragment.length), fragment]);

/** A ClientHello with these extensions, cut into TLS records of at most `recordSize` bytes. */
export function hello(exts: Buffer[], recordSize = 16_384): Buffer {
  const body = Buffer.concat([Buffer.from([3, 3]), Buffer.alloc(32, 7), Buffer.from([0]), vec2(Buffer.from([0x13, 0x01])), Buffer.from([1, 0]), vec2(Buffer.concat(exts))]);
  const msg = Buffer.concat([Buffer.from([1, body.length >> 16, (body.length >> 8) & 255, body.length & 255]), body]);
  const records: Buffer[] = [];
  for (let at = 0; at < msg.length; at += recordSize) records.push(record(0x16, msg.subarray(at, at + recordSize)));
  return Buffer.concat(records);
}

/** RFC 8446 §4.1.3: the random of a ServerHello that is a HelloRetryRequest. */
export const RETRY_RANDOM = Buffer.from('cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c', 'hex');

/** A ServerHello with `random` (RETRY_RANDOM: a HelloRetryRequest), and what shares its record. */
export function serverHello(random: Buffer, trailing = Buffer.alloc(0)): Buffer {
  const body = Buffer.concat([Buffer.from([3, 3]), random, Buffer.from([0]), u16(0x1301), Buffer.from([0]), vec2(Buffer.alloc(0))]);
  return record(0x16, Buffer.concat([Buffer.from([2, 0, 0, body.length]), body, trailing]));
}

/**
 * A TLS 1.3 ClientHello for `name` whose key_share is empty: a TLS 1.3 server must answer it with a
 * HelloRetryRequest (RFC 8446 §4.1.1), after which the client sends its second ClientHello.
 */
export const retryingHello = (name: string) =>
  hello([
    sni(name),
    ext(0x000a, vec2(u16(0x001d))), // supported_groups: x25519
    ext(0x000d, vec2(Buffer.from([0x04, 0x03, 0x08, 0x04, 0x04, 0x01]))), // signature_algorithms
    ext(0x002b, Buffer.from([2, 3, 4])), // supported_versions: TLS 1.3
    ext(0x0033, vec2(Buffer.alloc(0))), // key_share: none
  ]);

/** A throwaway self-signed certificate for `name` (openssl, from Debian's package). */
export function makeCert(name: string): { key: Buffer; cert: Buffer } {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-cert-'));
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', `/CN=${name}`, '-days', '2', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')], { stdio: 'ignore' });
  return { key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) };
}
