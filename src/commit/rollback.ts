import { randomBytes } from 'node:crypto';
import type { Workspace } from '../workspace/workspace.js';
import { removeStaging, step, type StepReport } from './apply.js';
import { currentState, sameState, type CurrentState } from './fsops.js';
import { loadPolicy, validSandboxId } from './load.js';
import { missingTombstones } from './plan.js';
import { pathProblem, Scopes, stepProblem } from './scopes.js';
import { audit, auditDetail, inflightIds, readJournal, setInflight, withCommitLock, writeCooldown, writeJournal } from './store.js';
import { fail, type CommitFailure, type CommitResult, type Journal } from './types.js';

export interface RollbackOptions {
  force?: boolean;
  /** Who asked: an operator name, or `policy` for a FORCE_ROLLBACK verdict. */
  actor?: string;
  now?: () => Date;
  /** Why, for the audit record (e.g. the FORCE_ROLLBACK verdict that triggered it). */
  trigger?: Record<string, unknown>;
}

export type RollbackOutcome = CommitResult<{ journal: Journal; report: StepReport }>;

/** `airlock rollback SANDBOX_ID [--force]`: restores exactly what the promotion touched. */
export function rollback(ws: Workspace, sandboxId: string, opts: RollbackOptions = {}): Promise<RollbackOutcome> {
  return withCommitLock(ws, async () => {
    const busy = inflightIds(ws);
    if (busy.length > 0) return fail('COMMIT_INTERRUPTED', `interrupted promotion or rollback of ${busy.join(', ')}: run \`airlock recover\` first`);
    return rollbackLocked(ws, sandboxId, opts);
  });
}

/** The scope agents of a journal's scopes; with `pinned`, every directory must still be the inode the promotion recorded. */
export async function journalScopes(ws: Workspace, j: Journal, pinned: boolean): Promise<{ ok: true; scopes: Scopes } | CommitFailure> {
  if (!Array.isArray(j.scopes)) return fail('COMMIT_NO_SCOPE_RECORD', `the promotion record of ${j.sandbox_id} predates scope records (journal version ${j.version}): roll it back by hand from the tombstones`);
  const pol = loadPolicy(ws);
  if (!pol.ok) return pol;
  return Scopes.open(j.scopes, pol.policy.scope_roots, pinned ? j.dirs : {});
}

/** The rollback itself; the caller holds the commit lock. */
export async function rollbackLocked(ws: Workspace, sandboxId: string, opts: RollbackOptions): Promise<RollbackOutcome> {
  const now = opts.now ?? (() => new Date());
  // The id names a folder of the workspace: `../` would read a journal from anywhere, and act on it.
  if (!validSandboxId(sandboxId)) return fail('COMMIT_BAD_ID', `${JSON.stringify(sandboxId.slice(0, 80))} is not a sandbox id`);
  const j = readJournal(ws, sandboxId);
  if (!j || j.phase === 'aborted') return fail('ROLLBACK_NOT_PROMOTED', `${sandboxId} was never promoted${j ? ' (its promotion was aborted; the old state stayed)' : ''}`);
  if (j.phase === 'rolled_back') return fail('ROLLBACK_ALREADY_DONE', `${sandboxId} was rolled back at ${j.rolled_back_at}`);
  if (j.phase !== 'applied') return fail('COMMIT_INTERRUPTED', `${sandboxId} is ${j.phase}: run \`airlock recover\``);
  // --force rolls back over later edits, also where a directory was replaced by another one; a link
  // or a mount point on the way is refused whatever the flag says.
  const opened = await journalScopes(ws, j, opts.force !== true);
  if (!opened.ok) return opened;
  const scopes = opened.scopes;
  try {
    return await rollbackWith(ws, scopes, j, opts, now);
  } finally {
    scopes.close();
  }
}

