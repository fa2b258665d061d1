// Each traced process's working directory, as the strace fallback follows it. strace names a dirfd
// (`AT_FDCWD</etc>`), but not the cwd a call without one starts from (`chmod("group")`, `open("x")`
// on x86_64), nor `AT_FDCWD` for a program it may not look into (a non-dumpable one, for an ordinary
// user's strace). So the parser follows chdir and fchdir: a process starts with its parent's
// (shared with CLONE_FS, as threads do; else a copy), the program's first process with the run's
// `--chdir`. null is unknown (a chdir strace could not read, an fchdir it could not name, a process
// of unknown parent): a relative path from there is an unobserved call.
import { posix } from 'node:path';

interface Cwd {
  path: string | null;
}

/** Who made a process, and whether they share one cwd (CLONE_FS), from the log's clone lines. */
export type BirthOf = (pid: number) => { pid: number; sharesFs: boolean } | undefined;

export class WorkingDirs {
  private readonly of = new Map<number, Cwd>();

  constructor(private readonly birthOf: BirthOf) {}

  /** The program's first process starts in `dir`. */
  start(pid: number, dir: string): void {
    this.of.set(pid, { path: dir });
  }

  /**
   * The parent's clone, fork or vfork line. The child's own lines may come first (a vfork child's
   * always do: its parent waits until it execs): then it already took its parent's cwd at its first one.
   */
  born(child: number): void {
    this.cwd(child);
  }

  /** A chdir or fchdir that succeeded: to `to` (absolute, or relative to the current one), or to somewhere unknown (null). */
  changed(pid: number, to: string | null): void {
    const c = this.cwd(pid);
    c.path = to === null ? null : to.startsWith('/') ? posix.normalize(to) : c.path === null ? null : posix.join(c.path, to);
  }

  /** Where a relative path of `pid` starts (null: unknown). */
  get(pid: number): string | null {
    return this.cwd(pid).path;
  }

  /** A process seen for the first time takes its parent's, and so on up to one whose cwd is known. */
  private cwd(pid: number): Cwd {
    const known = this.of.get(pid);
    if (known) return known;
    const chain: number[] = [];
    const seen = new Set<number>(); // pid reuse can make a loop of births
    let base: Cwd | undefined;
    for (let p: number | undefined = pid; p !== undefined && !seen.has(p); p = this.birthOf(p)?.pid) {
      base = this.of.get(p);
      if (base) break;
      seen.add(p);
      chain.push(p);
    }
    let c: Cwd = base ?? { path: null };
    for (let i = chain.length - 1; i >= 0; i--) {
      const q = chain[i]!;
      c = base && this.birthOf(q)?.sharesFs ? c : { path: c.path };
      this.of.set(q, c);
    }
    return c;
  }
}
