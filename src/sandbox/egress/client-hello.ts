// The plain-text start of a TLS connection, as a tunnel to a name must begin: a ClientHello whose
// server name (SNI) is that name, the server's answer, and (after a HelloRetryRequest) the second
// ClientHello. Without this check an allowlisted name on a shared front end (a CDN) carries requests
// for any other name the front end serves ("domain fronting" by SNI). Only these messages are read:
// they are the ones that name the server in the clear; tunnel-gate.ts decides what to forward.
// RFC 8446 §4.1.2–4.1.4 (ClientHello, ServerHello, HelloRetryRequest), RFC 6066 §3 (server_name),
// draft-ietf-tls-esni (ECH).
import { normalizeName } from '../../base/allowlist.js';

/** Not enough bytes yet: it takes `need` bytes in all to say more. */
type More = { kind: 'more'; need: number };
type Bad = { kind: 'bad'; why: string };

/** What the client's bytes are so far. */
export type HelloRead = More | { kind: 'hello'; names: string[]; hidden: boolean; end: number } | { kind: 'not-tls' } | Bad;

/** The server's first message: a ServerHello, a HelloRetryRequest (a ServerHello with a fixed random), or an alert. */
export type ServerRead = More | { kind: 'server-hello' | 'retry' | 'alert' } | { kind: 'not-tls' } | Bad;

/** A ClientHello longer than this is refused (real ones are 0.2–2 KiB, some tens of KiB with tickets). */
export const MAX_HELLO_BYTES = 64 * 1024;
/** Nor one cut into more records than this (real ones come in one): each record is a re-read. */
const MAX_HELLO_RECORDS = 64;

const CHANGE_CIPHER_SPEC = 0x14;
const ALERT = 0x15;
const HANDSHAKE = 0x16;
const APPLICATION_DATA = 0x17;
const WARNING = 1;
const FATAL = 2;
const CLIENT_HELLO = 0x01;
const SERVER_HELLO = 0x02;
const EXT_SERVER_NAME = 0x0000;
/** encrypted_client_hello (RFC draft, deployed) and the older encrypted_server_name draft. */
const EXT_HIDDEN_NAME = new Set([0xfe0d, 0xffce]);
const HOST_NAME = 0x00;
/** RFC 8446 §4.1.3: a ServerHello with this random is a HelloRetryRequest. */
const RETRY_RANDOM = Buffer.from('cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c', 'hex');

/** A reader over one buffer that fails with a reason instead of reading past the end. */
class Cursor {
  constructor(
    private readonly b: Buffer,
    public at = 0,
  ) {}
  get left(): number {
    return this.b.length - this.at;
  }
  n(bytes: 1 | 2 | 3): number {
    if (this.left < bytes) throw new Malformed('the ClientHello ends inside a field');
    const v = this.b.readUIntBE(this.at, bytes);
    this.at += bytes;
    return v;
  }
  take(len: number): Buffer {
    if (this.left < len) throw new Malformed('a length in the ClientHello runs past its end');
    const s = this.b.subarray(this.at, this.at + len);
    this.at += len;
    return s;
  }
  /** A field with a 1- or 2-byte length prefix. */
  vec(lenBytes: 1 | 2): Buffer {
    return this.take(this.n(lenBytes));
  }
}

class Malformed extends Error {}

type Message = { kind: 'done'; body: Buffer; end: number } | More | Bad;

/**
 * The first handshake message from `start`, joined from the fragments of the records it spans, of
 * `type`; with `alone`, it must end with its last record (`end`: the offset after that record).
 */
