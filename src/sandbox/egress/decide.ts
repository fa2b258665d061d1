// The egress proxy's decision for one destination: on the name asked for AND the address it resolves to.
import { canonicalIp, classifyAddress, looksNumeric, type AddressClass } from '../../base/address.js';
import { hostMatches, normalizeName, type NetworkGrant } from '../../base/allowlist.js';
import { networkInterfaces } from 'node:os';
import type { Resolver } from './resolver.js';

/** Stable codes of a refusal (each one line in docs/network.md). */
export type RefusalCode =
  | 'NET_BAD_REQUEST'
  | 'NET_NAME_NOT_ALLOWED'
  | 'NET_PORT_NOT_ALLOWED'
  | 'NET_IP_LITERAL'
  | 'NET_SPECIAL_ADDRESS'
  | 'NET_RESOLVE_FAILED'
  | 'NET_REDIRECT_OFF_LIST'
  | 'NET_CAP_CONNECTIONS'
  | 'NET_CAP_OPEN_CONNECTIONS'
  | 'NET_CAP_BYTES_OUT'
  | 'NET_CAP_BYTES_IN'
  | 'NET_UPSTREAM_FAILED'
  | 'NET_TUNNEL_NOT_TLS'
  | 'NET_SNI_MISMATCH'
  | 'NET_SNI_HIDDEN';

export type Decision =
  | { allowed: true; host: string; port: number; address: string; rule: string; addressRule?: string }
  | { allowed: false; host: string; port: number; address: string | null; code: RefusalCode; reason: string };

const RESOLVE_TIMEOUT_MS = 5000;

/** This host's own addresses (canonical), read when asked: an interface may come and go. */
export function hostAddresses(): Set<string> {
  const own = new Set<string>();
  for (const list of Object.values(networkInterfaces())) for (const i of list ?? []) own.add(canonicalIp(i.address) ?? i.address);
  return own;
}

/**
 * Decides one destination. The name must match a rule (with the port); it is then resolved here,
 * on the host, and the connection goes to the address checked (no second lookup: no rebinding
 * window). An address in a special range, or one of this host's own (a public address of the host
 * reaches its services listening on every address), needs a policy address rule that names it.
 */
export async function decide(grant: NetworkGrant, hostAsked: string, port: number, resolve: Resolver, own: () => Set<string> = hostAddresses): Promise<Decision> {
  const raw = hostAsked.startsWith('[') && hostAsked.endsWith(']') ? hostAsked.slice(1, -1) : hostAsked;
  const refuse = (code: RefusalCode, reason: string, address: string | null = null, host = raw.toLowerCase().slice(0, 253)): Decision => ({ allowed: false, host, port, address, code, reason });
  if (!Number.isInteger(port) || port < 1 || port > 65535) return refuse('NET_BAD_REQUEST', `port ${port} is not 1-65535`);
  const ip = canonicalIp(raw);
  if (ip) {
    const rule = grant.rules.find((r) => r.ports.includes(port) && hostMatches(r.host, { ip }));
    if (!rule) return refuse('NET_IP_LITERAL', `${ip}:${port} is an IP literal no allowlist entry names (list the address, with its port, in the request and the policy)`, ip, ip);
    return { allowed: true, host: ip, port, address: ip, rule: rule.source };
  }
  if (looksNumeric(raw)) return refuse('NET_IP_LITERAL', `"${raw.slice(0, 100)}" is a number-like host resolvers read as an IP address; it is never allowed`);
  const name = normalizeName(raw);
  if (!name) return refuse('NET_BAD_REQUEST', `"${raw.slice(0, 100)}" is not a valid host name`);
  const rule = grant.rules.find((r) => r.ports.includes(port) && hostMatches(r.host, { name }));
  if (!rule) {
    const other = grant.rules.filter((r) => hostMatches(r.host, { name })).flatMap((r) => r.ports);
    if (other.length > 0) return refuse('NET_PORT_NOT_ALLOWED', `${name} is allowlisted on port(s) ${[...new Set(other)].sort((a, b) => a - b).join(', ')} only, not ${port}`, null, name);
    return refuse('NET_NAME_NOT_ALLOWED', `${name}:${port} matches no allowlist entry`, null, name);
  }
  let addresses: string[];
  try {
    addresses = await withTimeout(resolve(name), RESOLVE_TIMEOUT_MS);
  } catch (e) {
    return refuse('NET_RESOLVE_FAILED', `${name} could not be resolved: ${(e as Error).message.slice(0, 200)}`, null, name);
  }
  const why: string[] = [];
  const mine = own();
  for (const a of addresses) {
    const addr = canonicalIp(a);
    if (!addr) continue;
    const cls: AddressClass | 'this host' = mine.has(addr) ? 'this host' : classifyAddress(addr);
    if (cls === 'public') return { allowed: true, host: name, port, address: addr, rule: rule.source };
    const named = grant.addressRules.find((r) => r.ports.includes(port) && hostMatches(r.host, { ip: addr }));
    if (named) return { allowed: true, host: name, port, address: addr, rule: rule.source, addressRule: named.source };
    why.push(`${addr} (${cls})`);
  }
  if (why.length === 0) return refuse('NET_RESOLVE_FAILED', `${name} resolved to no usable address`, null, name);
  return refuse('NET_SPECIAL_ADDRESS', `${name} resolves to ${why.join(', ')}, which no policy address rule names (rebinding to loopback, private, link-local or metadata addresses, or to this host's own, is refused)`, canonicalIp(addresses[0] ?? '') ?? null, name);
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(t);
        reject(e instanceof Error ? e : new Error(String(e)));
      },
    );
  });
}
