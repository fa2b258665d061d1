// The host proxy of one run: the only way out of the sandbox's network namespace. It speaks HTTP
// CONNECT (TLS for the name asked for, any TCP protocol to a listed IP; what follows the ClientHello
// stays opaque) and plain HTTP (absolute-URI requests), decides every
// request against the run's allowlist (allowlist.ts), connects to the address it checked itself,
// enforces the run's caps, and records every request, allowed or refused (records.ts).
// SOCKS is not spoken: a SOCKS client gets a refused connection (recorded as NET_BAD_REQUEST).
// What a run costs the host stays inside the run's caps: at most `openConnections` connections are
// open at once (node refuses the next one at accept, and the run is ended), and a connection that
// carries nothing for `idleMs` is closed: idle connections cannot pile up descriptors here.
import { chmodSync, chownSync, rmSync } from 'node:fs';
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect as netConnect, isIP, type Socket } from 'node:net';
import type { Duplex, Readable, Writable } from 'node:stream';
import { type NetworkGrant } from '../../base/allowlist.js';
import type { HelloRefusal } from './client-hello.js';
import { decide, type Decision, type RefusalCode } from './decide.js';
import { DEFAULT_IDLE_MS, DEFAULT_NETWORK_CAPS, DEFAULT_OPEN_CONNECTIONS, type ConnectionRecord, type NetworkCapName, type NetworkCaps, type NetworkObservation } from './records.js';
import { systemResolver, type Resolver } from './resolver.js';
import { TunnelGate, type GateOut } from './tunnel-gate.js';

type Allowed = Extract<Decision, { allowed: true }>;

export interface ProxyOptions {
  grant: NetworkGrant;
  caps?: NetworkCaps;
  resolve?: Resolver;
  /** Called once per cap when the run goes over it (the runner then ends the run). */
  onCap?: (cap: NetworkCapName, message: string) => void;
  connectTimeoutMs?: number;
  /** How long a tunnel to a name waits for each whole ClientHello (default 10 s). */
  helloTimeoutMs?: number;
}

/** Headers that describe one hop, never forwarded (RFC 9110 §7.6.1), plus the proxy's own. */
const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authorization', 'proxy-authenticate', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host']);
/** Records kept beyond the connection cap (then only counted). */
const EXTRA_RECORDS = 64;

function endToEndHeaders(raw: string[]): [string, string][] {
  const named = new Set<string>();
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === 'connection') for (const t of raw[i + 1]!.split(',')) named.add(t.trim().toLowerCase());
  const out: [string, string][] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const k = raw[i]!.toLowerCase();
    if (!HOP.has(k) && !named.has(k)) out.push([raw[i]!, raw[i + 1]!]);
  }
  return out;
}

const headerBytes = (raw: string[]): number => raw.reduce((n, s) => n + Buffer.byteLength(s) + 2, 0) + 64;

/** The host of a request target, for a record (the target as written when it is not a URL). */
function hostOf(target: string | undefined): string {
  try {
    return new URL(target ?? '').hostname;
  } catch {
    return String(target ?? '').slice(0, 100);
  }
}

/** `host:port` or `[v6]:port` of a CONNECT request line. */
export function parseAuthority(a: string): { host: string; port: number } | null {
  const m = /^(\[[0-9a-fA-F:.%]+\]|[^\s:[\]/@]+):(\d{1,5})$/.exec(a);
  if (!m) return null;
  const port = Number(m[2]);
  return port >= 1 && port <= 65535 ? { host: m[1]!, port } : null;
}

export class NetworkProxy {
  private readonly server: Server;
  private readonly caps: NetworkCaps;
  private readonly resolve: Resolver;
  private readonly records: ConnectionRecord[] = [];
  private readonly open = new Set<Duplex>();
  private readonly pending = new Set<ConnectionRecord>();
  private readonly hit = new Set<NetworkCapName>();
  private readonly inFlight = new WeakMap<Duplex, Promise<void>>();
  private requests = 0;
  private unrecorded = 0;
  private sentOut = 0;
  private receivedIn = 0;
  private closed = false;
  private socketPath: string | null = null;

