// The kernel's `favordynmods` for cgroup moves: what a sandbox's start waits for, and the host
// setting that removes the wait (`airlock setup --favor-cgroup-moves`).
//
// Every run's first process is moved into the run's cgroup (a write to cgroup.procs). That write
// takes the kernel's global threadgroup lock for writing, and without favordynmods the first such
// write after a quiet spell waits for an RCU grace period: on this project's 2-core VM 7.4-26.5 ms
// after 100 ms without a move, 0.2 ms right after another one (a cold /bin/true run is ~12 ms in all).
// prime.ts gives the wait a head start; it cannot remove it. With favordynmods on any cgroup mount
// (Linux 6.1+; one global lock) the move costs 0.3 ms whatever came before, and in exchange every
// fork and exit on the host takes the lock's slower, always-shared path (the kernel's documented
// trade-off: "at the cost of making hot path operations such as forks and exits more expensive").
// That is a host-wide choice, so Airlock never makes it on its own: doctor measures and reports,
// setup applies it when root asks.
//   v2: `mount -o remount,favordynmods <the cgroup2 mount>`;
//   v1: the option cannot be changed on a mounted hierarchy, so setup mounts a named hierarchy
//       with no controllers and the option, at FAVOR_MOUNT.
// It lasts until the next reboot, and recent kernels cannot turn it off before (6.18 here: removing
// the option logs "per threadgroup rwsem mechanism can't be disabled"), so setup offers no undo.
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdirSync } from 'node:fs';
import type { Problem } from '../../base/problem.js';
import { ownerTag } from '../../base/owner.js';
import { findSystemBinary } from '../doctor.js';
import { createRunCgroup, parseCgroupMounts } from './index.js';
import { favorsDynmods } from './prime.js';
import type { CgroupInfo, RunCgroup } from './types.js';
import { readOr } from './util.js';

/** Where `airlock setup --favor-cgroup-moves` mounts its named v1 hierarchy. */
const FAVOR_MOUNT = '/run/airlock/cgroup-favordynmods';
const FAVOR_NAME = 'airlock-favordynmods';

export interface CgroupMoves {
  /** favordynmods is on a cgroup mount now (the kernel may favor moves without it: see measuredMs). */
  favored: boolean;
  /** Where it is set (mount points), when favored. */
  where: string[];
  /** One move of a child into a group of its own after a PAUSE_MS wait, timed (null: could not be made). */
  measuredMs: number | null;
}

/** Long enough for the lock to be back in its quiet state on the hosts measured (60 ms was). */
export const PAUSE_MS = 150;

/** The cgroup mounts that have favordynmods, from mountinfo. */
function favoredMounts(mountinfo: string): string[] {
  return mountinfo.split('\n').filter((l) => favorsDynmods(l)).map((l) => l.split(' ')[4] ?? '?');
}

/**
 * Whether moves are favored here, and what one real move costs after a pause: a child (`sleep`)
 * moved into a group of its own, made for this and removed after (doctor). The mount option alone
 * does not tell: the kernel keeps favoring moves after the mount that asked for it is gone.
 */
export async function probeCgroupMoves(info: CgroupInfo): Promise<CgroupMoves> {
  const where = favoredMounts(readOr('/proc/self/mountinfo') ?? '');
  return { favored: where.length > 0, where, measuredMs: info.usable ? await timeMove(info) : null };
}

async function timeMove(info: CgroupInfo): Promise<number | null> {
  const sleeper = findSystemBinary('sleep');
  if (!sleeper) return null;
  let group: RunCgroup;
  try {
    group = createRunCgroup(info, `doctor-${ownerTag()}-${randomBytes(4).toString('hex')}`, { memoryBytes: 64 << 20, pids: 4 });
  } catch {
    return null;
  }
  const child = spawn(sleeper, ['10'], { stdio: 'ignore' });
  const exited = once(child, 'exit').catch(() => undefined);
  try {
    await once(child, 'spawn');
    await new Promise((r) => setTimeout(r, PAUSE_MS));
    const t0 = performance.now();
    group.addProcess(child.pid!);
    return performance.now() - t0;
  } catch {
    return null;
  } finally {
    child.kill('SIGKILL');
    await exited;
    await group.destroy();
  }
}

/** mount(8) from the system's own folders (never the caller's PATH). */
function mount(args: string[]): void {
  const path = findSystemBinary('mount');
  if (!path) throw new Error('mount is not installed');
  execFileSync(path, args, { stdio: ['ignore', 'ignore', 'pipe'], env: { PATH: '/usr/bin:/bin', LC_ALL: 'C' } });
}
const stderrOf = (e: unknown): string => ((e as { stderr?: Buffer }).stderr?.toString('utf8').trim() || (e as Error).message).slice(0, 300);

/** Turns favordynmods on (root). `already`: it was on before; `where`: the mount that carries it now. */
export function favorCgroupMoves(): { ok: true; already: boolean; where: string } | { ok: false; problem: Problem } {
  if (process.getuid?.() !== 0) return { ok: false, problem: { code: 'SETUP_FAVOR_NOT_ROOT', message: 'only root can change how the kernel locks cgroup moves: run `airlock setup --favor-cgroup-moves` as root' } };
  const info = readOr('/proc/self/mountinfo') ?? '';
  const on = favoredMounts(info);
  if (on.length > 0) return { ok: true, already: true, where: on[0]! };
  const { v1, v2 } = parseCgroupMounts(info);
  const hasV1 = Object.keys(v1).length > 0;
  if (!hasV1 && v2.length === 0) return { ok: false, problem: { code: 'SETUP_FAVOR_NO_CGROUP', message: 'no cgroup v1 or v2 mount on this host (/proc/self/mountinfo)' } };
  try {
    if (!hasV1) {
      mount(['-o', 'remount,favordynmods', v2[0]!]);
      return { ok: true, already: false, where: v2[0]! };
    }
    mkdirSync(FAVOR_MOUNT, { recursive: true, mode: 0o700 });
    mount(['-t', 'cgroup', '-o', `none,name=${FAVOR_NAME},favordynmods`, 'cgroup', FAVOR_MOUNT]);
    return { ok: true, already: false, where: FAVOR_MOUNT };
  } catch (e) {
    return { ok: false, problem: { code: 'SETUP_FAVOR_FAILED', message: `the kernel refused favordynmods (it needs Linux 6.1 or later): ${stderrOf(e)}` } };
  }
}
