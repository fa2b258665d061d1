// Name resolution for the proxy, done on the host. Injectable: tests map their names to loopback
// servers; the default asks the host's resolver (getaddrinfo, so /etc/hosts and DNS).
import { lookup } from 'node:dns/promises';

/** Addresses of a host name (any order; the proxy checks each and uses the first allowed one). */
export type Resolver = (host: string) => Promise<string[]>;

export const systemResolver: Resolver = async (host) => (await lookup(host, { all: true, verbatim: true })).map((a) => a.address);

/** A fixed map (names lower-case); names not in it fail, unless `fallback` answers. For tests and benchmarks. */
export function mapResolver(map: Record<string, string[]>, fallback?: Resolver): Resolver {
  const m = new Map(Object.entries(map).map(([k, v]) => [k.toLowerCase(), v]));
  return async (host) => {
    const hit = m.get(host.toLowerCase());
    if (hit) return hit;
    if (fallback) return fallback(host);
    throw new Error('name not known to this resolver');
  };
}