function handshakeMessage(buf: Buffer, start: number, type: number, what: string, alone: boolean): Message {
  const fragments: Buffer[] = [];
  let have = 0;
  let need = -1; // the message's length with its 4-byte header, once known
  for (let at = start; ; ) {
    if (fragments.length === MAX_HELLO_RECORDS) return { kind: 'bad', why: `the ${what} is cut into more than ${MAX_HELLO_RECORDS} records` };
    if (buf.length - at < 5) return { kind: 'more', need: at + 5 };
    if (buf[at] !== HANDSHAKE) return { kind: 'bad', why: `a record of type ${buf[at]} came before the ${what} was complete` };
    if (buf[at + 1] !== 3) return { kind: 'bad', why: `the record's protocol version ${buf[at + 1]}.${buf[at + 2]} is not TLS` };
    const len = buf.readUInt16BE(at + 3);
    if (len === 0 || len > 16_384 + 2048) return { kind: 'bad', why: `a TLS record of ${len} bytes` };
    if (buf.length - at - 5 < len) return { kind: 'more', need: at + 5 + len };
    fragments.push(buf.subarray(at + 5, at + 5 + len));
    have += len;
    at += 5 + len;
    if (need < 0 && have >= 4) {
      const head = Buffer.concat(fragments).subarray(0, 4);
      if (head[0] !== type) return { kind: 'bad', why: `the first handshake message is of type ${head[0]}, not a ${what}` };
      need = 4 + head.readUIntBE(1, 3);
      if (need > MAX_HELLO_BYTES) return { kind: 'bad', why: `a ${what} of ${need} bytes (more than ${MAX_HELLO_BYTES})` };
    }
    if (need >= 0 && have >= need) {
      // Another message in the same record could be read by the server as a second hello.
      if (alone && have > need) return { kind: 'bad', why: `bytes follow the ${what} inside its last record` };
      return { kind: 'done', body: Buffer.concat(fragments).subarray(4, need), end: at };
    }
  }
}

/**
 * Skips the records a side may send before the message that matters: one change_cipher_spec
 * (after a HelloRetryRequest, RFC 8446 D.4), and the records of `alsoSkip` (the client's early data,
 * the server's warning alerts). `at`: the offset of the message; `more`/`bad` as for the message.
 */
function skipRecords(buf: Buffer, alsoSkip: (type: number, fragment: Buffer) => boolean, ccs: boolean): { at: number } | More | Bad {
  let at = 0;
  for (let n = 0; ; n++) {
    if (n === MAX_HELLO_RECORDS) return { kind: 'bad', why: `more than ${MAX_HELLO_RECORDS} records before the hello` };
    if (buf.length - at < 5) return buf.length > at && buf[at] === HANDSHAKE ? { at } : { kind: 'more', need: at + 5 };
    const type = buf[at]!;
    if (type !== CHANGE_CIPHER_SPEC && type !== ALERT && type !== APPLICATION_DATA) return { at };
    const len = buf.readUInt16BE(at + 3);
    if (buf.length - at - 5 < len) return { kind: 'more', need: at + 5 + len };
    const fragment = buf.subarray(at + 5, at + 5 + len);
    if (type === CHANGE_CIPHER_SPEC && ccs && len === 1 && fragment[0] === 1) ccs = false;
    else if (!alsoSkip(type, fragment)) return { at };
    at += 5 + len;
  }
}

/**
 * Reads the ClientHello at the start of `buf`, which may span several TLS records. After a
 * HelloRetryRequest (`afterRetry`) one change_cipher_spec record and the client's early data
 * (application_data records, RFC 8446 D.4) may come first. `end` is the offset after its last record.
 */
export function readClientHello(buf: Buffer, afterRetry = false): HelloRead {
  let at = 0;
  if (afterRetry) {
    const skipped = skipRecords(buf, (type) => type === APPLICATION_DATA, true);
    if (!('at' in skipped)) return skipped;
    at = skipped.at;
  }
  if (buf.length === at) return { kind: 'more', need: at + 1 };
  if (buf[at] !== HANDSHAKE) return afterRetry ? { kind: 'bad', why: `a record of type ${buf[at]} where the second ClientHello belongs` } : { kind: 'not-tls' };
  const message = handshakeMessage(buf, at, CLIENT_HELLO, 'ClientHello', true);
  if (message.kind !== 'done') return message;
  try {
    return { ...parseHello(message.body), end: message.end };
  } catch (e) {
    if (e instanceof Malformed) return { kind: 'bad', why: e.message };
    throw e;
  }
}

/**
 * Reads the server's first message: what decides whether the client's next bytes are a second
 * ClientHello. Warning alerts before it are passed over (a fatal one ends the connection: `alert`);
 * after a HelloRetryRequest, so is one change_cipher_spec record.
 */
