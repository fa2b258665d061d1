import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { openAuditLog } from '../audit/index.js';
import type { Problem } from '../base/problem.js';
import type { Workspace } from '../workspace/workspace.js';
import { removeStaging, step } from './apply.js';
import { loadRun } from './load.js';
import { forceRollback } from './promote.js';
import { finishRollback, journalScopes } from './rollback.js';
import { stepProblem, type Scopes } from './scopes.js';
import { audit, auditDetail, inflightIds, readJournal, recordDir, setInflight, withCommitLock, writeJournal } from './store.js';
import type { CommitFailure, Journal } from './types.js';

export interface Recovered {
  sandboxId: string;
  actionId?: string;
  /** What the tree holds now for this promotion. */
  outcome: 'old_state' | 'new_state' | 'nothing_applied' | 'failed';
  /** What was interrupted. */
  interrupted: 'promotion' | 'rollback' | 'claim';
  /** Paths that held neither state (kept in the tombstones first). */
  unexpected: { path: string; kept: string | null }[];
  problems: Problem[];
}

export interface RecoverReport {
  recovered: Recovered[];
  /** Live promotions rolled back because a later run of the same action has a FORCE_ROLLBACK verdict. */
  forced: { verdictSandboxId: string; sandboxId: string; ok: boolean; problems: Problem[] }[];
}

/** Was the `promoted` record (the commit point) appended for this attempt? */
function promotionCommitted(ws: Workspace, sandboxId: string, token: string): number | undefined {
  if (!existsSync(ws.auditFile)) return undefined;
  const recs = openAuditLog(ws.auditFile).show({ sandbox: sandboxId, type: 'promoted' });
  return recs.find((r) => (r.detail as { journal_token?: string } | undefined)?.journal_token === token)?.seq;
}

/**
 * `airlock recover`: brings every interrupted promotion or rollback to a consistent state and says
 * which. An interrupted promotion goes back to the old state, unless its `promoted` audit record
 * was written (the commit point), in which case it goes on to the new state. An interrupted
 * rollback is always finished (old state). Then FORCE_ROLLBACK verdicts are honoured.
 */
export async function recover(ws: Workspace, opts: { now?: () => Date } = {}): Promise<RecoverReport | CommitFailure> {
  const now = opts.now ?? (() => new Date());
  const first = await withCommitLock(ws, async () => {
    const recovered: Recovered[] = [];
    for (const id of inflightIds(ws)) recovered.push(await recoverOne(ws, id, now));
    return recovered;
  });
  if (!Array.isArray(first)) return first;
  const forced: RecoverReport['forced'] = [];
  if (first.every((r) => r.outcome !== 'failed')) {
    for (const verdictSid of forceRollbackRuns(ws)) {
      const loaded = loadRun(ws, verdictSid);
      if (!loaded.ok) continue;
      const out = await forceRollback(ws, loaded.run, now);
      if (!out.ok || out.status !== 'force_rolled_back') continue;
      for (const r of out.rolledBack) forced.push({ verdictSandboxId: verdictSid, sandboxId: r.sandboxId, ok: r.outcome.ok, problems: r.outcome.ok ? [] : r.outcome.problems });
    }
  }
  return { recovered: first, forced };
}

async function recoverOne(ws: Workspace, id: string, now: () => Date): Promise<Recovered> {
  const j = readJournal(ws, id);
  if (!j) {
    // Crashed between the in-flight marker and the journal: nothing was touched.
    rmSync(recordDir(ws, id), { recursive: true, force: true });
    setInflight(ws, id, false);
    return { sandboxId: id, outcome: 'nothing_applied', interrupted: 'claim', unexpected: [], problems: [] };
  }
  const base = { sandboxId: id, actionId: j.action_id };
  const interrupted = j.phase === 'rolling_back' ? 'rollback' : 'promotion';
  if (j.phase !== 'applying' && j.phase !== 'rolling_back') {
    // applied / aborted / rolled_back with a marker left behind: the journal already says where it is.
    setInflight(ws, id, false);
    return { ...base, outcome: j.phase === 'applied' ? 'new_state' : 'old_state', interrupted, unexpected: [], problems: [] };
  }
  // Every directory must still be the inode the promotion recorded (a forced rollback had waived that).
  const opened = await journalScopes(j, j.rollback_force !== true);
  if (!opened.ok) return { ...base, outcome: 'failed', interrupted, unexpected: [], problems: opened.problems };
  const scopes = opened.scopes;
  try {
    return { ...base, ...(await (j.phase === 'applying' ? recoverPromotion(ws, scopes, j, now) : recoverRollback(ws, scopes, j, now))) };
  } catch (e) {
    const p = stepProblem(e, 'ROLLBACK_FAILED', `recovery of ${id} stopped at`);
    return { ...base, outcome: 'failed', interrupted, unexpected: [], problems: [{ ...p, message: `${p.message}; fix it and run \`airlock recover\` again` }] };
  } finally {
    scopes.close();
  }
}

