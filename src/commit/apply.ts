import { join } from 'node:path';
import type { Workspace } from '../workspace/workspace.js';
import { currentState, keepInStore, putState, removeStage, sameState, stageName, testHook, type CurrentState } from './fsops.js';
import { readVerified } from '../base/content-store.js';
import { privilegeBits } from '../base/mode.js';
import { stepProblem, type Scopes } from './scopes.js';
import type { JournalOp, PathState } from './types.js';

/**
 * Moving the real tree between a journal's two states. `forward` applies the ops in order; `backward`
 * restores every `before` in reverse order. Both are idempotent: an op whose path already holds its
 * target is skipped, so recovery can run them again after a crash at any point.
 */

export interface StepReport {
  /**
   * Paths that held neither the expected nor the target state: overwritten, their content kept in
   * the tombstones (`kept`), or, with `others: 'leave'`, left as they are (`left`).
   */
  unexpected: { path: string; kept: string | null; left?: true }[];
  /** Directories left in place because something else was put in them (a rollback; an undo). */
  keptDirs: string[];
  /**
   * Paths brought to their target except what the owner's authority cannot write: a set-id or sticky
   * bit, a group the owner is not in. Only a journal of an older Airlock (whose plan let such an
   * entry through) has them; without this its rollback and recovery failed for good.
   */
  notRestored: { path: string; what: string }[];
  /** `leaveFailed` (recover --abandon): paths whose step failed, left as they were. */
  leftUndone: { path: string; code: string; message: string }[];
}

/**
 * The part of `want` the scope owner's authority can write: never a set-uid, set-gid or sticky bit
 * (the agent refuses them), and a group only when the owner may set it (else the agent's own; an
 * existing directory that already has it keeps it). `what`: what was left out, in words.
 */
export function writable(scopes: Scopes, path: string, want: PathState | null, cur: CurrentState): { want: PathState | null; what: string[] } {
  if (!want) return { want, what: [] };
  const fs = scopes.at(path).fs;
  const out = { ...want };
  const what: string[] = [];
  if (want.mode & 0o7000) {
    out.mode = want.mode & 0o777;
    what.push(`mode ${want.mode.toString(8).padStart(4, '0')} written as ${out.mode.toString(8).padStart(4, '0')} (${privilegeBits(want.mode)} never written)`);
  }
  const hasIt = want.type === 'dir' && cur?.type === 'dir' && cur.gid === want.gid;
  if (want.gid !== fs.authority.gid && !hasIt && !fs.maySetGroup(want.gid)) {
    out.gid = fs.authority.gid;
    what.push(`group ${want.gid} (not one of the owner's) left as the owner's group ${fs.authority.gid}`);
  }
  return { want: out, what };
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
export async function step(ws: Workspace, scopes: Scopes, ops: JournalOp[], dir: 'forward' | 'backward', token: string, opts: { tolerateNonEmpty?: boolean; others?: 'overwrite' | 'refuse' | 'leave'; leaveFailed?: boolean } = {}): Promise<StepReport> {
  const report: StepReport = { unexpected: [], keptDirs: [], notRestored: [], leftUndone: [] };
  const touched = new Set<string>();
  const order = dir === 'forward' ? ops.map((_, i) => i) : ops.map((_, i) => ops.length - 1 - i);
  let done = 0;
  for (const i of order) {
    const op = ops[i] as JournalOp;
    const from = dir === 'forward' ? op.before : op.after;
    let to = dir === 'forward' ? op.after : op.before;
    try {
      const cur = await currentState(scopes, op.path);
      const w = writable(scopes, op.path, to, cur);
      to = w.want;
      if (w.what.length > 0) report.notRestored.push({ path: op.path, what: w.what.join('; ') });
      if (sameState(cur, to)) continue;
      if (!sameState(cur, from) && !(cur !== null && to !== null && sameState(cur, to, false))) {
        const others = opts.others ?? 'overwrite';
        if (others === 'refuse') throw Object.assign(new Error(`changed since the plan checked it (now ${cur === null ? 'absent' : cur.type === 'other' ? `a ${cur.kind}` : cur.type === 'dir' ? 'a directory' : `a file with sha256 ${cur.sha256}`}): nothing of it was written`), { errno: 'ESTALE' });
        if (others === 'leave') {
          report.unexpected.push({ path: op.path, kept: null, left: true });
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
      const err = Object.assign(new Error(`${op.path}: ${(e as Error).message}`), { path: op.path, errno: code });
      if (!opts.leaveFailed) throw err;
      const p = stepProblem(err, 'ROLLBACK_FAILED', 'left as it is:');
      report.leftUndone.push({ path: op.path, code: p.code, message: p.message });
      continue;
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
