// What the host records about every connection the sandbox asked its proxy for, allowed or refused.
// The Sandbox Result's network figures and the Tool Result's network fields come from here.
import type { RefusalCode } from './decide.js';

export interface NetworkCaps {
  /** Bytes the run may send to its destinations, all connections together. */
  bytesOut: number;
  /** Bytes the run may receive from its destinations, all connections together. */
  bytesIn: number;
  /** Proxy requests (CONNECTs and plain HTTP requests, allowed or refused) per run. */
  connections: number;
  /** Connections to the proxy open at once (default DEFAULT_OPEN_CONNECTIONS): each holds host descriptors. */
  openConnections?: number;
  /** A connection with no byte either way for this long is closed (default DEFAULT_IDLE_MS). */
  idleMs?: number;
}

export type NetworkCapName = 'networkBytesOut' | 'networkBytesIn' | 'networkConnections' | 'networkOpenConnections';

/** Host defaults when neither the policy nor the caller gives a cap. */
export const DEFAULT_NETWORK_CAPS: NetworkCaps = { bytesOut: 16 * 1024 * 1024, bytesIn: 512 * 1024 * 1024, connections: 256 };
/** Open connections per run when the caps do not say: a program's connections cost the host descriptors. */
export const DEFAULT_OPEN_CONNECTIONS = 64;
/** How long a connection may carry nothing before the proxy closes it. */
export const DEFAULT_IDLE_MS = 30_000;

export interface ConnectionRecord {
  /** 1, 2, ... in the order the proxy received them. */
  id: number;
  /** How the program asked: a CONNECT tunnel, a plain-HTTP request, or a redirect the proxy checked. */
  via: 'connect' | 'http' | 'redirect';
  /** The name (or IP literal) the program asked for, normalized; for a redirect, its target. */
  host: string;
  port: number;
  /** The address the host resolved and connected to (null when refused before, or unresolved). */
  address: string | null;
  /** The allowlist decided yes. */
  allowed: boolean;
  /** A connection to the destination was established. */
  connected: boolean;
  /** NET_ALLOWED, or the refusal code. */
  code: 'NET_ALLOWED' | RefusalCode;
  /** The allowlist entry that allowed it (and the policy address rule, for a special address), or null. */
  rule: string | null;
  reason: string;
  /** Bytes sent to the destination (on the wire, from the host) and received from it. */
  bytesOut: number;
  bytesIn: number;
  startedAt: string;
  endedAt: string | null;
  durationMs: number | null;
  /** A tunnel to a name: the server name its TLS ClientHello asked for (checked against `host`). */
  sni?: string;
  /** Plain HTTP only: the method and the upstream's status. */
  method?: string;
  httpStatus?: number;
}

export interface NetworkObservation {
  /** How the sandbox reached the proxy. */
  endpoint: { address: string; port: number; bridge: string };
  /** The run's allowlist, one line per rule (request ∩ policy, then the policy's address rules). */
  grant: string[];
  caps: NetworkCaps;
  connections: ConnectionRecord[];
  /** Requests beyond the connection cap that were refused without a record of their own. */
  unrecorded: number;
  bytesOut: number;
  bytesIn: number;
  capsHit: NetworkCapName[];
}

/** host[:port] of every connection that was allowed and established, once each (Tool Result). */
export function contactedDestinations(n: NetworkObservation | undefined): string[] {
  if (!n) return [];
  const out: string[] = [];
  for (const c of n.connections) {
    if (!c.allowed || !c.connected) continue;
    const host = c.host.includes(':') ? `[${c.host}]` : c.host;
    const d = `${host}:${c.port}`;
    if (!out.includes(d)) out.push(d);
  }
  return out;
}

/** Refused requests, one line each, for reasons and safety notes. */
export function refusedLines(n: NetworkObservation | undefined): string[] {
  if (!n) return [];
  const lines = n.connections.filter((c) => !c.allowed).map((c) => `${c.via} ${c.host}:${c.port} refused (${c.code}): ${c.reason}`);
  if (n.unrecorded > 0) lines.push(`${n.unrecorded} further request(s) refused after the connection cap`);
  return [...new Set(lines)];
}
