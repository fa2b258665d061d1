// What a tunnel to a name lets through while its TLS start is read (client-hello.ts). The client's
// ClientHello goes on once its server name is checked; the server's first message comes back; when
// that is a HelloRetryRequest, the client's next ClientHello is checked the same way (else any client
// could name another server in it at will). Once the server has answered with a ServerHello (or an
// alert), the tunnel is opaque. Bytes either side sends meanwhile are held, never dropped, up to a bound.
import { helloRefusal, MAX_HELLO_BYTES, readClientHello, readServerHello, type HelloRead, type HelloRefusal } from './client-hello.js';

export type GatePhase = 'client-hello' | 'server-hello' | 'open' | 'refused';

/** What to do after a step: bytes to forward each way, and whether the tunnel is now open or refused (and whose bytes were). */
export interface GateOut {
  toServer: Buffer[];
  toClient: Buffer[];
  opened: boolean;
  refusal: (HelloRefusal & { from: 'client' | 'server' }) | null;
}

/** Bytes a side may have held while the other side has not answered (a ClientHello and a few records). */
const MAX_HELD = 2 * MAX_HELLO_BYTES;

/** One direction's bytes not yet forwarded; joined and read again only once they can say more. */
class Held {
  private chunks: Buffer[] = [];
  length = 0;
  need = 1;
  push(b: Buffer): void {
    this.chunks.push(b);
    this.length += b.length;
  }
  /** What `reader` makes of all held bytes, or null while they cannot say more than last time. */
  read<R extends { kind: string }>(reader: (all: Buffer) => R): Exclude<R, { kind: 'more' }> | null {
    if (this.length < this.need) return null;
    const all = Buffer.concat(this.chunks);
    this.chunks = [all];
    const r = reader(all);
    if (r.kind !== 'more') return r as Exclude<R, { kind: 'more' }>;
    this.need = (r as unknown as { need: number }).need;
    return null;
  }
  /** Takes the first `n` held bytes (all of them by default). */
  take(n = this.length): Buffer {
    const all = Buffer.concat(this.chunks);
    this.chunks = n < all.length ? [all.subarray(n)] : [];
    this.length = all.length - n;
    this.need = 1;
    return all.subarray(0, n);
  }
}

export class TunnelGate {
  private readonly client = new Held();
  private readonly server = new Held();
  private retried = false;
  phase: GatePhase = 'client-hello';
  /** The server names the ClientHellos asked for, in order (for the record). */
  readonly names: string[] = [];

  /** `host`: the normalized name the tunnel was allowed for. */
  constructor(private readonly host: string) {}

  fromClient(chunk: Buffer): GateOut {
    this.client.push(chunk);
    return this.step();
  }

  fromServer(chunk: Buffer): GateOut {
    this.server.push(chunk);
    return this.step();
  }

  private step(): GateOut {
    const out: GateOut = { toServer: [], toClient: [], opened: false, refusal: null };
    const refuse = (refusal: HelloRefusal, from: 'client' | 'server'): GateOut => {
      this.phase = 'refused';
      return { ...out, refusal: { ...refusal, from } };
    };
    for (;;) {
      if (this.phase === 'client-hello') {
        const read = this.client.read((b) => readClientHello(b, this.retried));
        if (!read) break;
        if (read.kind === 'hello') this.names.push(...read.names);
        const refusal = helloRefusal(this.host, read);
        if (refusal) return refuse(this.retried ? { ...refusal, reason: `after a HelloRetryRequest, ${refusal.reason}` } : refusal, 'client');
        out.toServer.push(this.client.take((read as Extract<HelloRead, { kind: 'hello' }>).end)); // helloRefusal refuses all else
        this.phase = 'server-hello';
      } else if (this.phase === 'server-hello') {
        const read = this.server.read((b) => readServerHello(b, this.retried));
        if (!read) break;
        if (read.kind === 'not-tls' || read.kind === 'bad') return refuse({ code: 'NET_TUNNEL_NOT_TLS', reason: read.kind === 'bad' ? `the destination's answer to the ClientHello cannot be read: ${read.why}` : 'the destination did not answer the ClientHello with TLS' }, 'server');
        if (read.kind === 'retry' && this.retried) return refuse({ code: 'NET_TUNNEL_NOT_TLS', reason: 'the destination sent a second HelloRetryRequest (TLS allows one)' }, 'server');
        out.toClient.push(this.server.take());
        if (read.kind === 'retry') {
          this.retried = true;
          this.phase = 'client-hello';
          continue;
        }
        // A ServerHello, or an alert that ends the connection: nothing after it names a server in the clear.
        if (this.client.length > 0) out.toServer.push(this.client.take());
        this.phase = 'open';
        return { ...out, opened: true };
      } else break;
    }
    if (this.client.length > MAX_HELD) return refuse({ code: 'NET_TUNNEL_NOT_TLS', reason: `the client sent more than ${MAX_HELD} bytes before the TLS handshake's start was complete` }, 'client');
    if (this.server.length > MAX_HELD) return refuse({ code: 'NET_TUNNEL_NOT_TLS', reason: `the destination sent more than ${MAX_HELD} bytes before its ServerHello was complete` }, 'server');
    return out;
  }
}
