// Host state outside any run's lifetime: each process's staging bases (TMPDIR/airlock-ns-<owner>-*:
// run dirs, tmpfs and overlay mounts, FIFOs, proxy sockets), its other temp folders (TMPDIR/
// airlock-<kind>-<owner>-*) and its runs' cgroups (airlock/ns-<owner>-*, airlock/monty-w-<owner>-*).
// A process removes its own when it exits (cleanOnExit); after a crash (kill -9 mid-run) they stay,
// and sweepOrphans() removes those whose owner (pid and start time, base/owner.ts) is gone: the
// owner is in every name, so a live process's state is never taken, whatever it is doing.
// Several processes may sweep at once (every process sweeps at its start): each step is idempotent
// (a folder, mount or group another sweeper removed first is simply done), and a sweep never throws.
// TMPDIR is shared with every local user, who can make a folder of any name there: the sweep touches
// only folders this user made (owned by it, a real folder, writable by no one else), kills only the
// groups of the dead owner whose folder it is, and removes with GNU rm, which never follows a link,
// even one swapped in while it works (Node's rmSync removes by path and would follow it).
import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, readdirSync, readFileSync, rmdirSync, type Stats } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { detectCgroups } from '../cgroup/index.js';
import { ownerAlive, tagOf, tagOwner } from '../../base/owner.js';
import { RUN_ID_CLAIMS, sweepRunIdClaims } from '../run-ids.js';

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
export function killAndRemoveGroup(group: string): string | null {
  for (let i = 0; ; i++) {
    try {
      for (const pid of readFileSync(join(group, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)) process.kill(Number(pid), 'SIGKILL');
      rmdirSync(group);
      return null;
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return null; // gone (another sweeper, or the owner's own cleanup)
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
  let names: string[] = [];
  try {
    names = readdirSync(base);
  } catch {
    /* gone already (another sweeper), or not a folder */
  }
  // ns-*: a run's folder; monty-w-*: a Monty worker's marker (lanes/monty-sandbox.ts). Each names its
  // cgroup, whose name carries its owner: only the base's own owner's groups are this base's to kill
  // (a base from before owner tags: only a dead owner's).
  const own = tagOf(basename(base));
  const runs = names.filter((n) => (n.startsWith('ns-') || n.startsWith('monty-w-')) && (own ? tagOf(n) === own : tagOwner(n)?.alive === false));
  for (const run of runs) {
    for (const parent of groupParents(cg)) {
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
      if (mountsBelow(m).includes(m)) report.errors.push(`umount ${m}: ${(e as Error).message}`); // else: another sweeper unmounted it
    }
  }
  if (!groupsLeft && mountsBelow(base).length === 0) {
    const err = removeTree(base);
    if (err) report.errors.push(`remove ${base}: ${err}`);
  }
  return report;
}

/**
 * `rm -rf --one-file-system`: GNU rm walks by descriptor and never follows a link, not even a folder
 * swapped for one while it works; it stays on the base's file system (a mount left below is not
 * entered). Two sweepers removing one tree both succeed (-f).
 */
function removeTree(dir: string): string | null {
  try {
    execFileSync('rm', ['-rf', '--one-file-system', '--', dir], { stdio: ['ignore', 'ignore', 'pipe'], env: { PATH: '/usr/bin:/bin' } });
    return null;
  } catch (e) {
    return String((e as { stderr?: Buffer }).stderr ?? (e as Error).message).trim().slice(0, 500);
  }
}

/**
 * Why a base (its lstat) is not a folder this user made, or null: a real folder (not a link), owned by this
 * user, writable by no one else. Airlock makes its bases so (0711 or 0700); another user's folder
 * under an Airlock name is left alone.
 */
function notOurs(st: Stats): string | null {
  if (!st.isDirectory()) return 'not a folder';
  const uid = process.getuid?.() ?? st.uid;
  if (st.uid !== uid) return `owned by uid ${st.uid}, not ${uid}`;
  if ((st.mode & 0o022) !== 0) return `writable by others (mode ${(st.mode & 0o7777).toString(8)})`;
  return null;
}

/**
 * Where run cgroups may be: this user's bases (root: <mount>/airlock; a user: the delegated subtree)
 * and, for root, <mount>/airlock of every mounted hierarchy (a run made with other controllers).
 */
function groupParents(cg: ReturnType<typeof detectCgroups>): Set<string> {
  const parents = new Set(Object.values(cg.bases));
  if (process.getuid?.() === 0) for (const m of Object.values(cg.mounts)) parents.add(join(m, 'airlock'));
  return parents;
}

/** Kills and removes the run cgroups (<base>/<kind>-<owner>-*: root's <mount>/airlock, a user's delegated subtree) whose owner is gone. */
function sweepGroups(report: SweepReport): void {
  const cg = detectCgroups(process.getuid?.() === 0);
  for (const parent of groupParents(cg)) {
    let names: string[];
    try {
      names = readdirSync(parent, { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => d.name);
    } catch {
      continue;
    }
    for (const name of names) {
      const owner = tagOwner(name);
      if (!owner || owner.alive) continue;
      const err = killAndRemoveGroup(join(parent, name));
      if (err) report.errors.push(`cgroup ${join(parent, name)}: ${err}`);
      else if (!report.runs.includes(name)) report.runs.push(name);
    }
  }
}

/**
 * Cleans what processes that are gone left: their folders in the staging folder (TMPDIR) with every
 * mount below them, and their runs' cgroups. Never a live process's; never throws (what it could
 * not clean is in `errors`, and the next sweep tries again).
 */
export function sweepOrphans(): SweepReport {
  const report: SweepReport = { runs: [], errors: [] };
  let names: string[] = [];
  try {
    names = readdirSync(tmpdir()).filter((n) => n.startsWith('airlock-'));
  } catch (e) {
    report.errors.push(`read ${tmpdir()}: ${(e as Error).message}`);
  }
  for (const name of names) {
    const base = join(tmpdir(), name);
    try {
      const owner = tagOwner(name);
      if (owner?.alive) continue;
      // A base from before owner tags: its owner is in its owner.pid file.
      if (!owner && !name.startsWith('airlock-ns-')) continue;
      const st = lstatSync(base, { throwIfNoEntry: false });
      if (!st) continue; // removed by another sweeper meanwhile
      const foreign = notOurs(st);
      if (foreign) {
        report.errors.push(`${base}: left alone, not a folder this user made (${foreign})`);
        continue;
      }
      if (owner) {
        cleanBase(base, report);
        continue;
      }
      let stamp: string;
      try {
        stamp = readFileSync(join(base, 'owner.pid'), 'utf8');
      } catch {
        continue; // being created (the owner writes its stamp first thing), or not ours
      }
      if (!ownerAlive(stamp)) cleanBase(base, report);
    } catch (e) {
      report.errors.push(`${base}: ${(e as Error).message}`);
    }
  }
  try {
    sweepGroups(report);
  } catch (e) {
    report.errors.push(`cgroups: ${(e as Error).message}`);
  }
  // Last: a dead owner's uids go back once its groups (every process) and its staging are gone.
  if (process.getuid?.() === 0) sweepRunIdClaims(RUN_ID_CLAIMS, report.errors);
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
