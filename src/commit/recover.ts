import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { openAuditLog } from '../audit/index.js';
import type { Problem } from '../base/problem.js';
import type { Workspace } from '../workspace/workspace.js';
import { removeStaging, step, type StepReport } from './apply.js';
import { loadRun } from './load.js';
import { forceRollback } from './promote.js';
import { finishRollback, journalScopes } from './rollback.js';
import { stepProblem, type Scopes } from './scopes.js';
import { audit, auditDetail, inflightIds, readJournal, recordDir, setInflight, withCommitLock, writeJournal } from './store.js';
import { fail, type CommitFailure, type Journal } from './types.js';

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
  /** Set when an operator ended it (`--abandon`): who, and the paths left as they were (and why). */
  abandoned?: { actor: string; leftUndone: { path: string; code: string; message: string }[] };
  /** Paths restored without what the owner cannot write (a set-id bit, a foreign group): older journals only. */
  notRestored?: { path: string; what: string }[];
}

export interface RecoverOptions {
  now?: () => Date;
  /**
   * `airlock recover --abandon SANDBOX_ID`: an operator ends this in-flight promotion or rollback
   * although some of it cannot be done (a folder its owner replaced, a permission): every path that
   * can be brought to the state recovery chooses is, with the usual checks (never through a link or
   * a mount point, a replaced directory is not entered, writes only as the owner); the rest is left
   * as it is, listed in the `recovered` audit record and the report, and the workspace is unblocked.
   */
  abandon?: string;
  /** Who abandons it (the audit record's actor). */
  actor?: string;
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
export async function recover(ws: Workspace, opts: RecoverOptions = {}): Promise<RecoverReport | CommitFailure> {
  const now = opts.now ?? (() => new Date());
  const first = await withCommitLock(ws, async () => {
    const ids = inflightIds(ws);
    if (opts.abandon !== undefined && !ids.includes(opts.abandon)) {
      return fail('RECOVER_NOT_IN_FLIGHT', `${opts.abandon} is not an interrupted promotion or rollback (in flight: ${ids.length > 0 ? ids.join(', ') : 'none'}): nothing was abandoned`);
    }
    const recovered: Recovered[] = [];
    for (const id of ids) recovered.push(await recoverOne(ws, id, now, id === opts.abandon ? { actor: opts.actor ?? 'operator' } : undefined));
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

interface Abandon {
  actor: string;
}

async function recoverOne(ws: Workspace, id: string, now: () => Date, abandon?: Abandon): Promise<Recovered> {
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
  const opened = await journalScopes(ws, j, j.rollback_force !== true);
  // Abandoned with scopes that cannot even be opened (a replaced scope root...): nothing is touched.
  if (!opened.ok && !abandon) return { ...base, outcome: 'failed', interrupted, unexpected: [], problems: opened.problems };
  const scopes = opened.ok ? opened.scopes : null;
  const run = (dir: 'forward' | 'backward', token: string): Promise<StepReport> => {
    // A rollback without --force overwrites nothing the owner changed meanwhile, finished here or not.
    const others = j.phase === 'rolling_back' && j.rollback_force !== true ? 'leave' : 'overwrite';
    if (scopes) return step(ws, scopes, j.ops, dir, token, { tolerateNonEmpty: true, leaveFailed: abandon !== undefined, others });
    const why = (opened as CommitFailure).problems[0] as Problem;
    return Promise.resolve({ unexpected: [], keptDirs: [], notRestored: [], leftUndone: j.ops.map((o) => ({ path: o.path, code: why.code, message: why.message })) });
  };
  try {
    return { ...base, ...(await (j.phase === 'applying' ? recoverPromotion(ws, scopes, j, now, run, abandon) : recoverRollback(ws, scopes, j, now, run, abandon))) };
  } catch (e) {
    const p = stepProblem(e, 'ROLLBACK_FAILED', `recovery of ${id} stopped at`);
    const hint = `fix it and run \`airlock recover\` again; if it cannot be fixed, \`airlock recover --abandon ${id}\` ends it and leaves what it cannot do as it is (audited)`;
    return { ...base, outcome: 'failed', interrupted, unexpected: [], problems: [{ ...p, message: `${p.message}; ${hint}` }] };
  } finally {
    scopes?.close();
  }
}

type Outcome = Omit<Recovered, 'sandboxId' | 'actionId'>;
type Stepper = (dir: 'forward' | 'backward', token: string) => Promise<StepReport>;

/** What a `recovered` record and the report add for an abandoned operation, and for attributes not restored. */
function extras(j: Journal, rep: StepReport, now: () => Date, abandon?: Abandon): { detail: Record<string, unknown>; report: Partial<Outcome> } {
  if (abandon) j.abandoned = { at: now().toISOString(), actor: abandon.actor, left_undone: rep.leftUndone };
  return {
    detail: { ...(abandon ? { abandoned: true, left_undone: rep.leftUndone } : {}), ...(rep.notRestored.length > 0 ? { not_restored: rep.notRestored } : {}) },
    report: { ...(abandon ? { abandoned: { actor: abandon.actor, leftUndone: rep.leftUndone } } : {}), ...(rep.notRestored.length > 0 ? { notRestored: rep.notRestored } : {}) },
  };
}

/** On to the new state when the commit point (the `promoted` audit record) was written, else back. */
async function recoverPromotion(ws: Workspace, scopes: Scopes | null, j: Journal, now: () => Date, run: Stepper, abandon?: Abandon): Promise<Outcome> {
  const seq = promotionCommitted(ws, j.sandbox_id, j.token);
  const forward = seq !== undefined;
  // A folder filled by someone else since (that the promotion added, or deletes, or where it added a
  // file) is left in place and reported: else one such folder would fail every recovery for good.
  const rep = await run(forward ? 'forward' : 'backward', `${j.token}${forward ? 'r' : 'u'}`);
  if (scopes) await removeStaging(scopes, j.ops, [j.token, `${j.token}r`, `${j.token}u`]);
  const outcome = forward ? 'new_state' : 'old_state';
  const x = extras(j, rep, now, abandon);
  const rec = audit(ws, { type: 'recovered', action_id: j.action_id, sandbox_id: j.sandbox_id, actor: abandon?.actor ?? 'airlock recover', detail: auditDetail(j, { interrupted: 'promotion', outcome, unexpected: rep.unexpected, ...(rep.keptDirs.length > 0 ? { dirs_kept: rep.keptDirs } : {}), ...x.detail }) });
  if (!rec.ok) return { outcome: 'failed', interrupted: 'promotion', unexpected: rep.unexpected, problems: rec.problems };
  if (forward) {
    j.phase = 'applied';
    j.applied_at = now().toISOString();
    j.audit = { promoted: seq };
  } else j.phase = 'aborted';
  writeJournal(ws, j);
  setInflight(ws, j.sandbox_id, false);
  return { outcome, interrupted: 'promotion', unexpected: rep.unexpected, problems: [], ...x.report };
}

/** An interrupted rollback is always finished (old state). */
async function recoverRollback(ws: Workspace, scopes: Scopes | null, j: Journal, now: () => Date, run: Stepper, abandon?: Abandon): Promise<Outcome> {
  const token = `${j.rollback_token ?? j.token}r`;
  const rep = await run('backward', token);
  const x = extras(j, rep, now, abandon);
  const rec = audit(ws, { type: 'recovered', action_id: j.action_id, sandbox_id: j.sandbox_id, actor: abandon?.actor ?? 'airlock recover', detail: auditDetail(j, { interrupted: 'rollback', outcome: 'old_state', unexpected: rep.unexpected, ...x.detail }) });
  if (!rec.ok) return { outcome: 'failed', interrupted: 'rollback', unexpected: rep.unexpected, problems: rec.problems };
  if (scopes) await removeStaging(scopes, j.ops, [token]);
  const fin = await finishRollback(ws, scopes, j, rep, now(), { recovered: true });
  if (!fin.ok) return { outcome: 'failed', interrupted: 'rollback', unexpected: rep.unexpected, problems: fin.problems };
  return { outcome: 'old_state', interrupted: 'rollback', unexpected: rep.unexpected, problems: [], ...x.report };
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
