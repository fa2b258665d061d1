// Network allowlist rules: what an entry means and the intersection of a request's list with the
// policy's ceiling (the grammar; the proxy's decision for one destination is sandbox/egress/decide.ts).
//
// Entry grammar (policy.yaml `network.allowlist` and a TR's `network_allowlist`):
//   host[:port]          exact name (case-insensitive, trailing dot ignored)
//   *.host[:port]        any name strictly below host (a.host, a.b.host; not host itself)
//   1.2.3.4[:port]       an IPv4 address;   [2001:db8::1][:port]   an IPv6 address
//   10.0.0.0/8[:port]    an IPv4 range;     [fc00::/7][:port]      an IPv6 range (policy use)
//   http(s)://host[:port][/path]   host and port; the path is NOT enforced (CONNECT is opaque)
// Without a port an entry allows 80 and 443 only (a URL: its scheme's port).
import type { Problem } from './problem.js';
import { canonicalIp, inCidr, looksNumeric } from './address.js';

export type RuleHost =
  | { kind: 'name'; name: string }
  | { kind: 'wildcard'; suffix: string }
  | { kind: 'ip'; ip: string }
  | { kind: 'cidr'; net: string; prefix: number };

export interface AllowRule {
  /** The entry as written (request entry; for an intersection, `request ∩ policy`). */
  source: string;
  host: RuleHost;
  /** Allowed ports, sorted. */
  ports: number[];
}

/**
 * What one run may reach: `rules` is the request's list intersected with the policy's ceiling;
 * `addressRules` are the policy's own address rules (IPs and ranges): the only way a name may land
 * on a loopback, private, link-local or otherwise special address.
 */
export interface NetworkGrant {
  rules: AllowRule[];
  addressRules: AllowRule[];
}

export const DEFAULT_PORTS = [80, 443];
const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;

/** Normalizes a host name; null when it is not a syntactically valid name. */
export function normalizeName(host: string): string | null {
  const h = host.toLowerCase().replace(/\.$/, '');
  if (h.length === 0 || h.length > 253) return null;
  return h.split('.').every((l) => LABEL.test(l)) ? h : null;
}

function parsePort(p: string | undefined): number | null | undefined {
  if (p === undefined) return undefined;
  if (!/^\d{1,5}$/.test(p)) return null;
  const n = Number(p);
  return n >= 1 && n <= 65535 ? n : null;
}

const bad = (entry: string, why: string, path: string): { problem: Problem } => ({
  problem: { code: 'NET_ALLOW_ENTRY', message: `allowlist entry "${entry.slice(0, 120)}" ${why}`, path },
});