export function readServerHello(buf: Buffer, afterRetry = false): ServerRead {
  if (buf.length === 0) return { kind: 'more', need: 1 };
  if (buf[0] !== HANDSHAKE && buf[0] !== ALERT && !(afterRetry && buf[0] === CHANGE_CIPHER_SPEC)) return { kind: 'not-tls' };
  const skipped = skipRecords(buf, (type, f) => type === ALERT && f.length === 2 && f[0] === WARNING, afterRetry);
  if (!('at' in skipped)) return skipped;
  const at = skipped.at;
  if (buf[at] === ALERT) return buf.length - at >= 7 && buf.readUInt16BE(at + 3) === 2 && buf[at + 5] === FATAL ? { kind: 'alert' } : { kind: 'bad', why: 'a malformed alert' };
  if (buf[at] !== HANDSHAKE) return { kind: 'bad', why: `a record of type ${buf[at]} before the ServerHello` };
  // A server's later messages may share the ServerHello's record (TLS 1.2's do).
  const message = handshakeMessage(buf, at, SERVER_HELLO, 'ServerHello', false);
  if (message.kind !== 'done') return message;
  if (message.body.length < 2 + 32) return { kind: 'bad', why: 'a ServerHello too short to hold its random' };
  return { kind: message.body.subarray(2, 34).equals(RETRY_RANDOM) ? 'retry' : 'server-hello' };
}

function parseHello(body: Buffer): { kind: 'hello'; names: string[]; hidden: boolean } {
  const c = new Cursor(body);
  c.take(2 + 32); // legacy_version, random
  c.vec(1); // legacy_session_id
  c.vec(2); // cipher_suites
  c.vec(1); // legacy_compression_methods
  const names: string[] = [];
  let hidden = false;
  if (c.left === 0) return { kind: 'hello', names, hidden }; // no extensions at all (SSL 3.0 style)
  const exts = new Cursor(c.vec(2));
  if (c.left !== 0) throw new Malformed('bytes follow the ClientHello\'s extensions');
  const seen = new Set<number>();
  while (exts.left > 0) {
    const type = exts.n(2);
    const data = exts.vec(2);
    if (seen.has(type)) throw new Malformed(`extension ${type} appears twice`);
    seen.add(type);
    if (EXT_HIDDEN_NAME.has(type)) hidden = true;
    if (type === EXT_SERVER_NAME) names.push(...serverNames(data));
  }
  return { kind: 'hello', names, hidden };
}

function serverNames(data: Buffer): string[] {
  const c = new Cursor(data);
  const list = new Cursor(c.vec(2));
  if (c.left !== 0) throw new Malformed('bytes follow the server_name list');
  const out: string[] = [];
  while (list.left > 0) {
    const type = list.n(1);
    const name = list.vec(2);
    // Only host_name is defined (RFC 6066); servers differ on other types, so none is let through.
    if (type !== HOST_NAME) throw new Malformed(`a server name of type ${type} (only host_name, 0, is defined)`);
    out.push(name.toString('latin1'));
  }
  return out;
}

export type HelloRefusal = { code: 'NET_TUNNEL_NOT_TLS' | 'NET_SNI_MISMATCH' | 'NET_SNI_HIDDEN'; reason: string };

/** Why a tunnel to `host` (a normalized name) may not carry this ClientHello, or null when it may. */
export function helloRefusal(host: string, read: Exclude<HelloRead, { kind: 'more' }>): HelloRefusal | null {
  if (read.kind === 'not-tls') return { code: 'NET_TUNNEL_NOT_TLS', reason: `a tunnel to the name ${host} carries TLS only (its first bytes are not a TLS ClientHello): plain HTTP goes through the proxy as http:// URLs, where the Host header is checked` };
  if (read.kind === 'bad') return { code: 'NET_TUNNEL_NOT_TLS', reason: `the tunnel's ClientHello cannot be read: ${read.why}` };
  if (read.hidden) return { code: 'NET_SNI_HIDDEN', reason: `the ClientHello hides the server name it asks for (encrypted ClientHello): the tunnel to ${host} must name it in the clear` };
  if (read.names.length !== 1) return { code: 'NET_SNI_MISMATCH', reason: read.names.length === 0 ? `the ClientHello names no server (no SNI): a tunnel to ${host} must name ${host}` : `the ClientHello names ${read.names.length} servers: a tunnel names exactly one` };
  const sni = read.names[0]!;
  if (normalizeName(sni) !== host) return { code: 'NET_SNI_MISMATCH', reason: `the ClientHello asks for ${JSON.stringify(sni.slice(0, 253))}, the tunnel was allowed for ${host}` };
  return null;
}
