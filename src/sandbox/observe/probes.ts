// Harmless probes that glibc and language runtimes make on their own, told apart from network use.
// Everyday programs (`id`, `ls -la`, `pip list`) make them without being asked: a report of each one
// would BLOCK every such program and teach people to ignore the report. Each rule below is narrow,
// and what it drops reached nothing outside the sandbox by construction.
import { lstatSync } from 'node:fs';
import { isIP } from 'node:net';
import { posix } from 'node:path';
import type { NetworkAttempt } from './types.js';

/** Calls that would carry data to a unix socket path. */
const OUTBOUND = new Set(['connect', 'sendto', 'sendmsg']);

/** Sockets glibc itself asks on every user, group or host lookup (nscd): its probe, not the program's
 *  intent, even on a host that runs nscd (the sandbox never holds the socket: ENOENT there). */
const LIBC_PROBE_SOCKETS = new Set(['/var/run/nscd/socket', '/run/nscd/socket']);

/** Does the host itself have anything at this path? (The sandbox's view is a subset of the host's.) */
export function hostHasPath(p: string): boolean {
  try {
    lstatSync(p);
    return true;
  } catch (e) {
    // Only "nothing there" counts as absent; any other answer (EACCES...) is taken as present.
    return (e as NodeJS.ErrnoException).code !== 'ENOENT' && (e as NodeJS.ErrnoException).code !== 'ENOTDIR';
  }
}

const loopback = (a: string): boolean => {
  if (isIP(a) === 4) return a.startsWith('127.');
  return a === '::1' || /^::ffff:127\./i.test(a);
};

/**
 * Why an attempt is a harmless probe, or null when it is an attempt to report:
 * - a unix-socket connect/send that failed with ENOENT (nothing at that path in the sandbox) to
 *   glibc's own nscd socket, which libc asks on every user lookup (`id`, `ls -la`), or to any other
 *   absolute path that the host lacks too: nothing was there to reach. Any other path that exists
 *   on the host (a real service's socket, hidden from the sandbox) stays an attempt, and so does
 *   every abstract or relative path and every connect that found something (ECONNREFUSED, ok).
 * - a bind to a loopback address with port 0 (an ephemeral port): a runtime asking whether IPv6 or
 *   loopback works (urllib3 at import, under `pip`). It only names the sandbox's own empty network
 *   namespace; nothing is connected or listened to. A connect, a send or a bind to a fixed port stays.
 */
export function probeReason(n: NetworkAttempt, exists: (p: string) => boolean = hostHasPath): string | null {
  if (n.family === 'unix' && OUTBOUND.has(n.syscall) && n.result === 'ENOENT' && n.path !== null && n.path.startsWith('/')) {
    const p = posix.normalize(n.path);
    if (LIBC_PROBE_SOCKETS.has(p)) return `glibc's nscd probe (${p}), absent from the sandbox`;
    return exists(p) ? null : `unix ${n.syscall} to ${p}, which exists nowhere`;
  }
  if (n.syscall === 'bind' && (n.family === 'inet' || n.family === 'inet6') && n.port === 0 && n.address !== null && loopback(n.address)) {
    return `bind to ${n.address}:0 in the sandbox's own network namespace`;
  }
  return null;
}

/** The attempts worth reporting: every one but the harmless probes (the host's view of a path is looked up once). */
export function withoutProbes(attempts: readonly NetworkAttempt[], exists: (p: string) => boolean = hostHasPath): NetworkAttempt[] {
  const known = new Map<string, boolean>();
  const cached = (p: string): boolean => {
    let v = known.get(p);
    if (v === undefined) known.set(p, (v = exists(p)));
    return v;
  };
  return attempts.filter((n) => probeReason(n, cached) === null);
}
