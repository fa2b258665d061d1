// A head start for moving the sandbox into its cgroup.
//
// Writing a pid to cgroup.procs write-locks the kernel's global threadgroup rwsem (cgroup v1, and v2
// without favordynmods), and the first write-lock after a quiet spell waits for an RCU grace period;
// writes soon after it are fast (measured on a 2-core VM: 7.5-13 ms, then ~0.1 ms; a move 60 ms
// after the previous one always waits). The sandbox's move (made by the tracer's child before it
// execs bwrap) comes a few ms after the group is created, so an isolated run's start waited for it. A no-op
// move of our own process into the group it already is in takes the same lock: started on the
// thread pool when the group is created, its grace period runs during the sandbox's start-up, and
// the real move finds the lock (nearly) ready. Measured, runs 60-100 ms apart: the move 12 ms ->
// 2-5 ms, a full run 34.7 -> 24.4 ms (p50). Nothing moves; a failure only means no head start.
// The lock stays warm for about one grace period after a move, so while runs keep coming the no-op
// move is repeated every few ms (at most one in flight) until a second after the last run started:
// runs back to back never find it cold. Measured with 300 /bin/true runs, alternating builds:
// 2 in parallel 118 -> 124-129 runs/s, one at a time 86-90 -> 94-99 runs/s. The price: while it is
// on, the host's forks take the lock's slower path, and each move holds cgroup_mutex for ~0.1 ms
// (a concurrent run's mkdir of its group may wait that long).
// Nothing is done when a cgroup mount has favordynmods (no such wait there).
// The first write holds cgroup_mutex while it waits: it starts after the group's own mkdirs.
// Our group is read again at each run: if someone moves this process meanwhile, the repeats of the
// window follow the old group (a move back) until the next run or the window's end.
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

/** Whether a cgroup mount has favordynmods (then there is nothing to do), read once. */
let dynmods: boolean | null = null;
/** The move is repeated this often while runs are coming, which keeps the kernel out of its slow path. */
export const WARM_EVERY_MS = 4;
/** ... until this long after the last run was primed. */
export const WARM_FOR_MS = 1000;
let warmUntil = 0;
let timer: NodeJS.Timeout | null = null;
/** The procs file of the group this process was in at the last run's start. */
let target: string | null = null;
/** At most one move at a time: a move that waits for a grace period holds a thread-pool thread. */
let moving = false;

/**
 * Starts the no-op move (see the top of this file) on the thread pool and returns at once; repeats
 * it every WARM_EVERY_MS until WARM_FOR_MS after the last call, so that back-to-back runs never
 * find the lock cold.
 */
export function primeAttach(info: CgroupInfo): void {
  dynmods ??= favorsDynmods(readOr('/proc/self/mountinfo') ?? '');
  if (dynmods) return;
  target = ownProcsFile(info, readOr('/proc/self/cgroup') ?? '');
  if (!target) return;
  warmUntil = performance.now() + WARM_FOR_MS;
  moveSelf();
  timer ??= setInterval(() => (performance.now() < warmUntil ? moveSelf() : stopWarm()), WARM_EVERY_MS).unref();
}

function stopWarm(): void {
  if (timer) clearInterval(timer);
  timer = null;
  closeTarget();
}

/** Moves made so far. */
let made = 0;

/** Whether the repeated move is on, and how many moves were made (for tests). */
export const primeState = (): { warm: boolean; moves: number } => ({ warm: timer !== null, moves: made });

/** The open procs file (kept for the warm window: one open, not 250 a second, on the main thread). */
let fd: number | null = null;
let fdPath: string | null = null;

function closeTarget(): void {
  if (fd === null || moving) return; // a write in flight closes it when it ends
  try {
    closeSync(fd);
  } catch {
    /* nothing to do: the fd is gone either way */
  }
  fd = null;
  fdPath = null;
}

function moveSelf(): void {
  if (moving || !target) return;
  if (fdPath !== target) {
    closeTarget();
    try {
      fd = openSync(target, 'w');
      fdPath = target;
    } catch {
      return stopWarm(); // not allowed here (a container): the next run tries again
    }
  }
  moving = true;
  // The write itself runs on the thread pool: it may wait for a grace period.
  write(fd!, String(process.pid), (err) => {
    moving = false;
    if (!err) made++;
    if (!timer) closeTarget();
  });
}
