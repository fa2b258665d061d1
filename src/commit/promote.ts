import { randomBytes } from 'node:crypto';
import { mkdirSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import type { Action } from '../action/action.js';
import { actionsOf } from '../action/declaration.js';
import type { Workspace } from '../workspace/workspace.js';
import { step, removeStaging, type StepReport } from './apply.js';
import { verifyConfirmation } from './confirmation.js';
import { fsyncPath, testPoint } from './fsops.js';
import { loadPolicy, loadRun, type LoadedRun } from './load.js';
import { planPromotion } from './plan.js';
import { checkPreconditions, realHost, type HostProbe } from './preconditions.js';
import { rollbackLocked, type RollbackOutcome } from './rollback.js';
import { Scopes, stepProblem } from './scopes.js';
import { allRecordIds, audit, auditDetail, claimRecord, commitPaths, inflightIds, readCooldown, readJournal, recordDir, setInflight, withCommitLock, writeJournal } from './store.js';
import { fail, type CommitFailure, type CommitResult, type Journal } from './types.js';

export interface PromoteOptions {
  actor?: string;
  now?: () => Date;
  cooldownSeconds?: number;
  host?: HostProbe;
}

export type PromoteOutcome = CommitResult<
  | { status: 'promoted'; journal: Journal }
  | { status: 'already_promoted'; journal: Journal }
  /** A FORCE_ROLLBACK verdict: nothing promoted; the action's live promotions were rolled back. */
  | { status: 'force_rolled_back'; rolledBack: { sandboxId: string; outcome: RollbackOutcome }[] }
>;

const allIds = (a: Action): string[] => actionsOf(a).map((x) => x.id);

/** `airlock promote SANDBOX_ID`: applies the run's verified diff once, all or nothing. */
export async function promote(ws: Workspace, sandboxId: string, opts: PromoteOptions = {}): Promise<PromoteOutcome> {
  const now = opts.now ?? (() => new Date());
  const loaded = loadRun(ws, sandboxId);
  if (!loaded.ok) return loaded;
  const run = loaded.run;
  const verdict = run.result.verdict.recommended_action;
  if (verdict === 'FORCE_ROLLBACK') return forceRollback(ws, run, now);
  if (verdict === 'BLOCK') return fail('PROMOTE_VERDICT', `the verdict of ${sandboxId} is BLOCK (${run.result.verdict.reasons.slice(0, 3).join('; ')}): a blocked run is never promoted`);
  if (run.cross.length > 0) return { ok: false, problems: run.cross.map((p) => ({ ...p, code: 'COMMIT_RESULT_INVALID', message: `the result contradicts its descriptor: ${p.code}: ${p.message}` })) };
  let confirmedBy: string | undefined;
  if (verdict === 'REQUIRE_CONFIRMATION') {
    const pol = loadPolicy(ws);
    if (!pol.ok) return pol;
    const c = verifyConfirmation(run, pol.policy, now());
    if ('problems' in c) return { ok: false, problems: c.problems };
    confirmedBy = c.operator;
  }

  return withCommitLock(ws, async (): Promise<PromoteOutcome> => {
    const busy = inflightIds(ws);
    if (busy.length > 0) return fail('COMMIT_INTERRUPTED', `interrupted promotion or rollback of ${busy.join(', ')}: run \`airlock recover\` first`);
    const existing = readJournal(ws, sandboxId);
    if (existing) {
      if (existing.phase === 'applied') return { ok: true, status: 'already_promoted', journal: existing };
      if (existing.phase !== 'aborted') return fail('PROMOTE_ALREADY_DONE', `${sandboxId} was promoted at ${existing.applied_at} and is ${existing.phase.replace('_', ' ')}: a run is promoted once; run the descriptor again`);
      // An aborted attempt applied nothing: keep it for the record, try again.
      const aside = join(commitPaths(ws).root, 'aborted');
      mkdirSync(aside, { recursive: true, mode: 0o700 });
      renameSync(recordDir(ws, sandboxId), join(aside, `${sandboxId}.${Date.now()}`));
    }

    // The policy as it is now: its cooldown, and the scope_roots the scopes must still lie under.
    const pol = loadPolicy(ws);
    if (!pol.ok) return pol;
    // cooldown_on_repeat: the same declaration, rolled back less than the cooldown ago.
    const cd = readCooldown(ws, run.declarationSha256);
    if (cd && (cd.cooldown_on_repeat || run.action.cooldownOnRepeat)) {
      const cooldown = opts.cooldownSeconds ?? pol.policy.confirmation.cooldown_seconds;
      const until = Date.parse(cd.rolled_back_at) + cooldown * 1000;
      if (now().getTime() < until) {
        return fail('PROMOTE_COOLDOWN', `the same action (declaration ${run.declarationSha256.slice(0, 12)}) was rolled back at ${cd.rolled_back_at} (sandbox ${cd.sandbox_id}); it may be promoted again after ${new Date(until).toISOString()}`);
      }
    }
    const pre = checkPreconditions(run.action, opts.host ?? realHost);
    if (pre.length > 0) return { ok: false, problems: pre };
    if (actionsOf(run.action).every((a) => a.scope.paths.length === 0)) return fail('COMMIT_NO_SCOPE', `${run.sandboxId} declared no scope: it changed no real file; its outputs, if it left any, are in ${join(run.runDir, 'out')}`);
    if (!run.scopes) return fail('COMMIT_NO_SCOPE_RECORD', `${join(run.runDir, 'scopes.json')} is missing or damaged: Airlock cannot tell which scope roots the run acted on; run the descriptor again`);
    const opened = await Scopes.open(run.scopes, pol.policy.scope_roots);
    if (!opened.ok) return opened;
    const scopes = opened.scopes;
    try {
      return await applyPlan(ws, run, scopes, { verdict, confirmedBy, actor: opts.actor ?? 'operator', now });
    } finally {
      scopes.close();
    }
  });
}

/** Plans, journals and applies the run's diff; the audit record is the commit point. Holds the lock. */
async function applyPlan(ws: Workspace, run: LoadedRun, scopes: Scopes, a: { verdict: string; confirmedBy: string | undefined; actor: string; now: () => Date }): Promise<PromoteOutcome> {
  const plan = await planPromotion(ws, run, scopes);
  if (!plan.ok) return plan;
  fsyncPath(ws.tombstones); // the pre-images are durable before anything is touched
  const j: Journal = {
    version: 2,
    sandbox_id: run.sandboxId,
    action_id: run.result.action_id,
    child_action_ids: allIds(run.action).slice(1),
    diff_sha256: run.diffSha256,
    result_sha256: run.resultSha256,
    declaration_sha256: run.declarationSha256,
    cooldown_on_repeat: run.action.cooldownOnRepeat,
    verdict: a.verdict,
    ...(a.confirmedBy ? { confirmed_by: a.confirmedBy } : {}),
    token: randomBytes(6).toString('hex'),
    actor: a.actor,
    phase: 'applying',
    started_at: a.now().toISOString(),
    scopes: run.scopes ?? [],
    dirs: plan.dirs,
    ops: plan.ops,
  };
  if (!claimRecord(ws, run.sandboxId)) return fail('PROMOTE_ALREADY_DONE', `${run.sandboxId} has a promotion record already`);
  // Write-ahead: the in-flight marker, then the journal (fsync'd), then the tree.
  setInflight(ws, run.sandboxId, true);
  writeJournal(ws, j);
  try {
    // Strict: a path that is neither what the plan checked nor what we write was changed by someone
    // since: the promotion stops (PROMOTE_PATH_CHANGED) rather than overwrite it.
    await step(ws, scopes, j.ops, 'forward', j.token, { others: 'refuse' });
  } catch (e) {
    return abort(ws, scopes, j, { ok: false, problems: [stepProblem(e, 'PROMOTE_APPLY_FAILED', 'applying stopped at')] });
  }
  // The audit record is the commit point: recovery rolls forward only when it exists.
  const rec = audit(ws, { type: 'promoted', action_id: j.action_id, sandbox_id: j.sandbox_id, actor: j.actor, detail: auditDetail(j, a.confirmedBy ? { confirmed_by: a.confirmedBy } : {}) });
  if (!rec.ok) return abort(ws, scopes, j, rec);
  testPoint('after_commit_record');
  j.phase = 'applied';
  j.applied_at = a.now().toISOString();
  j.audit = { promoted: rec.record.seq };
  writeJournal(ws, j);
  await removeStaging(scopes, j.ops, [j.token]);
  setInflight(ws, j.sandbox_id, false);
  return { ok: true, status: 'promoted', journal: j };
}

/**
 * Undoes a failed apply (old state) and records the attempt as aborted. A swap inside the scope can
 * make one undo attempt fail too: it is tried a few times; if it still fails, the promotion stays
 * in flight for `airlock recover` (nothing else is applied in this workspace until then).
 */
async function abort(ws: Workspace, scopes: Scopes, j: Journal, why: CommitFailure): Promise<CommitFailure> {
  let rep: StepReport;
  for (let attempt = 1; ; attempt++) {
    try {
      // A folder someone else filled meanwhile (e.g. made where a file was being added) is left in
      // place and reported, not a reason to stay in flight for good.
      rep = await step(ws, scopes, j.ops, 'backward', `${j.token}u`, { tolerateNonEmpty: true, others: 'leave' });
      break;
    } catch (e) {
      if (attempt < 5) {
        await new Promise((r) => setTimeout(r, 20 * attempt));
        continue;
      }
      why.problems.push({ code: 'COMMIT_INTERRUPTED', message: `undoing the partial promotion failed too (${(e as Error).message}): run \`airlock recover\`` });
      return why;
    }
  }
  await removeStaging(scopes, j.ops, [j.token, `${j.token}u`]);
  j.phase = 'aborted';
  writeJournal(ws, j);
  // Recorded (best effort: the tree is already back in its old state) so the log tells which state it is in.
  audit(ws, { type: 'promotion_aborted', action_id: j.action_id, sandbox_id: j.sandbox_id, actor: j.actor, detail: auditDetail(j, { outcome: 'old_state', problems: why.problems.slice(0, 5), ...(rep.unexpected.length > 0 ? { unexpected: rep.unexpected } : {}), ...(rep.keptDirs.length > 0 ? { dirs_kept: rep.keptDirs } : {}) }) });
  setInflight(ws, j.sandbox_id, false);
  return why;
}

/**
 * A FORCE_ROLLBACK verdict needs no person: every live promotion of the same action (by action id,
 * composites by any of their ids) is rolled back without --force. A touched file that changed
 * since is not overwritten: that rollback is refused with ROLLBACK_CONFLICT for a person to decide.
 */
export function forceRollback(ws: Workspace, run: LoadedRun, now: () => Date): Promise<PromoteOutcome> {
  const ids = new Set(allIds(run.action));
  return withCommitLock(ws, async (): Promise<PromoteOutcome> => {
    const busy = inflightIds(ws);
    if (busy.length > 0) return fail('COMMIT_INTERRUPTED', `interrupted promotion or rollback of ${busy.join(', ')}: run \`airlock recover\` first`);
    const rolledBack: { sandboxId: string; outcome: RollbackOutcome }[] = [];
    for (const id of allRecordIds(ws)) {
      const j = readJournal(ws, id);
      if (!j || j.phase !== 'applied' || !(ids.has(j.action_id) || j.child_action_ids.some((c) => ids.has(c)))) continue;
      rolledBack.push({ sandboxId: id, outcome: await rollbackLocked(ws, id, { actor: 'policy', now, trigger: { trigger: 'FORCE_ROLLBACK', verdict_sandbox_id: run.sandboxId, verdict_diff_sha256: run.diffSha256 } }) });
    }
    return { ok: true, status: 'force_rolled_back', rolledBack };
  });
}
