// File accesses the sandbox refuses by construction, seen by the syscall observer: writes outside the
// writable areas (the root is read-only) and reads of the host's secret places (absent from the
// sandbox's root). Nothing is gained by them; the attempt is what the host reports.
import { posix } from 'node:path';
import type { FileAccess } from './types.js';

/** Host-secret prefixes whose reads are reported (native/tracer.c `secret_path` has the same list). */
const SECRET_PREFIXES = ['/root', '/home', '/etc/shadow', '/etc/gshadow', '/etc/sudoers', '/etc/ssh', '/etc/ssl/private', '/run', '/var', '/boot', '/mnt', '/media', '/srv', '/opt'] as const;

export const isSecretPath = (p: string): boolean => SECRET_PREFIXES.some((s) => p === s || p.startsWith(`${s}/`) || p.startsWith(`${s}-`));

/** Path-changing calls and which arguments hold (dirfd, changed path); dirfd -1 is the cwd. */
export const PATH_WRITE_ARGS: Readonly<Record<string, readonly [number, number]>> = {
  mkdir: [-1, 0], rmdir: [-1, 0], unlink: [-1, 0], truncate: [-1, 0], chmod: [-1, 0], chown: [-1, 0], lchown: [-1, 0],
  link: [-1, 1], symlink: [-1, 1], rename: [-1, 1],
  mkdirat: [0, 1], unlinkat: [0, 1], fchmodat: [0, 1], fchownat: [0, 1],
  renameat: [2, 3], renameat2: [2, 3], linkat: [2, 3], symlinkat: [1, 2],
  // times and xattrs (a NULL path acts on the dirfd, a descriptor: nothing to judge)
  utime: [-1, 0], utimes: [-1, 0], futimesat: [0, 1], utimensat: [0, 1],
  setxattr: [-1, 0], lsetxattr: [-1, 0], removexattr: [-1, 0], lremovexattr: [-1, 0],
};

/**
 * Calls that change what their descriptor (argument 0) refers to, judged by that file's name. The
 * path calls do too with NULL (utimensat, futimesat) or "" and AT_EMPTY_PATH: `actsOnDirfd`.
 */
export const FD_WRITE_CALLS: readonly string[] = ['fchmod', 'fchown', 'fsetxattr', 'fremovexattr'];

/** Open flags that mean the call writes or creates. */
export const WRITE_FLAGS = /\bO_(?:WRONLY|RDWR|CREAT|TRUNC|APPEND)\b/;

/**
 * /proc/<pid>/fd/N and the like (/dev/stdout, /dev/fd/N lead there) name a descriptor the program
 * already holds (its stdout...), not a file: the tracer keeps such a path as written.
 */
const DESCRIPTOR_ALIAS = /^\/proc\/(?:self|thread-self|\d+)(?:\/task\/\d+)?\/fd\/\d+$|^\/dev\/(?:std(?:in|out|err)|fd\/\d+)$/;

const under = (p: string, area: string): boolean => area === '/' || p === area || p.startsWith(`${area}/`);

/** Calls that open or make a file: on a /dev path they are device access (deviceAccess), not writes. */
const OPENS: ReadonlySet<string> = new Set(['open', 'openat', 'openat2', 'creat', 'mknod', 'mknodat']);

/**
 * The attempts worth reporting from an observer's raw list: writes outside `writable` and secret-path
 * reads outside `exposed` (an interpreter's prefix, a scope). An open of a /dev path is device access,
 * reported there; any other change of one is a write: /dev/null and the other devices are the host's
 * own nodes, whose times (`touch /dev/null`) every sandbox shares. One entry per (access, path), the
 * first result kept; at most 1,000.
 */
export function refusedFileAccess(raw: readonly FileAccess[], view: { writable: readonly string[]; exposed: readonly string[] }): FileAccess[] {
  const seen = new Set<string>();
  const out: FileAccess[] = [];
  for (const a of raw) {
    const p = posix.normalize(a.path).replace(/(.)\/+$/, '$1');
    if (!p.startsWith('/') || DESCRIPTOR_ALIAS.test(p) || ((p === '/dev' || p.startsWith('/dev/')) && OPENS.has(a.syscall))) continue;
    // `mkdir -p` asks for every ancestor: an existing one changes nothing.
    if (a.result === 'EEXIST' && (a.syscall === 'mkdir' || a.syscall === 'mkdirat')) continue;
    // No such descriptor (fchmod(-100) is no call on the cwd): the kernel reached nothing.
    if (a.result === 'EBADF') continue;
    if (a.access === 'write' ? view.writable.some((w) => under(p, w)) : !isSecretPath(p) || view.exposed.some((e) => under(p, e))) continue;
    const k = `${a.access} ${p}`;
    if (seen.has(k)) continue;
    seen.add(k);
    out.push({ ...a, path: p });
    if (out.length >= 1000) break;
  }
  return out;
}
