// The host's mount table (/proc/self/mountinfo), read without touching the mounted file systems.
import { readFileSync } from 'node:fs';
import { walkPath } from './path-walk.js';

export interface MountEntry {
  majorMinor: string;
  mountPoint: string;
  fsType: string;
  source: string;
}

/** One mountinfo line (proc(5)): `id parent major:minor root mount-point options [optional...] - type source super-options`. */
export function parseMountinfoLine(line: string): MountEntry | null {
  const f = line.split(' ');
  const dash = f.indexOf('-', 6);
  if (f.length < 10 || dash < 0 || !/^\d+:\d+$/.test(f[2] ?? '')) return null;
  const unescape = (s: string): string => s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
  return { majorMinor: f[2]!, mountPoint: unescape(f[4]!), fsType: f[dash + 1] ?? 'unknown', source: unescape(f[dash + 2] ?? '') };
}

/** The FUSE mounts of a mount table (by default this process's): served by a process, often a user's. */
export function fuseMounts(mountinfo = readFileSync('/proc/self/mountinfo', 'utf8')): MountEntry[] {
  if (!mountinfo.includes(' - fuse')) return []; // the usual case: no line to parse
  return mountinfo
    .split('\n')
    .map(parseMountinfoLine)
    .filter((m): m is MountEntry => m !== null && /^fuse(\.|blk$|$)/.test(m.fsType));
}

/**
 * The FUSE mount that `path` (absolute, as written: no link resolved) is at or below, or null. A
 * FUSE file system is served by a process that may never answer: a stat there can wait forever.
 * Decided from the mount table alone, so asking never touches it.
 */
export function fuseMountOver(path: string, mounts = fuseMounts()): MountEntry | null {
  return mounts.find((m) => path === m.mountPoint || path.startsWith(m.mountPoint === '/' ? '/' : `${m.mountPoint}/`)) ?? null;
}

/**
 * Why reading `path` (absolute) could wait on a FUSE server, or null: the path, or a link's target on
 * the way to it, is at or below a FUSE mount. Each step is checked against the mount table before it
 * is touched.
 */
export function fuseOnTheWay(path: string, mounts = fuseMounts()): string | null {
  if (mounts.length === 0) return null;
  return walkPath(path, {
    before: (p) => {
      const on = fuseMountOver(p, mounts);
      return on ? `${p} is on a FUSE file system (${on.fsType} mounted at ${on.mountPoint}): a process answers for it and may never answer` : null;
    },
  });
}
