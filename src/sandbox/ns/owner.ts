// Which process owns a piece of host state (a staging base, the sandbox /etc): its pid and its start
// time (field 22 of /proc/<pid>/stat, in clock ticks since boot). A sweep removes only what a dead
// owner left: a pid alone could have been reused by a live process since.
import { readFileSync } from 'node:fs';

function startTime(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: count fields after the last ')'.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
}

/** This process's stamp: `<pid> <start time>`. */
export function ownerStamp(pid = process.pid): string {
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
