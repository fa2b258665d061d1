// A head start for moving the sandbox into its cgroup.
//
// Writing a pid to cgroup.procs write-locks the kernel's global threadgroup rwsem (cgroup v1, and v2
// without favordynmods), and the first write-lock after a quiet spell waits for an RCU grace period;
// writes soon after it are fast (measured on a 2-core VM: 7.5-13 ms, then ~0.1 ms; a move 60 ms
// after the previous one always waits). The runner makes that write while bwrap's init is blocked,
// ~6 ms after creating the group, so an isolated run's start waited for the grace period. A no-op
// move of our own process into the group it already is in takes the same lock: started on the
// thread pool when the group is created, its grace period runs during the sandbox's start-up, and
// the real move finds the lock (nearly) ready. Measured, runs 60-100 ms apart: the move 12 ms ->
// 2-5 ms, a full run 34.7 -> 24.4 ms (p50). Nothing moves; a failure only means no head start.
// Nothing is done when a cgroup mount has favordynmods (no such wait there).
// The write holds cgroup_mutex while it waits: it must start after the group's own mkdirs.
import { closeSync, openSync, write } from 'node:fs';
import { join } from 'node:path';
import type { CgroupInfo } from './types.js';
import { readOr } from './util.js';

/** True when a cgroup mount in `mountinfo` has favordynmods (the attach lock then has no grace-period wait). */
export function favorsDynmods(mountinfo: string): boolean {
  for (const line of mountinfo.split('\n')) {
    const sep = line.indexOf(' - ');
    if (sep < 0) continue;
    const right = line.slice(sep + 3).split(' ');
    if ((right[0] === 'cgroup' || right[0] === 'cgroup2') && `,${right[2] ?? ''},`.includes(',favordynmods,')) return true;
  }
  return false;
}

/**
 * The cgroup.procs file of the group this process is in (from `/proc/self/cgroup`) in a hierarchy
 * the runs use, or null. A root group is preferred: it cannot be removed under us.
 */
export function ownProcsFile(info: CgroupInfo, procSelfCgroup: string): string | null {
  const groups: { mount: string; path: string }[] = [];
  for (const line of procSelfCgroup.split('\n')) {
    const m = /^(\d+):([^:]*):(\/.*)$/.exec(line);
    if (!m) continue;
    const [, id, ctrls, path] = m as unknown as [string, string, string, string];
    // Outside our cgroup namespace, or removed: not a group we can name.
    if (path.split('/').includes('..') || path.endsWith(' (deleted)')) continue;
    if (info.version === 2 && id === '0' && ctrls === '' && info.mounts.unified) groups.push({ mount: info.mounts.unified, path });
    if (info.version === 1) {
      for (const c of ctrls.split(',')) {
        const mount = info.mounts[c];
        if (mount && info.controllers.includes(c as CgroupInfo['controllers'][number])) groups.push({ mount, path });
      }
    }
  }
  const g = groups.find((x) => x.path === '/') ?? groups[0];
  return g ? join(g.mount, g.path, 'cgroup.procs') : null;
}

let dynmods: boolean | null = null;

/** Starts the no-op move (see the top of this file) on the thread pool; returns at once. */
export function primeAttach(info: CgroupInfo): void {
  dynmods ??= favorsDynmods(readOr('/proc/self/mountinfo') ?? '');
  if (dynmods) return;
  const file = ownProcsFile(info, readOr('/proc/self/cgroup') ?? '');
  if (!file) return;
  let fd: number;
  try {
    fd = openSync(file, 'w');
  } catch {
    return;
  }
  // Opened here so that the write itself is queued now, not after a round trip through the main thread.
  write(fd, String(process.pid), () => {
    try {
      closeSync(fd);
    } catch {
      /* nothing to do: the fd is gone either way */
    }
  });
}
