// A host uid and gid of its own for every sandbox a root Airlock starts (an ns run, a sandbox started
// ahead of need, a Monty worker), so that a program that escaped its namespaces is a user no other
// live run shares: it cannot enter another run's folders (each is root:<its gid> 0710), write its
// /out or scope overlays, read its inputs, or signal or ptrace its processes.
//
// A run that may write a declared scope keeps the sandbox user's uid, with a gid of its own: what the
// scope's owner gave that user (and the files earlier runs' promotions left there, owned by it) stays
// writable, as the README's ad-hoc runs promise. It cannot reach a run that has a uid of its own (nor
// that run it), but two such runs share the uid, and the uid that made a user namespace holds every capability
// in it: they can signal, read and enter each other. Giving them uids of their own needs the scope
// seen through an idmapped mount (the sandbox user's files as the run's): not built.
//
// The ids come from one fixed range (RUN_ID_RANGE), far above the ranges useradd gives users (1000–
// 60000) and subordinate ids (100000 up), in the span systemd leaves unassigned (0x70000000–
// 0x7FFDFFFF: above nspawn's container ranges, below its foreign range). The range is used only when
// no user, group, /etc/subuid or /etc/subgid entry of the host overlaps it: a subordinate range there
// would let its owner map our ids into a user namespace of its own (newuidmap).
//
// A claim is a symlink `<dir>/<uid>` whose target is the claiming process's owner tag (base/owner.ts):
// symlink(2) creates the name and says whose it is in one atomic step, and fails with EEXIST when
// another run, of any process, holds the uid. A claim is let go only when nothing of the run is left:
// every process dead and its folders removed. After a crash the orphan sweep (ns/sweep.ts) lets go of
// a dead owner's claims once no process runs as the uid and the owner left no staging behind.
// A claim let go does not put the id back in use: ids are handed out in order, each once per epoch
// of the ledger (run-id-ledger.ts), and a new epoch starts only after a rescan of the host.
import { linkSync, mkdirSync, lstatSync, readdirSync, readFileSync, readlinkSync, renameSync, symlinkSync, unlinkSync } from 'node:fs';
import { randomInt } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ownerTag, tagOwner } from '../base/owner.js';
import type { Problem } from '../base/problem.js';
import { nextRunId, openLedger, RUN_ID_LEDGER, type RunIdRange } from './run-id-ledger.js';

export type { RunIdRange } from './run-id-ledger.js';

/**
 * 0x70000000–0x77FFFFFF: 134,217,728 ids, each given to one sandbox until a rescan (run-id-ledger.ts):
 * a program that escaped its namespaces may leave a file or an IPC object of its id on the host, and
 * a later sandbox given that id would be reachable through it.
 */
export const RUN_ID_RANGE: RunIdRange = { first: 0x7000_0000, count: 0x0800_0000 };
export const RUN_ID_CLAIMS = '/run/airlock/sandbox-ids';

/** Where a host's ids come from: the range, the live claims (/run) and the ledger of ids given out (on disk). */
export interface RunIdPool {
  range: RunIdRange;
  dir: string;
  ledger: string;
}

/**
 * Whose host ids a sandbox has: `own` a uid and gid of its own; `own-gid` the sandbox user's uid and
 * a gid of its own (a run that may write a scope whose sandbox user's files could not be made its
 * own through an idmapped mount: `why` says why); `shared` the sandbox user's (no free range, or
 * strace, which names one user); `caller` the caller's (not root).
 */
export type HostIdsKind = 'own' | 'own-gid' | 'shared' | 'caller';

/** The ids one sandbox runs as, and how to give them back once nothing of it is left. */
export interface RunIds {
  uid: number;
  gid: number;
  kind: HostIdsKind;
  /**
   * With a gid of its own, the sandbox user's group as a supplementary group: what a scope's owner
   * lets that group read or write, the run still may. Null: none (its primary gid is that group).
   */
  group: number | null;
  /** Why an `own-gid` sandbox has the sandbox user's uid. */
  why?: string;
  release(): void;
}

const inRange = (n: number, r: RunIdRange): boolean => n >= r.first && n < r.first + r.count;
const overlaps = (a: number, len: number, r: RunIdRange): boolean => a < r.first + r.count && r.first < a + len;
const lines = (text: string): string[][] => text.split('\n').filter((l) => l.trim() && !l.startsWith('#')).map((l) => l.split(':'));

