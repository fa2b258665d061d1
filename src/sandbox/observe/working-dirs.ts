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

export class WorkingDirs {
  private readonly of = new Map<number, Cwd>();

  constructor(private readonly parentOf: (pid: number) => number | undefined) {}

  /** The program's first process starts in `dir`. */
  start(pid: number, dir: string): void {
    this.of.set(pid, { path: dir });
  }

  /** A clone, fork or vfork that succeeded: the child shares the parent's (CLONE_FS) or copies it. */
  forked(parent: number, child: number, sharesFs: boolean): void {
    const p = this.cwd(parent);
    this.of.set(child, sharesFs ? p : { path: p.path });
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

  private cwd(pid: number): Cwd {
    let c = this.of.get(pid);
    if (!c) {
      // A child whose first line comes before its parent's clone line: a copy of the parent's now.
      const parent = this.parentOf(pid);
      c = { path: parent !== undefined ? (this.of.get(parent)?.path ?? null) : null };
      this.of.set(pid, c);
    }
    return c;
  }
}
