// Host state of the ns lane outside any run's lifetime: each process's staging bases (TMPDIR/
// airlock-ns-*: run dirs, tmpfs and overlay mounts, FIFOs, proxy sockets) and its runs' cgroups.
// A process removes its own when it exits (cleanOnExit); after a crash (kill -9 mid-run) they stay,
// and sweepOrphans() removes those whose owner (pid and start time, owner.ts) is gone.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { detectCgroups } from '../cgroup/index.js';
import { ownerAlive } from './owner.js';

/** Mount points at or below `dir`, deepest first (from /proc/self/mountinfo). */
export function mountsBelow(dir: string): string[] {
  let info: string;
  try {
    info = readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return [];
  }
  return info
    .split('\n')
    .map((l) => l.split(' ')[4]?.replace(/\\040/g, ' ') ?? '')
    .filter((m) => m === dir || m.startsWith(`${dir}/`))
    .sort((a, b) => b.length - a.length);
}

/** SIGKILL what is left in a run's group and remove it, waiting up to ~1 s for the killed tasks to go (EBUSY until then). */
function killAndRemoveGroup(group: string): string | null {
  for (let i = 0; ; i++) {
    try {
      for (const pid of readFileSync(join(group, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)) process.kill(Number(pid), 'SIGKILL');
      rmdirSync(group);
      return null;
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return null;
      if (code !== 'EBUSY' && code !== 'ESRCH') return (e as Error).message;
      if (i >= 100) return `still busy after 1 s: ${(e as Error).message}`;
      Atomics.wait(PAUSE, 0, 0, 10); // a sync sweep (once per process): a short blocking pause is fine
    }
  }
}
const PAUSE = new Int32Array(new SharedArrayBuffer(4));

export interface SweepReport {
  /** Run ids whose leftovers were cleaned. */
  runs: string[];
  /** What could not be cleaned, with why (reported, never fatal). */
  errors: string[];
}

/**
 * Removes one staging base and everything of it: its runs' cgroups (their tasks killed), every mount
 * below it (lazily: a busy one is detached), then the folder. A group that cannot be removed keeps
 * the base, so that the next sweep tries again.
 */
export function cleanBase(base: string, report: SweepReport = { runs: [], errors: [] }): SweepReport {
  const cg = detectCgroups(process.getuid?.() === 0);
  let groupsLeft = false;
  // ns-*: a run's folder; monty-w-*: a Monty worker's marker (lanes/monty-sandbox.ts). Each names its cgroup.
  for (const run of existsSync(base) ? readdirSync(base).filter((n) => n.startsWith('ns-') || n.startsWith('monty-w-')) : []) {
    // Root's runs live under <mount>/airlock, a user's under their delegated subtree (cg.bases).
    for (const parent of new Set(Object.values(cg.bases))) {
      const group = join(parent, run);
      if (!existsSync(group)) continue;
      const err = killAndRemoveGroup(group);
      if (err) {
        report.errors.push(`cgroup ${group}: ${err}`);
        groupsLeft = true;
      }
    }
    report.runs.push(run);
  }
  for (const m of mountsBelow(base)) {
    try {
      execFileSync('umount', ['-l', m], { stdio: 'ignore', env: { PATH: '/usr/bin:/bin:/usr/sbin:/sbin' } });
    } catch (e) {
      report.errors.push(`umount ${m}: ${(e as Error).message}`);
    }
  }
  if (!groupsLeft && mountsBelow(base).length === 0) rmSync(base, { recursive: true, force: true });
  return report;
}

/** Cleans what processes that are gone left in the staging folder (TMPDIR): never a live process's. */
export function sweepOrphans(): SweepReport {
  const report: SweepReport = { runs: [], errors: [] };
  for (const name of readdirSync(tmpdir()).filter((n) => n.startsWith('airlock-ns-'))) {
    const base = join(tmpdir(), name);
    let stamp: string;
    try {
      stamp = readFileSync(join(base, 'owner.pid'), 'utf8');
    } catch {
      continue; // being created (the owner writes its stamp first thing), or not ours
    }
    if (!ownerAlive(stamp)) cleanBase(base, report);
  }
  return report;
}

const ownBases = new Set<string>();
let exitHook = false;

/**
 * This process removes its own staging bases (runs' cgroups, mounts, folders) when it exits, so a
 * normal end leaves nothing behind; a killed process's are swept by the next one.
 */
export function cleanOnExit(base: string): void {
  ownBases.add(base);
  if (exitHook) return;
  exitHook = true;
  process.once('exit', () => {
    for (const b of ownBases) cleanBase(b);
  });
}
