// IP literals: parsing, and the address ranges a name may not resolve to unless a policy rule names
// them (loopback, private, link-local and cloud metadata, unspecified, multicast, reserved...).
import { BlockList, isIP, isIPv4 } from 'node:net';

export type AddressClass = 'public' | 'loopback' | 'private' | 'link-local' | 'unspecified' | 'multicast' | 'reserved' | 'shared' | 'documentation';

const RANGES: [AddressClass, string, number, 'ipv4' | 'ipv6'][] = [
  ['unspecified', '0.0.0.0', 8, 'ipv4'],
  ['private', '10.0.0.0', 8, 'ipv4'],
  ['shared', '100.64.0.0', 10, 'ipv4'],
  ['loopback', '127.0.0.0', 8, 'ipv4'],
  ['link-local', '169.254.0.0', 16, 'ipv4'],
  ['private', '172.16.0.0', 12, 'ipv4'],
  ['reserved', '192.0.0.0', 24, 'ipv4'],
  ['documentation', '192.0.2.0', 24, 'ipv4'],
  ['private', '192.168.0.0', 16, 'ipv4'],
  ['reserved', '198.18.0.0', 15, 'ipv4'],
  ['documentation', '198.51.100.0', 24, 'ipv4'],
  ['documentation', '203.0.113.0', 24, 'ipv4'],
  ['multicast', '224.0.0.0', 4, 'ipv4'],
  ['reserved', '240.0.0.0', 4, 'ipv4'],
  ['unspecified', '::', 128, 'ipv6'],
  ['loopback', '::1', 128, 'ipv6'],
  // NAT64, 6to4, IPv4-compatible (::a.b.c.d, deprecated), IPv4-translated (::ffff:0:a.b.c.d) and
  // the deprecated site-local prefix embed or reach other ranges: never by default.
  ['reserved', '::', 96, 'ipv6'],
  ['reserved', '::ffff:0:0:0', 96, 'ipv6'],
  ['reserved', '64:ff9b::', 96, 'ipv6'],
  ['reserved', '64:ff9b:1::', 48, 'ipv6'],
  ['reserved', '100::', 64, 'ipv6'],
  ['documentation', '2001:db8::', 32, 'ipv6'],
  ['reserved', '2002::', 16, 'ipv6'],
  ['private', 'fc00::', 7, 'ipv6'],
  ['link-local', 'fe80::', 10, 'ipv6'],
  ['reserved', 'fec0::', 10, 'ipv6'],
  ['multicast', 'ff00::', 8, 'ipv6'],
];

const lists = new Map<AddressClass, BlockList>();
for (const [cls, net, prefix, type] of RANGES) {
  let l = lists.get(cls);
  if (!l) lists.set(cls, (l = new BlockList()));
  l.addSubnet(net, prefix, type);
}

/** The canonical form of an IP literal (IPv4-mapped IPv6 becomes IPv4; IPv6 lower-case, compressed), or null. */
export function canonicalIp(text: string): string | null {
  const t = text.startsWith('[') && text.endsWith(']') ? text.slice(1, -1) : text;
  const v = isIP(t);
  if (v === 4) return t.split('.').map((o) => String(Number(o))).join('.');
  if (v !== 6) return null;
  if (t.includes('%')) return null; // zone ids never name a remote host
  const hextets = expandV6(t);
  if (!hextets) return null;
  if (hextets.slice(0, 5).every((h) => h === 0) && hextets[5] === 0xffff) {
    return `${hextets[6]! >> 8}.${hextets[6]! & 255}.${hextets[7]! >> 8}.${hextets[7]! & 255}`;
  }
  return compressV6(hextets);
}

/** The eight 16-bit groups of a valid IPv6 literal. */
export function expandV6(t: string): number[] | null {
  let s = t.toLowerCase();
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(s);
  if (v4) {
    const o = v4[1]!.split('.').map(Number);
    s = s.slice(0, -v4[1]!.length) + `${((o[0]! << 8) | o[1]!).toString(16)}:${((o[2]! << 8) | o[3]!).toString(16)}`;
  }
  const [head, tail, more] = s.split('::');
  if (more !== undefined) return null;
  const h = head ? head.split(':') : [];
  const tl = tail !== undefined && tail !== '' ? tail.split(':') : [];
  const fill = tail === undefined ? 0 : 8 - h.length - tl.length;
  if (fill < 0 || (tail === undefined && h.length !== 8)) return null;
  const all = [...h, ...Array(fill).fill('0'), ...tl];
  if (all.length !== 8 || all.some((x) => !/^[0-9a-f]{1,4}$/.test(x))) return null;
  return all.map((x) => parseInt(x, 16));
}

function compressV6(h: number[]): string {
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (h[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && h[j] === 0) j++;
    if (j - i > bestLen) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = h.map((x) => x.toString(16));
  if (best < 0) return hex.join(':');
  return `${hex.slice(0, best).join(':')}::${hex.slice(best + bestLen).join(':')}`;
}

/** The range an address (canonical, from canonicalIp) falls in; 'public' when none. */
export function classifyAddress(ip: string): AddressClass {
  const type = isIPv4(ip) ? 'ipv4' : 'ipv6';
  if (ip === '255.255.255.255') return 'reserved';
  for (const [cls, l] of lists) if (l.check(ip, type)) return cls;
  return 'public';
}

/**
 * Host strings some resolvers read as IPv4 although they are not dotted quads (`2130706433`,
 * `0x7f.1`, `127.1`, `0177.0.0.1`): treated as IP literals, and refused unless canonical and listed.
 */
export function looksNumeric(host: string): boolean {
  const last = host.replace(/\.$/, '').split('.').pop() ?? '';
  return /^(?:0x[0-9a-f]*|[0-9]+)$/i.test(last);
}

/** Does `ip` fall in the CIDR `net/prefix` (both canonical, same family)? */
export function inCidr(ip: string, net: string, prefix: number): boolean {
  const b = new BlockList();
  const type = isIPv4(net) ? 'ipv4' : 'ipv6';
  if ((isIPv4(ip) ? 'ipv4' : 'ipv6') !== type) return false;
  b.addSubnet(net, prefix, type);
  return b.check(ip, type);
}
