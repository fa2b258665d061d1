// Which process owns a piece of host state (a staging base, a run's cgroup, a temp folder): its pid
// and its start time (field 22 of /proc/<pid>/stat, in clock ticks since boot). A sweep removes only
// what a dead owner left: a pid alone could have been reused by a live process since.
//
// The owner is part of the state's *name* (`ownerTag()`, e.g. `airlock-ns-1f2k.9zx1c-AbC123`,
// cgroup `airlock/ns-1f2k.9zx1c-0a1b2c3d`): a name is created in one atomic mkdir, so there is no
// moment at which a folder exists without saying whose it is, and no two processes can ever pick
// the same name (their tags differ). A sweeper needs nothing but the name to decide.
// Assumption: processes that share a TMPDIR and a cgroup tree share one pid namespace (one host or
// one container); across pid namespaces a pid names another process.
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

function startTime(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: count fields after the last ')'.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
}

let ownStamp: string | null = null;

/** This process's stamp: `<pid> <start time>` (the content of a legacy `owner.pid` file). */
export function ownerStamp(pid = process.pid): string {
  // Our own start time never changes: read once (every run stamps its folder with it).
  if (pid === process.pid) return (ownStamp ??= `${pid} ${startTime(pid) ?? '?'}`);
  return `${pid} ${startTime(pid) ?? '?'}`;
}

/** Is the process that wrote `stamp` still running? An unreadable stamp counts as alive (never swept). */
export function ownerAlive(stamp: string): boolean {
  const [pidText, start] = stamp.trim().split(' ');
  const pid = Number(pidText);
  if (!Number.isSafeInteger(pid) || pid <= 0) return true;
  const now = startTime(pid);
  if (now === null) return false;
  return start === undefined || start === '?' || start === now;
}

let ownTag: string | null = null;

/** A process (this one by default) as a name part: `<pid>.<start time>` in base 36 (`x` for an unreadable start time). */
export function ownerTag(pid = process.pid): string {
  if (pid === process.pid && ownTag) return ownTag;
  const start = startTime(pid);
  const tag = `${pid.toString(36)}.${start && /^\d+$/.test(start) ? Number(start).toString(36) : 'x'}`;
  if (pid === process.pid) ownTag = tag;
  return tag;
}

// `-<pid36>.<start36>-`: the only part of an owned name with a dot (kinds and random suffixes have none).
const TAG = /-([0-9a-z]+)\.([0-9a-z]+)-/;

/** The owner tag in `name` (`<pid36>.<start36>`), or null. */
export function tagOf(name: string): string | null {
  const m = TAG.exec(name);
  return m ? `${m[1]}.${m[2]}` : null;
}

/**
 * The owner named in `name` and whether it still runs: null when the name carries no owner tag (not
 * ours to judge). An unreadable start time (`x`) counts as alive while the pid exists.
 */
export function tagOwner(name: string): { pid: number; alive: boolean } | null {
  const m = TAG.exec(name);
  if (!m) return null;
  const pid = parseInt(m[1]!, 36);
  if (!Number.isSafeInteger(pid) || pid <= 0) return null;
  const now = startTime(pid);
  if (now === null) return { pid, alive: false };
  return { pid, alive: m[2] === 'x' || !/^\d+$/.test(now) || Number(now).toString(36) === m[2] };
}

/**
 * A fresh folder `TMPDIR/airlock-<kind>-<owner tag>-XXXXXX` owned by this process: removed by whoever
 * made it when done, and by any process's sweep (sandbox/ns/sweep.ts) once this process is gone.
 */
export function ownedTempDir(kind: string): string {
  return mkdtempSync(join(tmpdir(), `airlock-${kind}-${ownerTag()}-`));
}
