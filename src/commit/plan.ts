import { existsSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import type { DiffEntry } from '../contracts/sandbox-result.js';
import type { Problem } from '../base/problem.js';
import { privilegeBits } from '../base/mode.js';
import type { Workspace } from '../workspace/workspace.js';
import { currentState, hashFileNoFollow, keepInStore, type CurrentState } from './fsops.js';
import type { LoadedRun } from './load.js';
import { pathProblem, type Scopes } from './scopes.js';
import type { CommitResult, JournalOp } from './types.js';

/**
 * Turns a verified diff into the journal's ordered operations, re-checking every pre-image against
 * the real filesystem (through the scope agents) first. Nothing is changed here except that
 * pre-images are copied into the tombstone store (content-addressed, additive) when the runner did
 * not keep them already. A second line behind the judge: set-id and sticky bits (in the new state,
 * and in an old state a rollback would have to write back), entries that are not files or
 * directories, hard-linked files and files of another owner are refused here too; and so is a file
 * in a group the owner may not set (it could not keep it, nor get it back on rollback).
 *
 * Order: new directories parents first, modifications, new files, deleted files, deleted
 * directories children first. Undo runs the same list backwards.
 */
export async function planPromotion(ws: Workspace, run: LoadedRun, scopes: Scopes): Promise<CommitResult<{ ops: JournalOp[]; dirs: Record<string, string> }>> {
  const problems: Problem[] = [];
  const bad = (code: Problem['code'], message: string, path: string) => problems.push({ code, message, path });
  const diff = run.result.filesystem_diff;
  // /out is the run's own output area (kept in runs/<id>/out), never a real path: never promoted.
  const real = (e: DiffEntry) => e.path !== '/out' && !e.path.startsWith('/out/');
  const entries: { kind: JournalOp['kind']; e: DiffEntry }[] = [
    ...diff.added.filter(real).map((e) => ({ kind: 'added' as const, e })),
    ...diff.modified.filter(real).map((e) => ({ kind: 'modified' as const, e })),
    ...diff.deleted.filter(real).map((e) => ({ kind: 'deleted' as const, e })),
  ];
  const addedDirs = new Set(diff.added.filter((e) => e.type === 'dir').map((e) => e.path));

  // Parents: real directories, reached from the scope root without a link (the agent's walk), and
  // recorded with their inode so that apply, rollback and recovery notice a swapped one.
  const dirs: Record<string, string> = {};
  const parentOk = new Map<string, Problem | null>();
  const checkParent = async (path: string): Promise<Problem | null> => {
    const dir = dirname(path);
    const known = parentOk.get(dir);
    if (known !== undefined) return known;
    let why: Problem | null = null;
    if (addedDirs.has(dir)) why = await checkParent(dir);
    else {
      const at = scopes.parentOf(path);
      try {
        const st = at ? await at.fs.stat(at.rel) : null;
        if (!at) why = { code: 'PROMOTE_PATH_UNSAFE', message: `${path} is in none of the run's scopes`, path };
        else if (!st) why = { code: 'PROMOTE_PREIMAGE_CHANGED', message: `its parent directory ${dir} does not exist`, path: dir };
        else if (st.type === 'symlink') why = { code: 'PROMOTE_PATH_UNSAFE', message: `its parent ${dir} is a symbolic link: never followed`, path: dir };
        else if (st.type !== 'dir') why = { code: 'PROMOTE_PREIMAGE_CHANGED', message: `its parent ${dir} is not a directory`, path: dir };
        else dirs[dir] = st.ident;
      } catch (e) {
        why = pathProblem(e, dir);
      }
    }
    parentOk.set(dir, why);
    return why;
  };
  const blob = (sha: string | null | undefined, p: string): string | null => {
    if (sha && hashFileNoFollow(join(ws.blobs, sha)) === sha) return sha;
    bad('PROMOTE_CONTENT_MISSING', `the new content of ${p} (sha256 ${sha ?? 'unknown'}) is not in ${ws.blobs} or is damaged`, p);
    return null;
  };

  const ops: JournalOp[] = [];
  for (const { kind, e } of entries) {
    const p = e.path;
    if (!p.startsWith('/') || normalize(p) !== p || p === '/') {
      bad('PROMOTE_PATH_UNSAFE', `${p} is not an absolute, normalised path`, p);
      continue;
    }
    if (e.type !== 'file' && e.type !== 'dir') {
      bad('PROMOTE_UNSUPPORTED_ENTRY', `${p} is a ${e.type}: only regular files and directories are promoted`, p);
      continue;
    }
    const mode = parseInt(e.mode, 8) & 0o7777;
    if (kind !== 'deleted' && mode & 0o7000) {
      bad('PROMOTE_PRIVILEGE_BITS', `${p} would get mode ${mode.toString(8).padStart(4, '0')} (${privilegeBits(mode)}): never applied`, p);
      continue;
    }
    const at = scopes.locate(p);
    const parentWhy = at ? await checkParent(p) : { code: 'PROMOTE_PATH_UNSAFE', message: `${p} is in none of the run's scopes`, path: p };
    if (!at || parentWhy) {
      problems.push({ ...(parentWhy as Problem), message: `${p}: ${(parentWhy as Problem).message}`, path: p });
      continue;
    }
    const owner = at.fs.authority;
    let cur: CurrentState;
    try {
      cur = addedDirs.has(dirname(p)) ? null : await currentState(scopes, p);
    } catch (e2) {
      problems.push(pathProblem(e2, p));
      continue;
    }
    const curDesc = cur === null ? 'absent' : cur.type === 'other' ? `a ${cur.kind}` : cur.type === 'dir' ? 'a directory' : `a file with sha256 ${cur.sha256}`;
    if (kind === 'added') {
      if (cur !== null) {
        bad('PROMOTE_PREIMAGE_CHANGED', `${p} was added by the run but exists now (${curDesc}): nothing was applied`, p);
        continue;
      }
      if (e.type === 'dir') ops.push({ path: p, kind, before: null, after: { type: 'dir', mode, ...owner } });
      else {
        const sha = blob(e.sha256_after, p);
        if (sha) ops.push({ path: p, kind, before: null, after: { type: 'file', sha256: sha, mode, ...owner } });
      }
      continue;
    }
    // modified or deleted: the real path must still be what the run started from, and the owner's.
    if (cur === null || cur.type === 'other' || cur.type !== (e.type === 'dir' ? 'dir' : 'file')) {
      bad('PROMOTE_PREIMAGE_CHANGED', `${p} changed since the run: it was a ${e.type}, it is now ${curDesc}; nothing was applied`, p);
      continue;
    }
    if (cur.uid !== owner.uid) {
      bad('PROMOTE_FOREIGN_OWNER', `${p} belongs to uid ${cur.uid}, not to the scope's owner (uid ${owner.uid}) whose authority promotion has: nothing was applied`, p);
      continue;
    }
    // Its rollback must be able to write the old state back, with the owner's authority.
    if (cur.mode & 0o7000) {
      bad('PROMOTE_UNRESTORABLE_MODE', `${p} has mode ${cur.mode.toString(8).padStart(4, '0')} (${privilegeBits(cur.mode)}): a rollback would have to write that bit back, which Airlock never does; clear it first (chmod as its owner or root) or change ${p} without Airlock: nothing was applied`, p);
      continue;
    }
    // A rewritten file, and any restored entry, is a new one of the owner: it keeps its group only if the owner may set it.
    if ((kind === 'deleted' || e.type === 'file') && !at.fs.maySetGroup(cur.gid)) {
      bad('PROMOTE_FOREIGN_GROUP', `${p} is in group ${cur.gid}, which the scope's owner (uid ${owner.uid}) is not a member of: its new version could not keep that group, nor could a rollback restore it; add the owner to the group or chgrp the file first: nothing was applied`, p);
      continue;
    }
    const { ident: _i, nlink, ...before } = cur;
    if (e.type === 'file') {
      if (nlink > 1) {
        bad('PROMOTE_UNSUPPORTED_ENTRY', `${p} has ${nlink} hard links: replacing or removing one name would leave the others behind`, p);
        continue;
      }
      if (!e.sha256_before || before.sha256 !== e.sha256_before) {
        bad('PROMOTE_PREIMAGE_CHANGED', `${p} changed since the run: sha256 ${before.sha256}, the run saw ${e.sha256_before ?? 'an unhashed file'}; nothing was applied`, p);
        continue;
      }
      let kept: boolean | string;
      try {
        kept = await keepInStore(ws.tombstones, scopes, p, before.sha256 as string);
      } catch (e3) {
        kept = (e3 as Error).message;
      }
      if (kept !== true) {
        bad('PROMOTE_TOMBSTONE_FAILED', `could not keep the pre-image of ${p} in ${ws.tombstones} (${kept === false ? 'it changed while being copied' : kept}): nothing was applied`, p);
        continue;
      }
    }
    if (kind === 'deleted') ops.push({ path: p, kind, before, after: null });
    else if (e.type === 'dir') ops.push({ path: p, kind, before, after: { ...before, mode } });
    else {
      const sha = blob(e.sha256_after, p);
      if (sha) ops.push({ path: p, kind, before, after: { type: 'file', sha256: sha, mode, uid: before.uid, gid: before.gid } });
    }
  }
  if (problems.length > 0) return { ok: false, problems };

  const rank = (o: JournalOp): number =>
    o.kind === 'added' && o.after?.type === 'dir' ? 0 : o.kind === 'modified' ? 1 : o.kind === 'added' ? 2 : o.before?.type === 'file' ? 3 : 4;
  ops.sort((a, b) => {
    const r = rank(a) - rank(b);
    if (r !== 0) return r;
    if (rank(a) === 4) return a.path < b.path ? 1 : a.path > b.path ? -1 : 0; // deepest directories first
    return a.path < b.path ? -1 : a.path > b.path ? 1 : 0;
  });
  return { ok: true, ops, dirs };
}


/** Every tombstone a rollback to `ops`' before-state needs, present and intact. */
export function missingTombstones(ws: Workspace, ops: JournalOp[]): string[] {
  const missing: string[] = [];
  for (const o of ops) {
    const sha = o.before?.type === 'file' ? o.before.sha256 : undefined;
    if (sha && (!existsSync(join(ws.tombstones, sha)) || hashFileNoFollow(join(ws.tombstones, sha)) !== sha)) missing.push(o.path);
  }
  return missing;
}
