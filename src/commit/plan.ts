import { existsSync, realpathSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import type { DiffEntry } from '../contracts/sandbox-result.js';
import type { Problem } from '../contracts/problem.js';
import type { Workspace } from '../workspace/workspace.js';
import { currentState, hashFileNoFollow, keepInStore, lstatOrNull } from './fsops.js';
import type { LoadedRun } from './load.js';
import type { CommitResult, JournalOp, PathState } from './types.js';

/**
 * Turns a verified diff into the journal's ordered operations, re-checking every pre-image against
 * the real filesystem first. Nothing is changed here except that pre-images are copied into the
 * tombstone store (content-addressed, additive) when the runner did not keep them already.
 *
 * Order: new directories parents first, modifications, new files, deleted files, deleted
 * directories children first. Undo runs the same list backwards.
 */
export function planPromotion(ws: Workspace, run: LoadedRun): CommitResult<{ ops: JournalOp[] }> {
  const problems: Problem[] = [];
  const bad = (code: Problem['code'], message: string, path: string) => problems.push({ code, message, path });
  const diff = run.result.filesystem_diff;
  const entries: { kind: JournalOp['kind']; e: DiffEntry }[] = [
    ...diff.added.map((e) => ({ kind: 'added' as const, e })),
    ...diff.modified.map((e) => ({ kind: 'modified' as const, e })),
    ...diff.deleted.map((e) => ({ kind: 'deleted' as const, e })),
  ];
  const addedDirs = new Set(diff.added.filter((e) => e.type === 'dir').map((e) => e.path));

  // Parents: real directories reached without a symbolic link (memoised per directory).
  const parentOk = new Map<string, string | null>();
  const checkParent = (dir: string): string | null => {
    const known = parentOk.get(dir);
    if (known !== undefined) return known;
    let why: string | null = null;
    if (addedDirs.has(dir)) why = checkParent(dirname(dir));
    else {
      const st = lstatOrNull(dir);
      if (!st) why = `its parent directory ${dir} does not exist`;
      else if (!st.isDirectory()) why = `its parent ${dir} is not a directory`;
      else {
        let real: string;
        try {
          real = realpathSync(dir);
        } catch {
          real = '';
        }
        if (real !== dir) why = `its parent ${dir} resolves through a symbolic link to ${real || '(unresolvable)'}`;
      }
    }
    parentOk.set(dir, why);
    return why;
  };
  // Owner of a new entry: the owner of the directory it lands in (as if that directory's owner made it).
  const ownerCache = new Map<string, { uid: number; gid: number }>();
  const ownerOf = (dir: string): { uid: number; gid: number } => {
    const known = ownerCache.get(dir);
    if (known) return known;
    const st = addedDirs.has(dir) ? null : lstatOrNull(dir);
    const o = st ? { uid: st.uid, gid: st.gid } : ownerOf(dirname(dir));
    ownerCache.set(dir, o);
    return o;
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
    const parentWhy = checkParent(dirname(p));
    if (parentWhy) {
      bad('PROMOTE_PATH_UNSAFE', `${p}: ${parentWhy}`, p);
      continue;
    }
    const mode = parseInt(e.mode, 8) & 0o7777;
    const cur = currentState(p);
    const curDesc = cur === null ? 'absent' : cur.type === 'other' ? `a ${cur.kind}` : cur.type === 'dir' ? 'a directory' : `a file with sha256 ${cur.sha256}`;
    if (kind === 'added') {
      if (cur !== null) {
        bad('PROMOTE_PREIMAGE_CHANGED', `${p} was added by the run but exists now (${curDesc}): nothing was applied`, p);
        continue;
      }
      const owner = ownerOf(dirname(p));
      if (e.type === 'dir') ops.push({ path: p, kind, before: null, after: { type: 'dir', mode, ...owner } });
      else {
        const sha = e.sha256_after;
        if (!sha || hashFileNoFollow(join(ws.blobs, sha)) !== sha) {
          bad('PROMOTE_CONTENT_MISSING', `the new content of ${p} (sha256 ${sha ?? 'unknown'}) is not in ${ws.blobs} or is damaged`, p);
          continue;
        }
        ops.push({ path: p, kind, before: null, after: { type: 'file', sha256: sha, mode, ...owner } });
      }
      continue;
    }
    // modified or deleted: the real path must still be what the run started from.
    if (cur === null || cur.type === 'other' || cur.type !== (e.type === 'dir' ? 'dir' : 'file')) {
      bad('PROMOTE_PREIMAGE_CHANGED', `${p} changed since the run: it was a ${e.type}, it is now ${curDesc}; nothing was applied`, p);
      continue;
    }
    const before = cur as PathState;
    if (e.type === 'file') {
      if (!e.sha256_before || before.sha256 !== e.sha256_before) {
        bad('PROMOTE_PREIMAGE_CHANGED', `${p} changed since the run: sha256 ${before.sha256}, the run saw ${e.sha256_before ?? 'an unhashed file'}; nothing was applied`, p);
        continue;
      }
      if (!keepInStore(ws.tombstones, p, before.sha256)) {
        bad('PROMOTE_TOMBSTONE_FAILED', `could not keep the pre-image of ${p} in ${ws.tombstones} (it changed while being copied)`, p);
        continue;
      }
    }
    if (kind === 'deleted') {
      ops.push({ path: p, kind, before, after: null });
      continue;
    }
    if (e.type === 'dir') ops.push({ path: p, kind, before, after: { ...before, mode } });
    else {
      const sha = e.sha256_after;
      if (!sha || hashFileNoFollow(join(ws.blobs, sha)) !== sha) {
        bad('PROMOTE_CONTENT_MISSING', `the new content of ${p} (sha256 ${sha ?? 'unknown'}) is not in ${ws.blobs} or is damaged`, p);
        continue;
      }
      ops.push({ path: p, kind, before, after: { type: 'file', sha256: sha, mode, uid: before.uid, gid: before.gid } });
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
  return { ok: true, ops };
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
