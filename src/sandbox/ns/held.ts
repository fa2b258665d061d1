// Launchers held ahead of need for the next runs started on request (a service's; issue 20).
//
// Moving a process into a cgroup write-locks the kernel's threadgroup rwsem, and without
// favordynmods the first write after a pause waits for an RCU grace period: 5-25 ms of a run started
// on request, measured (docs/sandbox.md, "Limits"). A service keeps launchers forked by the tracer
// ahead of need (native/tracer.c, "held launchers"; two by default): each closed every fd but its own
// pipes, moved itself into a fresh run cgroup and waits. A run started on request takes one, writes
// its limits into that cgroup, and has the tracer start its bwrap from it, with no move left on its
// path; another is held at once, off the run's path. Runs from the sandbox pool (pool.ts) need none: theirs
// moved when they started. A launcher that ended while it waited (killed, or it could not join its
// cgroup) is dropped and the run forks its own; after MAX_FAILURES in a row none is held any more.
// One that ends after a run took it gives way to one the tracer forks into the same cgroup.
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { ownerTag } from '../../base/owner.js';
import { createRunCgroup, type CgroupInfo, type CgroupLimits, type RunCgroup } from '../cgroup/index.js';
import type { HeldLauncher, SyscallTracer } from '../observe/tracer.js';
import { killAndRemoveGroup } from './sweep.js';

/** The cgroup's limits while the launcher waits alone in it (a run's own replace them when it is taken). */
const WAITING_LIMITS: CgroupLimits = { memoryBytes: 64 << 20, pids: 1 };
const MAX_FAILURES = 3;

export interface TakenLauncher {
  /** The cgroup's name: the run's folder takes it too (cleanup at exit finds the group by its folder). */
  readonly name: string;
  readonly cg: RunCgroup;
  readonly launcher: HeldLauncher;
  readonly tracer: SyscallTracer;
}

/**
 * Ends a taken launcher whose run ended before its launch (an input or scope refused). Through the
 * tracer, by pid: it may still be joining its cgroup, where a kill of the group's tasks would miss
 * it. Resolves once it is gone; its cgroup is then the run's to remove.
 */
export function endUnused(h: TakenLauncher): Promise<void> {
  return h.tracer.cancelHeld(h.launcher);
}

let size = 0;
const waiting: TakenLauncher[] = [];
let failures = 0;
let exitHook = false;
/** What the last run started on request had: launchers are held after the first such run. */
let seen: { tracer: SyscallTracer; info: CgroupInfo } | null = null;

/**
 * Keep `n` launchers held for runs started on request (a service; 0: none). Lowering it drops the
 * surplus; resolves once those are gone and their cgroups removed (a service's close awaits it).
 */
export function keepLaunchersHeld(n: number): Promise<void> {
  size = Math.max(0, Math.floor(n));
  failures = 0;
  const surplus = waiting.splice(size);
  if (size > 0 && seen) fill(seen.tracer, seen.info);
  return Promise.all(surplus.map(drop)).then(() => undefined);
}

let served = 0;

/** How many launchers are held now, the cgroup of the next to be taken, and how many runs took one (tests, benches). */
export function launcherHeld(): { waiting: number; failures: number; cgroupDirs: string[]; served: number } {
  const live = waiting.filter((h) => !h.launcher.gone);
  return { waiting: live.length, failures, cgroupDirs: live[0]?.cg.dirs ?? [], served };
}

/**
 * A held launcher, its cgroup set to `limits`, for this run (null: none is held; the caller forks
 * its own and makes its own cgroup). The caller refills after its run (refillHeldLaunchers): a
 * refill makes a cgroup and asks the tracer for a launcher, ~0.6 ms of this thread that would
 * otherwise land in this run's staging. Only when none is left waiting does the refill start now.
 */
export function takeHeldLauncher(tracer: SyscallTracer, info: CgroupInfo, limits: CgroupLimits): TakenLauncher | null {
  if (size === 0 || !info.usable) return null;
  seen = { tracer, info };
  for (let h = waiting.shift(); h; h = waiting.shift()) {
    const why = h.launcher.gone ? `it ended while it waited: ${h.launcher.failure}` : setLimits(h, limits);
    if (why === null) {
      failures = 0;
      served++;
      if (waiting.length === 0) setImmediate(refillHeldLaunchers);
      return h;
    }
    failures++;
    void drop(h);
    process.emitWarning(`airlock: a launcher held ahead of need was not used (${h.name}): ${why}${failures >= MAX_FAILURES ? '; no launcher is held any more' : ''}`);
  }
  setImmediate(refillHeldLaunchers);
  return null;
}

/** Holds launchers again up to the number kept (after a run that took one, and its cleanup). */
export function refillHeldLaunchers(): void {
  if (size > 0 && seen) fill(seen.tracer, seen.info);
}

function setLimits(h: TakenLauncher, limits: CgroupLimits): string | null {
  try {
    h.cg.setLimits(limits);
    return null;
  } catch (e) {
    return `cannot set its cgroup's limits: ${(e as Error).message}`;
  }
}

function fill(tracer: SyscallTracer, info: CgroupInfo): void {
  while (waiting.length < size && failures < MAX_FAILURES) {
    const name = `ns-${ownerTag()}-${randomBytes(4).toString('hex')}`;
    let cg: RunCgroup;
    try {
      cg = createRunCgroup(info, name, WAITING_LIMITS, { prime: false }); // its move is off any request's path: nothing to prime
    } catch (e) {
      failures++;
      process.emitWarning(`airlock: cannot make a cgroup for a launcher held ahead of need: ${(e as Error).message}`);
      return;
    }
    waiting.push({ name, cg, launcher: tracer.hold(cg.dirs.map((d) => join(d, 'cgroup.procs'))), tracer });
  }
  if (!exitHook && waiting.length > 0) {
    exitHook = true;
    // Not yet any run's (waiting, or being dropped): no run folder names their groups, so the
    // staging's own cleanup would not find them.
    process.once('exit', () => {
      for (const h of [...waiting, ...dropping]) for (const d of h.cg.dirs) killAndRemoveGroup(d);
    });
  }
}

const dropping = new Set<TakenLauncher>();

function drop(h: TakenLauncher): Promise<void> {
  dropping.add(h);
  return endUnused(h)
    .then(() => h.cg.destroy())
    .then((errors) => {
      if (errors.length > 0) process.emitWarning(`airlock: cleanup of held launcher ${h.name} incomplete: ${errors.join('; ')}`);
    })
    .finally(() => dropping.delete(h));
}
