import { basename, dirname } from 'node:path';
import { ScopeFs, ScopeFsError } from '../base/scope-fs.js';
import type { Problem } from '../base/problem.js';
import { underScopeRoot } from '../policy/scopes.js';

/**
 * The scopes a promotion, rollback or recovery acts in, each through its own scope agent (one
 * process per scope, with that scope owner's authority: src/base/scope-fs.ts). A path of the diff
 * is always reached through the agent of the scope that contains it, relative to the scope root.
 */

/** What the run recorded of each scope (runs/<id>/scopes.json, written by the host at run time). */
export interface ScopeRecord {
  /** The declared scope: a directory, or one regular file. */
  path: string;
  kind: 'dir' | 'file';
  /** `dev:ino` of the scope root (the directory, or a one-file scope's parent directory). */
  root: string;
  /** The root's owner: whose authority every host write in this scope has. */
  owner: { uid: number; gid: number };
}

export interface Located {
  fs: ScopeFs;
  rel: string;
  scope: ScopeRecord;
}

export class Scopes {
  private constructor(private readonly open: { rec: ScopeRecord; fs: ScopeFs }[]) {}

  /**
   * Opens an agent per scope and checks that each root is still the directory the run saw (same
   * inode, same owner). `roots`: the policy's scope_roots now; a scope no longer under one is not
   * opened (the operator may have removed its root since the run). `pins`: directories (absolute)
   * that must still be the inodes recorded.
   */
  static async open(records: ScopeRecord[], roots: readonly string[] | null, pins: Record<string, string> = {}): Promise<{ ok: true; scopes: Scopes } | { ok: false; problems: Problem[] }> {
    const opened: { rec: ScopeRecord; fs: ScopeFs }[] = [];
    const problems: Problem[] = [];
    for (const rec of records) {
      if (!underScopeRoot(rec.path, roots)) {
        problems.push({ code: 'COMMIT_SCOPE_ROOT', message: `${rec.path} is no longer under a folder the host policy lets Airlock act in (scope_roots: ${roots?.length ? roots.join(', ') : 'none'}): nothing was changed there; put its root back in scope_roots to act on it`, path: rec.path });
        continue;
      }
      try {
        const fs = await ScopeFs.open(rec.path, rec.kind);
        opened.push({ rec, fs });
        const root = rec.kind === 'file' ? dirname(rec.path) : rec.path;
        if (fs.root.ident !== rec.root || fs.root.uid !== rec.owner.uid || fs.root.gid !== rec.owner.gid) {
          problems.push({ code: 'PROMOTE_SCOPE_CHANGED', message: `${root} is not the directory the run acted on (then inode ${rec.root}, owner ${rec.owner.uid}:${rec.owner.gid}; now inode ${fs.root.ident}, owner ${fs.root.uid}:${fs.root.gid}): nothing was changed; run the action again`, path: root });
        }
      } catch (e) {
        problems.push(pathProblem(e, rec.path));
      }
    }
    const scopes = new Scopes(opened);
    if (problems.length === 0) {
      for (const [path, ident] of Object.entries(pins)) {
        const at = scopes.locate(path);
        if (at) await at.fs.pin(at.rel, ident);
      }
      return { ok: true, scopes };
    }
    scopes.close();
    return { ok: false, problems };
  }

  /** The scope agent and relative path for an absolute path of the diff; null when no scope holds it. */
  locate(path: string): Located | null {
    for (const { rec, fs } of this.open) {
      if (rec.kind === 'file') {
        if (path === rec.path) return { fs, rel: basename(path), scope: rec };
      } else if (path === rec.path) return { fs, rel: '', scope: rec };
      else if (path.startsWith(rec.path === '/' ? '/' : `${rec.path}/`)) return { fs, rel: path.slice(rec.path.length + 1), scope: rec };
    }
    return null;
  }

  /** The agent and relative path of the directory holding `path` (a one-file scope's parent too). */
  parentOf(path: string): { fs: ScopeFs; rel: string } | null {
    const dir = dirname(path);
    for (const { rec, fs } of this.open) if (rec.kind === 'file' && dir === dirname(rec.path)) return { fs, rel: '' };
    const at = this.locate(dir);
    return at ? { fs: at.fs, rel: at.rel } : null;
  }

  /** Makes renames, links and removals in the directories holding `paths` durable (fsync). */
  async fsyncParents(paths: Iterable<string>): Promise<void> {
    const done = new Set<string>();
    for (const p of paths) {
      const d = dirname(p);
      const at = done.has(d) ? null : this.parentOf(p);
      done.add(d);
      if (at) await at.fs.fsync(at.rel).catch(() => undefined); // removed by a later op: nothing to sync
    }
  }

  /** Like locate, for a path the diff guarantees is in a scope (a bug otherwise). */
  at(path: string): Located {
    const l = this.locate(path);
    if (!l) throw new ScopeFsError('EXDEV', `${path} is in none of the action's scopes`, path);
    return l;
  }

  close(): void {
    for (const { fs } of this.open) fs.close();
  }
}

/** A refusal of the agent as a coded promotion problem naming the path. */
export function pathProblem(e: unknown, path: string): Problem {
  if (!(e instanceof ScopeFsError)) throw e;
  const code = e.errno === 'ESTALE' ? 'PROMOTE_PATH_CHANGED' : e.errno === 'ENOENT' && /not built/.test(e.message) ? 'COMMIT_NO_SAFE_WRITER' : 'PROMOTE_PATH_UNSAFE';
  return { code, message: `${path}: ${e.message}`, path };
}

/** An error thrown while stepping through a journal, as a coded problem naming the path. */
export function stepProblem(e: unknown, fallback: Problem['code'], what: string): Problem {
  const path = (e as { path?: string }).path;
  const errno = (e as { errno?: string }).errno;
  const code = errno === 'ESTALE' ? 'PROMOTE_PATH_CHANGED' : errno === 'ELOOP' || errno === 'ENOTDIR' || errno === 'EXDEV' ? 'PROMOTE_PATH_UNSAFE' : fallback;
  return { code, message: `${what} ${(e as Error).message}`, ...(path ? { path } : {}) };
}