/** One allowlist entry as a rule (never throws). */
export function parseAllowEntry(entry: string, path = 'allowlist'): { rule: AllowRule } | { problem: Problem } {
  if (typeof entry !== 'string' || entry.length === 0 || entry.length > 300 || /\s/.test(entry)) return bad(String(entry), 'must be a non-empty host, IP, range or URL without spaces', path);
  let rest = entry;
  let defaultPorts = DEFAULT_PORTS;
  const url = /^(https?):\/\/([^/?#@]+)(?:[/?#].*)?$/i.exec(entry);
  if (url) {
    defaultPorts = url[1]!.toLowerCase() === 'https' ? [443] : [80];
    rest = url[2]!;
  } else if (/^[a-z][a-z0-9+.-]*:\/\//i.test(entry)) return bad(entry, 'uses a scheme other than http or https', path);
  let hostText: string;
  let portText: string | undefined;
  const v6 = /^\[([^\]]+)\](?::([^:]*))?$/.exec(rest);
  if (v6) {
    hostText = v6[1]!;
    portText = v6[2];
  } else {
    const parts = rest.split(':');
    if (parts.length > 2) return bad(entry, 'has more than one ":" (write IPv6 addresses in brackets)', path);
    hostText = parts[0]!;
    portText = parts[1];
  }
  const port = parsePort(portText);
  if (port === null) return bad(entry, 'has a port that is not 1-65535', path);
  const ports = port === undefined ? defaultPorts : [port];
  const cidr = /^(.+)\/(\d{1,3})$/.exec(hostText);
  if (cidr) {
    const net = canonicalIp(cidr[1]!);
    const prefix = Number(cidr[2]);
    if (!net || prefix > (net.includes(':') ? 128 : 32)) return bad(entry, 'is not a valid address range (e.g. 10.0.0.0/8, [fc00::/7])', path);
    return { rule: { source: entry, host: { kind: 'cidr', net, prefix }, ports } };
  }
  const ip = canonicalIp(hostText);
  if (ip) return { rule: { source: entry, host: { kind: 'ip', ip }, ports } };
  if (v6) return bad(entry, 'has brackets but no valid IPv6 address', path);
  if (looksNumeric(hostText)) return bad(entry, 'is a number-like name that resolvers read as an IP: write the address as a dotted quad', path);
  if (hostText === '*' || hostText.startsWith('*.')) {
    const suffix = normalizeName(hostText.slice(2));
    if (!suffix || !suffix.includes('.')) return bad(entry, 'is a wildcard that is too broad: write *.example.org (a bare * or *.tld is not an allowlist)', path);
    return { rule: { source: entry, host: { kind: 'wildcard', suffix }, ports } };
  }
  const name = normalizeName(hostText);
  if (!name) return bad(entry, 'is not a valid host name', path);
  return { rule: { source: entry, host: { kind: 'name', name }, ports } };
}

export function parseAllowlist(entries: readonly string[], path = 'allowlist'): { rules: AllowRule[]; problems: Problem[] } {
  const rules: AllowRule[] = [];
  const problems: Problem[] = [];
  entries.forEach((e, i) => {
    const r = parseAllowEntry(e, `${path}[${i}]`);
    if ('rule' in r) rules.push(r.rule);
    else problems.push(r.problem);
  });
  return { rules, problems };
}

const below = (name: string, suffix: string): boolean => name.endsWith(`.${suffix}`);

/** The hosts both rules allow, as one rule host, or null. */
function intersectHost(a: RuleHost, b: RuleHost): RuleHost | null {
  if (a.kind === 'name' && b.kind === 'name') return a.name === b.name ? a : null;
  if (a.kind === 'name' && b.kind === 'wildcard') return below(a.name, b.suffix) ? a : null;
  if (a.kind === 'wildcard' && b.kind === 'name') return below(b.name, a.suffix) ? b : null;
  if (a.kind === 'wildcard' && b.kind === 'wildcard') return a.suffix === b.suffix || below(a.suffix, b.suffix) ? a : below(b.suffix, a.suffix) ? b : null;
  if (a.kind === 'ip' && b.kind === 'ip') return a.ip === b.ip ? a : null;
  if (a.kind === 'ip' && b.kind === 'cidr') return inCidr(a.ip, b.net, b.prefix) ? a : null;
  if (a.kind === 'cidr' && b.kind === 'ip') return inCidr(b.ip, a.net, a.prefix) ? b : null;
  if (a.kind === 'cidr' && b.kind === 'cidr') {
    if (a.prefix >= b.prefix && inCidr(a.net, b.net, b.prefix)) return a;
    if (b.prefix >= a.prefix && inCidr(b.net, a.net, a.prefix)) return b;
  }
  return null;
}

/** Every destination allowed by both lists (a request can narrow the ceiling, never widen it). */
export function intersectAllowlists(request: AllowRule[], ceiling: AllowRule[]): AllowRule[] {
  const out: AllowRule[] = [];
  for (const r of request) {
    for (const c of ceiling) {
      const host = intersectHost(r.host, c.host);
      const ports = r.ports.filter((p) => c.ports.includes(p));
      if (host && ports.length > 0) out.push({ source: r.source === c.source ? r.source : `${r.source} (policy: ${c.source})`, host, ports });
    }
  }
  return out;
}

/** The grant of one run from the request's entries and the policy's ceiling (policy.network). */
export function networkGrant(request: readonly string[], ceiling: { allow: boolean; allowlist: readonly string[] }): { grant: NetworkGrant; problems: Problem[] } {
  const req = parseAllowlist(request, 'network_allowlist');
  const pol = parseAllowlist(ceiling.allowlist, 'network.allowlist');
  if (!ceiling.allow) return { grant: { rules: [], addressRules: [] }, problems: [...req.problems, ...pol.problems] };
  return {
    grant: { rules: intersectAllowlists(req.rules, pol.rules), addressRules: pol.rules.filter((r) => r.host.kind === 'ip' || r.host.kind === 'cidr') },
    problems: [...req.problems, ...pol.problems],
  };
}

/** Entries of the request the ceiling does not fully cover (nothing of them would be widened, but say so). */
export function uncoveredEntries(request: readonly string[], ceiling: readonly string[]): string[] {
  const pol = parseAllowlist(ceiling).rules;
  return request.filter((e) => {
    const r = parseAllowEntry(e);
    if (!('rule' in r)) return true;
    const rule = r.rule;
    return !rule.ports.every((p) => pol.some((c) => c.ports.includes(p) && sameOrWithin(rule.host, c.host)));
  });
}

function sameOrWithin(a: RuleHost, b: RuleHost): boolean {
  const i = intersectHost(a, b);
  return i !== null && JSON.stringify(i) === JSON.stringify(a);
}

export function hostMatches(h: RuleHost, target: { name?: string; ip?: string }): boolean {
  if (target.name !== undefined) return (h.kind === 'name' && h.name === target.name) || (h.kind === 'wildcard' && below(target.name, h.suffix));
  if (target.ip !== undefined) return (h.kind === 'ip' && h.ip === target.ip) || (h.kind === 'cidr' && inCidr(target.ip, h.net, h.prefix));
  return false;
}


/** One line per rule, for records and reports. */
export function describeGrant(grant: NetworkGrant): string[] {
  return [...grant.rules.map((r) => `${r.source} -> ports ${r.ports.join(',')}`), ...grant.addressRules.map((r) => `address ${r.source} -> ports ${r.ports.join(',')}`)];
}