type Outcome = Omit<Recovered, 'sandboxId' | 'actionId'>;

/** On to the new state when the commit point (the `promoted` audit record) was written, else back. */
async function recoverPromotion(ws: Workspace, scopes: Scopes, j: Journal, now: () => Date): Promise<Outcome> {
  const seq = promotionCommitted(ws, j.sandbox_id, j.token);
  const forward = seq !== undefined;
  // A folder filled by someone else since (that the promotion added, or deletes, or where it added a
  // file) is left in place and reported: else one such folder would fail every recovery for good.
  const rep = await step(ws, scopes, j.ops, forward ? 'forward' : 'backward', `${j.token}${forward ? 'r' : 'u'}`, { tolerateNonEmpty: true });
  await removeStaging(scopes, j.ops, [j.token, `${j.token}r`, `${j.token}u`]);
  const outcome = forward ? 'new_state' : 'old_state';
  const rec = audit(ws, { type: 'recovered', action_id: j.action_id, sandbox_id: j.sandbox_id, actor: 'airlock recover', detail: auditDetail(j, { interrupted: 'promotion', outcome, unexpected: rep.unexpected, ...(rep.keptDirs.length > 0 ? { dirs_kept: rep.keptDirs } : {}) }) });
  if (!rec.ok) return { outcome: 'failed', interrupted: 'promotion', unexpected: rep.unexpected, problems: rec.problems };
  if (forward) {
    j.phase = 'applied';
    j.applied_at = now().toISOString();
    j.audit = { promoted: seq };
  } else j.phase = 'aborted';
  writeJournal(ws, j);
  setInflight(ws, j.sandbox_id, false);
  return { outcome, interrupted: 'promotion', unexpected: rep.unexpected, problems: [] };
}

/** An interrupted rollback is always finished (old state). */
async function recoverRollback(ws: Workspace, scopes: Scopes, j: Journal, now: () => Date): Promise<Outcome> {
  const token = `${j.rollback_token ?? j.token}r`;
  const rep = await step(ws, scopes, j.ops, 'backward', token, { tolerateNonEmpty: true });
  const rec = audit(ws, { type: 'recovered', action_id: j.action_id, sandbox_id: j.sandbox_id, actor: 'airlock recover', detail: auditDetail(j, { interrupted: 'rollback', outcome: 'old_state', unexpected: rep.unexpected }) });
  if (!rec.ok) return { outcome: 'failed', interrupted: 'rollback', unexpected: rep.unexpected, problems: rec.problems };
  await removeStaging(scopes, j.ops, [token]);
  const fin = await finishRollback(ws, scopes, j, rep, now(), { recovered: true });
  if (!fin.ok) return { outcome: 'failed', interrupted: 'rollback', unexpected: rep.unexpected, problems: fin.problems };
  return { outcome: 'old_state', interrupted: 'rollback', unexpected: rep.unexpected, problems: [] };
}

/** Runs whose verdict is FORCE_ROLLBACK (read from each run's sandbox-result.json). */
function forceRollbackRuns(ws: Workspace): string[] {
  if (!existsSync(ws.runs)) return [];
  const out: string[] = [];
  for (const id of readdirSync(ws.runs)) {
    try {
      const text = readFileSync(join(ws.runs, id, 'sandbox-result.json'), 'utf8');
      if (text.includes('"FORCE_ROLLBACK"') && (JSON.parse(text) as { verdict?: { recommended_action?: string } }).verdict?.recommended_action === 'FORCE_ROLLBACK') out.push(id);
    } catch {
      /* not a run with a result */
    }
  }
  return out;
}