  constructor(private readonly opts: ProxyOptions) {
    this.caps = opts.caps ?? DEFAULT_NETWORK_CAPS;
    this.resolve = opts.resolve ?? systemResolver;
    this.server = createServer({ maxHeaderSize: 16 * 1024, requestTimeout: 0, headersTimeout: 30_000, keepAliveTimeout: 5_000 });
    // Past the cap node closes each new connection as it accepts it (its descriptor with it): 'drop'.
    const maxOpen = this.caps.openConnections ?? DEFAULT_OPEN_CONNECTIONS;
    this.server.maxConnections = maxOpen;
    this.server.on('drop', () => this.overOpen(maxOpen));
    const idleMs = this.caps.idleMs ?? DEFAULT_IDLE_MS;
    this.server.on('connection', (s: Socket) => {
      this.track(s);
      // No byte either way for idleMs: closed (a tunnel's upstream goes with it).
      s.setTimeout(idleMs, () => s.destroy());
    });
    this.server.on('connect', (req: IncomingMessage, socket: Duplex, head: Buffer) => void this.onConnect(req, socket, head));
    // One upstream connection at a time per client connection (else pipelined requests on one
    // connection could hold any number of upstream connections, past openConnections). Each request
    // is decided and recorded at once; its upstream waits until the one before it has closed.
    this.server.on('request', (req: IncomingMessage, res: ServerResponse) => {
      let release!: () => void;
      const slot = new Promise<void>((resolve) => (release = resolve));
      const before = this.inFlight.get(req.socket) ?? Promise.resolve();
      this.inFlight.set(req.socket, slot);
      this.onRequest(req, res, before).then(release, release);
    });
    // An Expect header other than 100-continue: node would answer 417 itself, with no record.
    this.server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
      const rec = this.begin('http', hostOf(req.url), 0);
      if (rec) {
        rec.method = (req.method ?? '').slice(0, 16);
        this.refuse(rec, 'NET_BAD_REQUEST', `the Expect header "${String(req.headers.expect).slice(0, 60)}" is not met (only 100-continue is)`);
      }
      res.writeHead(417, { 'content-type': 'text/plain', connection: 'close' });
      res.end('airlock: only Expect: 100-continue is met\n');
    });
    this.server.on('upgrade', (req: IncomingMessage, socket: Duplex) => {
      const rec = this.begin('http', req.url ?? '', 0);
      if (rec) this.refuse(rec, 'NET_BAD_REQUEST', 'protocol upgrades over plain HTTP are not proxied: use CONNECT');
      socket.end('HTTP/1.1 501 Not Implemented\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
    });
    // Anything that is not HTTP (a SOCKS greeting, raw bytes) ends here.
    this.server.on('clientError', (_e: Error, socket: Duplex) => {
      const rec = this.begin('http', '(not an HTTP proxy request)', 0);
      if (rec) this.refuse(rec, 'NET_BAD_REQUEST', 'the bytes sent to the proxy are not an HTTP proxy request (HTTP CONNECT and plain HTTP are spoken; SOCKS is not)');
      if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      else socket.destroy();
    });
  }

  /** Listens on a unix socket owned by `owner` (mode 0600): the bridge connects as that uid. */
  async listen(path: string, owner?: { uid: number; gid: number }): Promise<void> {
    rmSync(path, { force: true });
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(path, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    this.socketPath = path;
    chmodSync(path, 0o600);
    if (owner) chownSync(path, owner.uid, owner.gid);
  }

  /** Listens on TCP (benchmarks and tests on the host); resolves the port. */
  async listenTcp(host = '127.0.0.1', port = 0): Promise<number> {
    await new Promise<void>((resolve) => this.server.listen(port, host, resolve));
    const a = this.server.address();
    return typeof a === 'object' && a ? a.port : 0;
  }

  /** Ends every connection (the run is over: its time limit applies to the network too). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const s of this.open) s.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    const now = new Date();
    for (const r of this.pending) this.finish(r, now, 'cut when the run ended');
    if (this.socketPath) rmSync(this.socketPath, { force: true });
  }

  observation(endpoint: NetworkObservation['endpoint'], grant: string[]): NetworkObservation {
    const connections = this.records.map((r) => ({ ...r }));
    return {
      endpoint,
      grant,
      caps: { ...this.caps },
      connections,
      unrecorded: this.unrecorded,
      bytesOut: connections.reduce((n, c) => n + c.bytesOut, 0),
      bytesIn: connections.reduce((n, c) => n + c.bytesIn, 0),
      capsHit: [...this.hit],
    };
  }

  // ---- bookkeeping ----

  private track(s: Duplex): void {
    this.open.add(s);
    s.on('close', () => this.open.delete(s));
    s.on('error', () => undefined);
    if (this.closed) s.destroy();
  }

  /** A connection past the open-connections cap: closed by node at accept; recorded once, the run ended. */
  private overOpen(maxOpen: number): void {
    if (this.hit.has('networkOpenConnections')) return;
    const now = new Date().toISOString();
    this.records.push({
      id: this.records.length + 1, via: 'connect', host: '(a connection past the cap)', port: 0, address: null, allowed: false, connected: false,
      code: 'NET_CAP_OPEN_CONNECTIONS', rule: null, reason: `the run's cap of ${maxOpen} open connections is reached: closed at once`, bytesOut: 0, bytesIn: 0, startedAt: now, endedAt: now, durationMs: 0,
    });
    this.capHit('networkOpenConnections', `open-connections cap ${maxOpen} reached: further connections are closed at once and the run is ended`);
  }

  /** A record for a new request, or null when the connection cap refuses it (then counted only). */
  private begin(via: ConnectionRecord['via'], host: string, port: number): ConnectionRecord | null {
    this.requests++;
    const rec: ConnectionRecord = {
      id: this.records.length + 1, via, host: host.slice(0, 253), port, address: null, allowed: false, connected: false,
      code: 'NET_BAD_REQUEST', rule: null, reason: '', bytesOut: 0, bytesIn: 0, startedAt: new Date().toISOString(), endedAt: null, durationMs: null,
    };
    if (via !== 'redirect' && this.requests > this.caps.connections) {
      this.capHit('networkConnections', `connection cap ${this.caps.connections} reached: further requests are refused and the run is ended`);
      if (this.records.length >= this.caps.connections + EXTRA_RECORDS) {
        this.unrecorded++;
        return null;
      }
      this.records.push(rec);
      this.refuse(rec, 'NET_CAP_CONNECTIONS', `the run's connection cap (${this.caps.connections}) is reached`);
      return null;
    }
    if (this.records.length >= this.caps.connections + EXTRA_RECORDS) {
      this.unrecorded++;
      return null;
    }
    this.records.push(rec);
    this.pending.add(rec);
    return rec;
  }

  private refuse(rec: ConnectionRecord, code: RefusalCode, reason: string): void {
    rec.allowed = false;
    rec.code = code;
    rec.reason = reason;
    this.finish(rec, new Date());
  }

  private allow(rec: ConnectionRecord, d: Allowed): void {
    rec.allowed = true;
    rec.code = 'NET_ALLOWED';
    rec.host = d.host;
    rec.address = d.address;
    rec.rule = d.addressRule ? `${d.rule}; address ${d.address} by policy rule ${d.addressRule}` : d.rule;
    rec.reason = `allowed by ${rec.rule}`;
  }

  private finish(rec: ConnectionRecord, at: Date, note?: string): void {
    if (rec.endedAt !== null) return;
    rec.endedAt = at.toISOString();
    rec.durationMs = at.getTime() - Date.parse(rec.startedAt);
    if (note) rec.reason = rec.reason ? `${rec.reason}; ${note}` : note;
    this.pending.delete(rec);
  }

  private capHit(cap: NetworkCapName, message: string): void {
    if (this.hit.has(cap)) return;
    this.hit.add(cap);
    this.opts.onCap?.(cap, message);
  }

  /** Counts bytes against the run's caps; false (and the cap reported) when they would go over. */
  private take(dir: 'out' | 'in', n: number): boolean {
    if (dir === 'out') {
      if (this.sentOut + n > this.caps.bytesOut) {
        this.capHit('networkBytesOut', `network bytes-out cap ${this.caps.bytesOut} reached: the connection was cut and the run ended`);
        return false;
      }
      this.sentOut += n;
    } else {
      if (this.receivedIn + n > this.caps.bytesIn) {
        this.capHit('networkBytesIn', `network bytes-in cap ${this.caps.bytesIn} reached: the connection was cut and the run ended`);
        return false;
      }
      this.receivedIn += n;
    }
    return true;
  }

  /** Copies src to dst with back-pressure, counting against the caps; cuts both on a cap. */
  private pump(src: Readable, dst: Writable, dir: 'out' | 'in', rec: ConnectionRecord): void {
    src.on('data', (chunk: Buffer) => {
      if (!this.take(dir, chunk.length)) {
        rec.code = dir === 'out' ? 'NET_CAP_BYTES_OUT' : 'NET_CAP_BYTES_IN';
        rec.reason = `${rec.reason}; cut: the run's bytes-${dir} cap (${dir === 'out' ? this.caps.bytesOut : this.caps.bytesIn}) was reached`;
        src.destroy();
        dst.destroy();
        return;
      }
      if (!dst.write(chunk)) src.pause();
    });
    dst.on('drain', () => src.resume());
    src.on('end', () => dst.end());
    src.on('close', () => {
      if (!dst.writableEnded) dst.destroy();
    });
  }

  // ---- CONNECT ----

  private async onConnect(req: IncomingMessage, client: Duplex, head: Buffer): Promise<void> {
    this.track(client);
    const target = parseAuthority(req.url ?? '');
    const rec = this.begin('connect', target?.host ?? String(req.url ?? '').slice(0, 100), target?.port ?? 0);
    const deny = (status: string, why: string): void => {
      if (client.writable) client.end(`HTTP/1.1 ${status}\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: ${Buffer.byteLength(why) + 1}\r\n\r\n${why}\n`);
    };
    if (!rec) return deny('403 Forbidden', 'airlock: the run\'s connection cap is reached');
    if (!target) {
      this.refuse(rec, 'NET_BAD_REQUEST', 'CONNECT needs host:port');
      return deny('400 Bad Request', 'airlock: CONNECT needs host:port');
    }
    const d = await decide(this.opts.grant, target.host, target.port, this.resolve);
    if (!d.allowed) {
      rec.host = d.host;
      rec.address = d.address;
      this.refuse(rec, d.code, d.reason);
      return deny('403 Forbidden', `airlock: ${d.code}: ${d.reason}`);
    }
    this.allow(rec, d);
    if (this.closed || client.destroyed) return this.finish(rec, new Date(), 'the client went away before the connection');
    // A tunnel to an IP literal goes where the policy's address rule says, whatever name TLS asks
    // for; a tunnel to a name carries TLS for that name only (tunnel-gate.ts).
    if (isIP(d.host) !== 0) this.openTunnel(client, head, rec, d, deny);
    else this.gatedTunnel(client, head, rec, d);
  }

  /** A connection to the checked address whose failure, close and byte counts go to the record. */
  private upstream(client: Duplex, rec: ConnectionRecord, d: Allowed, onFail: () => void): Socket {
    const up = netConnect({ host: d.address, port: d.port });
    this.track(up);
    const timer = setTimeout(() => up.destroy(new Error('connect timed out')), this.opts.connectTimeoutMs ?? 10_000);
    up.once('connect', () => {
      clearTimeout(timer);
      rec.connected = true;
    });
    up.on('error', (e) => {
      clearTimeout(timer);
      if (!rec.connected) {
        if (rec.code === 'NET_ALLOWED') rec.code = 'NET_UPSTREAM_FAILED';
        rec.reason = `${rec.reason}; connection to ${d.address}:${d.port} failed: ${e.message.slice(0, 200)}`;
        onFail();
      }
    });
    up.on('close', () => {
      clearTimeout(timer);
      rec.bytesOut = up.bytesWritten;
      rec.bytesIn = up.bytesRead;
      client.destroy();
      this.finish(rec, new Date());
    });
    client.on('close', () => up.destroy());
    return up;
  }

  /** Copies both ways from now on; `first` (the client's bytes so far) goes out first. */
  private relay(client: Duplex, up: Socket, first: Buffer, rec: ConnectionRecord): void {
    if (first.length > 0) {
      if (!this.take('out', first.length)) {
        rec.code = 'NET_CAP_BYTES_OUT';
        client.destroy();
        up.destroy();
        return;
      }
      up.write(first);
    }
    this.pump(client, up, 'out', rec);
    this.pump(up, client, 'in', rec);
    client.resume();
    up.resume();
  }

  /** An opaque tunnel: connected first (a failure is a 502), then relayed. */
  private openTunnel(client: Duplex, head: Buffer, rec: ConnectionRecord, d: Allowed, deny: (status: string, why: string) => void): void {
    const up = this.upstream(client, rec, d, () => deny('502 Bad Gateway', `airlock: cannot connect to ${d.host}:${d.port}`));
    up.once('connect', () => {
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      this.relay(client, up, head, rec);
    });
  }

  /**
   * A tunnel to a name: answered at once, connected only once the client's ClientHello has passed
   * (a refused tunnel never reaches the destination), relayed once the TLS start is through.
   */
  private gatedTunnel(client: Duplex, head: Buffer, rec: ConnectionRecord, d: Allowed): void {
    client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    const gate = new TunnelGate(d.host);
    const helloMs = this.opts.helloTimeoutMs ?? 10_000;
    let up: Socket | null = null;
    let deadline: NodeJS.Timeout | undefined;
    const noteNames = (): void => {
      if (gate.names.length > 0) rec.sni = [...new Set(gate.names)].join(', ').slice(0, 253);
    };
    const stop = (note: string, refusal?: HelloRefusal): void => {
      clearTimeout(deadline);
      noteNames();
      if (refusal) this.refuse(rec, refusal.code, `${refusal.reason}; ${note}`);
      else this.finish(rec, new Date(), note);
      client.destroy();
      up?.destroy();
    };
    const cut = (code: 'NET_CAP_BYTES_OUT' | 'NET_CAP_BYTES_IN'): void => {
      rec.code = code;
      stop(`cut: the run's ${code === 'NET_CAP_BYTES_OUT' ? 'bytes-out' : 'bytes-in'} cap was reached`);
    };
    const deliver = (o: GateOut): void => {
      if (o.refusal) {
        const note = o.refusal.from === 'server' ? 'the tunnel was closed: that answer did not reach the program' : up ? 'the tunnel was closed: nothing from the refused message on reached the destination' : 'the tunnel was closed before a byte reached the destination';
        return stop(note, o.refusal);
      }
      for (const b of o.toServer) {
        if (!this.take('out', b.length)) return cut('NET_CAP_BYTES_OUT');
        if (!up) {
          up = this.upstream(client, rec, d, () => client.destroy());
          up.on('data', onServer);
        }
        up.write(b);
      }
      for (const b of o.toClient) {
        if (!this.take('in', b.length)) return cut('NET_CAP_BYTES_IN');
        client.write(b);
      }
      // Each ClientHello has this long to arrive whole from when it is due (a drip of bytes would
      // otherwise hold the tunnel open): armed on entering that phase, not on each chunk.
      if (gate.phase !== 'client-hello') {
        clearTimeout(deadline);
        deadline = undefined;
      } else deadline ??= setTimeout(() => stop('the tunnel was closed', { code: 'NET_TUNNEL_NOT_TLS', reason: `no whole ClientHello within ${helloMs / 1000} s` }), helloMs);
      if (o.opened && up) {
        noteNames();
        client.pause();
        up.pause();
        client.off('data', onClient).off('end', onClientEnd);
        up.off('data', onServer);
        this.relay(client, up, Buffer.alloc(0), rec);
      }
    };
    const onServer = (chunk: Buffer): void => deliver(gate.fromServer(chunk));
    const onClient = (chunk: Buffer): void => deliver(gate.fromClient(chunk));
    const onClientEnd = (): void => stop('the client ended the tunnel before its TLS handshake had started; nothing more was forwarded');
    client.on('data', onClient).on('end', onClientEnd);
    client.on('close', () => {
      clearTimeout(deadline);
      if (!up) this.finish(rec, new Date());
    });
    deliver(gate.fromClient(head));
  }

  // ---- plain HTTP ----

  /** Resolves when no upstream connection of this request is left: at once when none was made, else at its close. */
  private async onRequest(req: IncomingMessage, res: ServerResponse, before: Promise<void>): Promise<void> {
    const deny = (status: number, why: string): void => {
      if (res.headersSent) return void res.destroy();
      res.writeHead(status, { 'content-type': 'text/plain', connection: 'close' });
      res.end(`airlock: ${why}\n`);
    };
    let url: URL | null = null;
    try {
      url = new URL(req.url ?? '');
    } catch {
      /* below */
    }
    const port = url ? Number(url.port || (url.protocol === 'https:' ? 443 : 80)) : 0;
    const rec = this.begin('http', url?.hostname ?? String(req.url ?? '').slice(0, 100), port);
    if (!rec) return deny(403, 'the run\'s connection cap is reached');
    rec.method = (req.method ?? '').slice(0, 16);
    if (!url || url.protocol !== 'http:') {
      this.refuse(rec, 'NET_BAD_REQUEST', url ? `plain-HTTP proxying takes http:// URLs only (${url.protocol} goes through CONNECT)` : 'the request line is not an absolute http:// URL (set the proxy variables, not a direct request)');
      return deny(400, rec.reason);
    }
    if (url.username || url.password) {
      this.refuse(rec, 'NET_BAD_REQUEST', 'URLs with credentials are not proxied');
      return deny(400, rec.reason);
    }
    const d = await decide(this.opts.grant, url.hostname, port, this.resolve);
    if (!d.allowed) {
      rec.host = d.host;
      rec.address = d.address;
      this.refuse(rec, d.code, d.reason);
      return deny(403, `${d.code}: ${d.reason}`);
    }
    this.allow(rec, d);
    // The request line is bytes out too (a URL can carry up to the header limit).
    const path = `${url.pathname}${url.search}`;
    if (!this.take('out', headerBytes(req.rawHeaders) + Buffer.byteLength(`${req.method ?? ''} ${path} HTTP/1.1`))) {
      rec.code = 'NET_CAP_BYTES_OUT';
      this.finish(rec, new Date(), 'refused: the bytes-out cap is reached');
      return deny(403, 'the run\'s bytes-out cap is reached');
    }
    await before;
    if (this.closed || res.destroyed || req.socket.destroyed) return this.finish(rec, new Date(), 'the client went away before the connection');
    // The Host header is the URL's authority: no virtual-host fronting behind an allowed name.
    const headers = [...endToEndHeaders(req.rawHeaders), ['Host', url.host], ['Connection', 'close']];
    // A chunked body is forwarded chunked: node's client would send a GET's (HEAD's, DELETE's...) body
    // with no framing at all, and the destination would read it as further requests (smuggling).
    if (req.headers['transfer-encoding'] !== undefined && req.headers['content-length'] === undefined) headers.push(['Transfer-Encoding', 'chunked']);
    const up = httpRequest({ host: d.address, port: d.port, method: req.method, path, headers: headers.flat(), agent: false, setHost: false, timeout: this.opts.connectTimeoutMs ?? 10_000 });
    const upClosed = new Promise<void>((resolve) => up.on('close', resolve));
    let upSocket: Socket | null = null;
    up.on('socket', (s: Socket) => {
      upSocket = s;
      this.track(s);
      s.on('connect', () => (rec.connected = true));
      s.on('close', () => {
        rec.bytesOut = s.bytesWritten;
        rec.bytesIn = s.bytesRead;
        this.finish(rec, new Date());
      });
    });
    up.on('timeout', () => up.destroy(new Error('timed out')));
    up.on('error', (e) => {
      if (!rec.connected && rec.code === 'NET_ALLOWED') rec.code = 'NET_UPSTREAM_FAILED';
      rec.reason = `${rec.reason}; ${e.message.slice(0, 200)}`;
      deny(502, `cannot reach ${d.host}:${d.port}`);
      if (!upSocket) this.finish(rec, new Date());
    });
    req.on('data', (c: Buffer) => {
      if (!this.take('out', c.length)) {
        rec.code = 'NET_CAP_BYTES_OUT';
        rec.reason = `${rec.reason}; cut: the run's bytes-out cap (${this.caps.bytesOut}) was reached`;
        up.destroy();
        req.destroy();
        return;
      }
      if (!up.write(c)) req.pause();
    });
    up.on('drain', () => req.resume());
    req.on('end', () => up.end());
    up.on('response', (ur: IncomingMessage) => void this.onResponse(rec, url, ur, res, up));
    await upClosed;
  }

  private async onResponse(rec: ConnectionRecord, url: URL, ur: IncomingMessage, res: ServerResponse, up: ReturnType<typeof httpRequest>): Promise<void> {
    const status = ur.statusCode ?? 502;
    rec.httpStatus = status;
    // Every Location (node keeps only the first in `headers`; all of them are forwarded).
    const locations: string[] = [];
    for (let i = 0; i < ur.rawHeaders.length; i += 2) if (ur.rawHeaders[i]!.toLowerCase() === 'location') locations.push(ur.rawHeaders[i + 1]!);
    if (status >= 300 && status < 400 && locations.length > 0) {
      // The client would follow it with a new request the proxy checks anyway; refusing here means
      // an off-list redirect never reaches the program at all, and is on the record.
      let refusal: string | null = null;
      for (const location of locations) {
        let target: URL | null = null;
        try {
          target = new URL(location, url);
        } catch {
          /* below */
        }
        const tport = target ? Number(target.port || (target.protocol === 'https:' ? 443 : 80)) : 0;
        const red = this.begin('redirect', target?.hostname ?? location.slice(0, 100), tport);
        let why: string | null = null;
        if (!target || (target.protocol !== 'http:' && target.protocol !== 'https:')) why = 'the redirect target is not an http(s) URL';
        else {
          const d = await decide(this.opts.grant, target.hostname, tport, this.resolve);
          if (!d.allowed) why = `redirect to ${d.host}:${tport} refused (${d.code}: ${d.reason})`;
          else if (red) {
            this.allow(red, d);
            this.finish(red, new Date(), 'redirect target checked; the client\'s next request is checked again');
          }
        }
        if (why) {
          if (red) {
            red.address = null;
            this.refuse(red, 'NET_REDIRECT_OFF_LIST', why);
          }
          refusal ??= `NET_REDIRECT_OFF_LIST: ${why}`;
        }
      }
      if (refusal) {
        rec.reason = `${rec.reason}; its ${status} redirect was withheld (off the allowlist)`;
        ur.destroy();
        up.destroy();
        if (!res.headersSent) {
          res.writeHead(403, { 'content-type': 'text/plain', connection: 'close' });
          res.end(`airlock: ${refusal}\n`);
        }
        return;
      }
    }
    if (!this.take('in', headerBytes(ur.rawHeaders) + Buffer.byteLength(ur.statusMessage ?? ''))) {
      rec.code = 'NET_CAP_BYTES_IN';
      ur.destroy();
      res.destroy();
      return;
    }
    const headers = endToEndHeaders(ur.rawHeaders).flat();
    res.writeHead(status, ur.statusMessage, headers);
    this.pump(ur, res, 'in', rec);
  }
}
