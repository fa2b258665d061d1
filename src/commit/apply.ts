import { dirname, join } from 'node:path';
import type { Workspace } from '../workspace/workspace.js';
import { currentState, fsyncPath, keepInStore, putState, readVerified, removeQuietly, sameState, stageName, testHook } from './fsops.js';
import type { JournalOp, PathState } from './types.js';

/**
 * Moving the real tree between a journal's two states. `forward` applies the ops in order; `backward`
 * restores every `before` in reverse order. Both are idempotent: an op whose path already holds its
 * target is skipped, so recovery can run them again after a crash at any point.
 */

export interface StepReport {
  /** Paths that held neither the expected nor the target state (their content was kept in the tombstones). */
  unexpected: { path: string; kept: string | null }[];
  /** Directories left in place because something else was put in them (rollback --force only). */
  keptDirs: string[];
}

function contentFor(ws: Workspace, want: PathState | null, store: 'blobs' | 'tombstones', path: string): Buffer | null {
  if (!want || want.type !== 'file') return null;
  const sha = want.sha256 as string;
  const bytes = readVerified(join(store === 'blobs' ? ws.blobs : ws.tombstones, sha), sha) ?? readVerified(join(store === 'blobs' ? ws.tombstones : ws.blobs, sha), sha);
  if (!bytes) throw new Error(`the content of ${path} (sha256 ${sha}) is missing from the ${store} store or damaged`);
  return bytes;
}

/** Keeps whatever unexpected file is at `path` in the tombstones before it is replaced. */
function keepUnexpected(ws: Workspace, path: string, report: StepReport): void {
  const cur = currentState(path);
  if (cur && cur.type === 'file' && cur.sha256) {
    keepInStore(ws.tombstones, path, cur.sha256);
    report.unexpected.push({ path, kept: cur.sha256 });
  } else report.unexpected.push({ path, kept: null });
}

/**
 * Brings each op's path to its `after` (forward) or `before` (backward) state. `expectFrom`: a path
 * that holds neither state is unexpected (a crash mid-way, or rollback --force): its content is
 * tombstoned first. Directories that cannot be removed because they are not empty are reported
 * with `tolerateNonEmpty`, else the error is thrown.
 */
export function step(ws: Workspace, ops: JournalOp[], dir: 'forward' | 'backward', token: string, opts: { tolerateNonEmpty?: boolean } = {}): StepReport {
  const report: StepReport = { unexpected: [], keptDirs: [] };
  const touchedDirs = new Set<string>();
  const order = dir === 'forward' ? ops.map((_, i) => i) : ops.map((_, i) => ops.length - 1 - i);
  let done = 0;
  for (const i of order) {
    const op = ops[i] as JournalOp;
    const from = dir === 'forward' ? op.before : op.after;
    const to = dir === 'forward' ? op.after : op.before;
    const cur = currentState(op.path);
    if (sameState(cur, to)) continue;
    if (!sameState(cur, from) && !(cur !== null && to !== null && sameState(cur, to, false))) keepUnexpected(ws, op.path, report);
    const bytes = contentFor(ws, to, dir === 'forward' ? 'blobs' : 'tombstones', op.path);
    try {
      putState(op.path, to, bytes, stageName(op.path, token, i));
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (opts.tolerateNonEmpty && to === null && (code === 'ENOTEMPTY' || code === 'EEXIST')) {
        report.keptDirs.push(op.path);
        continue;
      }
      throw Object.assign(new Error(`${op.path}: ${(e as Error).message}`), { path: op.path });
    }
    touchedDirs.add(dirname(op.path));
    if (to?.type === 'dir') touchedDirs.add(op.path);
    testHook(++done);
  }
  // Renames, links and unlinks are durable once their directories are fsync'd.
  for (const d of touchedDirs) {
    try {
      fsyncPath(d);
    } catch {
      /* a directory removed by a later op */
    }
  }
  return report;
}

/** Removes staging files an interrupted apply or rollback may have left beside the targets. */
export function removeStaging(ops: JournalOp[], tokens: (string | undefined)[]): void {
  for (const t of tokens) if (t) ops.forEach((o, i) => removeQuietly(stageName(o.path, t, i)));
}