/**
 * Why the range cannot be the sandboxes' own, from the host's databases (passwd, group, subuid,
 * subgid texts), or null. Pure: the caller reads the files.
 */
export function rangeConflict(r: RunIdRange, db: { passwd: string; group: string; subuid: string; subgid: string }): string | null {
  for (const f of lines(db.passwd)) if (inRange(Number(f[2]), r)) return `user ${f[0]} has uid ${f[2]}, inside the range`;
  for (const f of lines(db.group)) if (inRange(Number(f[2]), r)) return `group ${f[0]} has gid ${f[2]}, inside the range`;
  for (const [file, text] of [['/etc/subuid', db.subuid], ['/etc/subgid', db.subgid]] as const) {
    for (const f of lines(text)) {
      const start = Number(f[1]);
      const len = Number(f[2]);
      if (Number.isFinite(start) && Number.isFinite(len) && overlaps(start, len, r)) return `${file} gives ${f[0]} ${start}-${start + len - 1}, which overlaps it (that user could map these ids)`;
    }
  }
  return null;
}

/** A file's text, or '' when it cannot be read. */
export const readOr = (p: string): string => {
  try {
    return readFileSync(p, 'utf8');
  } catch {
    return '';
  }
};

/**
 * This host's run ids: the range when it is free and its claims folder is root's alone, else why
 * not (the sandboxes then share the one sandbox user). Root only; makes the claims folder.
 */
export function hostRunIds(): RunIdPool | { off: string } {
  const r = RUN_ID_RANGE;
  const dir = RUN_ID_CLAIMS;
  const conflict = rangeConflict(r, { passwd: readOr('/etc/passwd'), group: readOr('/etc/group'), subuid: readOr('/etc/subuid'), subgid: readOr('/etc/subgid') });
  if (conflict) return { off: `ids ${r.first}-${r.first + r.count - 1} are not free on this host: ${conflict}` };
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const st = lstatSync(dir);
    if (!st.isDirectory() || st.uid !== 0 || (st.mode & 0o022) !== 0) return { off: `${dir} is not a folder only root can write (uid ${st.uid}, mode ${(st.mode & 0o7777).toString(8)})` };
  } catch (e) {
    return { off: `cannot make ${dir}: ${(e as Error).message}` };
  }
  const ledger = openLedger(RUN_ID_LEDGER);
  if (ledger) return { off: ledger.message };
  return { range: r, dir, ledger: RUN_ID_LEDGER };
}

/** Ids shared with other sandboxes or the caller (nothing to give back). */
const notOwn = (uid: number, gid: number, kind: 'shared' | 'caller'): RunIds => ({ uid, gid, kind, group: null, release: () => undefined });

/**
 * Claims the ledger's next id never given out: the sandbox's gid, and its uid unless `uid` (the
 * sandbox user's) is given. A problem when the range is used up (until a rescan) or a folder cannot
 * be written.
 */
export function claimRunIds(pool: RunIdPool, group: number | null = null, uid?: { uid: number; why: string }): RunIds | Problem {
  let path = '';
  const id = nextRunId(pool.range, pool.ledger, (candidate) => {
    path = join(pool.dir, String(candidate));
    try {
      symlinkSync(ownerTag(), path);
      return true;
    } catch (e) {
      // Held by a run that began before a rescan started this epoch: the next id.
      if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
      return { code: 'NS_RUN_IDS', message: `cannot claim a host uid for the sandbox in ${pool.dir}: ${(e as Error).message}; nothing ran` };
    }
  }, () => unlinkSync(path));
  if (typeof id !== 'number') return id;
  let held = true;
  return {
    uid: uid?.uid ?? id,
    gid: id,
    kind: uid === undefined ? 'own' : 'own-gid',
    ...(uid ? { why: uid.why } : {}),
    group,
    release() {
      if (!held) return;
      held = false;
      try {
        unlinkSync(path);
      } catch {
        /* swept already: only a dead owner's claims are, so not ours */
      }
    },
  };
}