async function rollbackWith(ws: Workspace, scopes: Scopes, j: Journal, opts: RollbackOptions, now: () => Date): Promise<RollbackOutcome> {
  // A touched file that changed since the promotion: refuse, naming it, unless --force.
  const conflicts: string[] = [];
  for (const op of j.ops) {
    let cur: CurrentState;
    try {
      cur = await currentState(scopes, op.path);
    } catch (e) {
      const p = pathProblem(e, op.path);
      if (p.code !== 'PROMOTE_PATH_CHANGED') return { ok: false, problems: [p] };
      conflicts.push(`${op.path} changed since the promotion (a directory on its way was replaced)`);
      continue;
    }
    if (!sameState(cur, op.after)) {
      const now2 = cur === null ? 'absent' : cur.type === 'other' ? `a ${cur.kind}` : cur.type === 'dir' ? `a directory (mode ${cur.mode.toString(8)})` : `sha256 ${cur.sha256} mode ${cur.mode.toString(8)}`;
      conflicts.push(`${op.path} changed since the promotion (now ${now2})`);
    }
  }
  if (conflicts.length > 0 && !opts.force) {
    return { ok: false, problems: conflicts.map((m) => ({ code: 'ROLLBACK_CONFLICT', message: `${m}; rerun with --force to roll back anyway (the newer version is kept in the tombstones)`, path: m.split(' changed')[0] })) };
  }
  const missing = missingTombstones(ws, j.ops);
  if (missing.length > 0) return { ok: false, problems: missing.map((p) => ({ code: 'ROLLBACK_CONTENT_MISSING', message: `the pre-image of ${p} is missing from ${ws.tombstones} or damaged; nothing was changed`, path: p })) };

  j.phase = 'rolling_back';
  j.rollback_token = randomBytes(6).toString('hex');
  j.rollback_actor = opts.actor ?? 'operator';
  if (opts.force) j.rollback_force = true;
  setInflight(ws, j.sandbox_id, true);
  writeJournal(ws, j);
  let report: StepReport;
  try {
    // Without --force, a path the owner changes while the rollback runs (after the check above) is
    // left as the owner made it and reported, never overwritten, and a folder the promotion added
    // that holds such a path (or a new file of the owner's) is kept: the check holds for the whole run.
    report = await step(ws, scopes, j.ops, 'backward', j.rollback_token, { tolerateNonEmpty: true, others: opts.force ? 'overwrite' : 'leave' });
  } catch (e) {
    // The journal stays `rolling_back` and in flight: `airlock recover` finishes it.
    const p = stepProblem(e, 'ROLLBACK_FAILED', 'rollback stopped at');
    return { ok: false, problems: [{ ...p, message: `${p.message}; fix it and run \`airlock recover\` to finish the rollback` }] };
  }
  return finishRollback(ws, scopes, j, report, now(), { forced: opts.force === true, conflicts, ...(opts.trigger ?? {}) });
}

/** After the tree is back: audit, record, cooldown. Shared with recovery. */
export async function finishRollback(ws: Workspace, scopes: Scopes | null, j: Journal, report: StepReport, at: Date, extra: Record<string, unknown>): Promise<RollbackOutcome> {
  if (scopes) await removeStaging(scopes, j.ops, [j.token, j.rollback_token]);
  const left = report.unexpected.filter((u) => u.left).map((u) => u.path);
  j.forced = [...(j.forced ?? []), ...report.unexpected.filter((u) => !u.left).map((u) => ({ path: u.path, sha256: u.kept, type: u.kept ? 'file' : 'other' })), ...report.keptDirs.map((p) => ({ path: p, sha256: null, type: 'dir_kept' }))];
  const rec = audit(ws, {
    type: 'rolled_back',
    action_id: j.action_id,
    sandbox_id: j.sandbox_id,
    actor: j.rollback_actor ?? 'operator',
    detail: auditDetail(j, { ...extra, newer_versions_kept: j.forced.filter((f) => f.sha256).map((f) => ({ path: f.path, sha256: f.sha256 })), dirs_kept: report.keptDirs, ...(left.length > 0 ? { changed_meanwhile_left: left } : {}), ...(report.notRestored.length > 0 ? { not_restored: report.notRestored } : {}), ...(report.leftUndone.length > 0 ? { left_undone: report.leftUndone } : {}) }),
  });
  // The tree is already back: a failed audit leaves the journal in flight for `airlock recover` to record.
  if (!rec.ok) return rec;
  j.phase = 'rolled_back';
  j.rolled_back_at = at.toISOString();
  j.audit = { ...(j.audit ?? {}), rolled_back: rec.record.seq };
  writeJournal(ws, j);
  writeCooldown(ws, { declaration_sha256: j.declaration_sha256, rolled_back_at: j.rolled_back_at, sandbox_id: j.sandbox_id, action_id: j.action_id, cooldown_on_repeat: j.cooldown_on_repeat });
  setInflight(ws, j.sandbox_id, false);
  return { ok: true, journal: j, report };
}
