import { join } from 'node:path';
import type { Workspace } from '../workspace/workspace.js';
import { currentState, keepInStore, putState, removeStage, sameState, stageName, testHook } from './fsops.js';
import { readVerified } from '../base/content-store.js';
import type { Scopes } from './scopes.js';
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

/**
 * Brings each op's path to its `after` (forward) or `before` (backward) state. A path that holds
 * neither state is unexpected; what happens to it is `others`:
 * - `overwrite` (recovery, rollback): its content is tombstoned first, then it is set;
 * - `refuse` (a promotion's own apply): it changed since the plan checked it: stop (ESTALE, naming
 *   the path), nothing of it is touched;
 * - `leave` (the undo of a promotion that stopped): we never wrote it (our writes leave a path in
 *   one of the two states), so it is someone else's newer content: left as it is, and reported.
 * Directories that cannot be removed because they are not empty are reported with
 * `tolerateNonEmpty`, else the error is thrown (with the path).
 */
export async function step(ws: Workspace, scopes: Scopes, ops: JournalOp[], dir: 'forward' | 'backward', token: string, opts: { tolerateNonEmpty?: boolean; others?: 'overwrite' | 'refuse' | 'leave' } = {}): Promise<StepReport> {
  const report: StepReport = { unexpected: [], keptDirs: [] };
  const touched = new Set<string>();
  const order = dir === 'forward' ? ops.map((_, i) => i) : ops.map((_, i) => ops.length - 1 - i);
  let done = 0;
  for (const i of order) {
    const op = ops[i] as JournalOp;
    const from = dir === 'forward' ? op.before : op.after;
    const to = dir === 'forward' ? op.after : op.before;
    try {
      const cur = await currentState(scopes, op.path);
      if (sameState(cur, to)) continue;
      if (!sameState(cur, from) && !(cur !== null && to !== null && sameState(cur, to, false))) {
        const others = opts.others ?? 'overwrite';
        if (others === 'refuse') throw Object.assign(new Error(`changed since the plan checked it (now ${cur === null ? 'absent' : cur.type === 'other' ? `a ${cur.kind}` : cur.type === 'dir' ? 'a directory' : `a file with sha256 ${cur.sha256}`}): nothing of it was written`), { errno: 'ESTALE' });
        if (others === 'leave') {
          report.unexpected.push({ path: op.path, kept: null });
          continue;
        }
        const kept = cur?.type === 'file' && cur.sha256 && (await keepInStore(ws.tombstones, scopes, op.path, cur.sha256)) ? cur.sha256 : null;
        report.unexpected.push({ path: op.path, kept });
      }
      const bytes = contentFor(ws, to, dir === 'forward' ? 'blobs' : 'tombstones', op.path);
      await putState(scopes, op.path, cur, to, bytes, stageName(op.path, token, i));
    } catch (e) {
      const code = (e as { errno?: string }).errno;
      if (opts.tolerateNonEmpty && to === null && (code === 'ENOTEMPTY' || code === 'EEXIST')) {
        report.keptDirs.push(op.path);
        continue;
      }
      throw Object.assign(new Error(`${op.path}: ${(e as Error).message}`), { path: op.path, errno: code });
    }
    touched.add(op.path);
    testHook(++done);
  }
  await scopes.fsyncParents(touched);
  return report;
}

/** Removes staging files an interrupted apply or rollback may have left beside the targets. */
export async function removeStaging(scopes: Scopes, ops: JournalOp[], tokens: (string | undefined)[]): Promise<void> {
  for (const t of tokens) if (t) for (const [i, o] of ops.entries()) await removeStage(scopes, stageName(o.path, t, i));
}