/** Each live process of the host with its uids and gids (from /proc/<pid>/status); null when /proc cannot be listed. */
export function processIds(proc = '/proc'): { pid: string; ids: number[] }[] | null {
  let pids: string[];
  try {
    pids = readdirSync(proc).filter((n) => /^\d+$/.test(n));
  } catch {
    return null;
  }
  return pids.map((pid) => ({
    pid,
    ids: [...readOr(join(proc, pid, 'status')).matchAll(/^(?:Uid|Gid):\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)/gm)].flatMap((m) => m.slice(1).map(Number)),
  }));
}

/**
 * Lets go of the claims of dead owners: never while a process runs with the id (as its uid or gid),
 * nor while the owner's staging (TMPDIR/airlock-*-<owner>-*, or a mount named with its tag) still
 * exists (its files may be the id's). Returns the ids let go.
 */
export function sweepRunIdClaims(dir: string, errors: string[] = []): number[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  const stale = names.filter((n) => /^\d+$/.test(n)).flatMap((n) => {
    try {
      const tag = readlinkSync(join(dir, n));
      const owner = tagOwner(`-${tag}-`);
      return owner && !owner.alive ? [{ name: n, tag }] : [];
    } catch {
      return [];
    }
  });
  if (stale.length === 0) return [];
  const procs = processIds();
  const running = procs && new Set(procs.flatMap((p) => p.ids));
  if (!running) {
    errors.push('run ids: /proc cannot be listed, so no claim is let go (a process may still run as its uid)');
    return [];
  }
  let staging: string[];
  try {
    staging = readdirSync(tmpdir()).filter((n) => n.startsWith('airlock-'));
  } catch (e) {
    errors.push(`run ids: cannot read ${tmpdir()}: ${(e as Error).message}`);
    return [];
  }
  // The owner's staging may be under another TMPDIR than ours: as root each base is a tmpfs mount,
  // named with its owner's tag, and every mount of the host is in our mount table.
  const mounts = readOr('/proc/self/mountinfo');
  const freed: number[] = [];
  for (const { name, tag } of stale) {
    if (running.has(Number(name)) || staging.some((s) => s.includes(`-${tag}-`)) || mounts.includes(`-${tag}-`)) continue;
    // Another sweeper may have freed the id since it was read, and a live run claimed it anew: the
    // claim is taken aside in one step (rename) and removed only if it is still the dead owner's.
    const aside = join(dir, `.${name}.${ownerTag()}.${randomInt(1 << 30)}`);
    try {
      renameSync(join(dir, name), aside);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') errors.push(`run ids: ${join(dir, name)}: ${(e as Error).message}`);
      continue;
    }
    try {
      if (readlinkSync(aside) === tag) {
        unlinkSync(aside);
        freed.push(Number(name));
        continue;
      }
      // A live claim: back under its name (link fails rather than replace one made in between).
      linkSync(aside, join(dir, name));
      unlinkSync(aside);
    } catch (e) {
      errors.push(`run ids: a claim of ${name} taken aside as ${aside} could not be put back: ${(e as Error).message}`);
    }
  }
  return freed;
}

/**
 * The ids a new sandbox runs as (root with a free range: its own, or with `sandboxUid` its own gid
 * and the sandbox user's uid, for that reason), else the one sandbox user's (no range, or `shared`
 * asked: strace names its user), else the caller's (not root).
 */
export function sandboxIds(
  c: { isRoot: boolean; sandboxHostUser: { uid: number; gid: number } | null; runIds: ReturnType<typeof hostRunIds> },
  opts: { shared?: boolean; sandboxUid?: string; hasScope?: boolean } = {},
): RunIds | Problem {
  const user = c.isRoot ? c.sandboxHostUser : null;
  if (!user) return notOwn(process.getuid?.() ?? 0, process.getgid?.() ?? 0, 'caller');
  if (opts.shared || 'off' in c.runIds) return notOwn(user.uid, user.gid, 'shared');
  // The sandbox user's group only where a declared scope may need it: it is the primary group of the
  // sandboxes that share that user (the strace fallback), whose folders are root:<that group> 0710.
  return claimRunIds(c.runIds, opts.hasScope ? user.gid : null, opts.sandboxUid !== undefined ? { uid: user.uid, why: opts.sandboxUid } : undefined);
}
