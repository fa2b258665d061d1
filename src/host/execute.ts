import type { Action } from '../action/action.js';
import { actionsOf } from '../action/declaration.js';
import { decideApproval, type ApprovalDecision, type ApprovalEvidence } from '../approval/decide.js';
import { openAuditLog } from '../audit/index.js';
import type { Problem } from '../base/problem.js';
import { evaluatePolicy } from '../policy/evaluate.js';
import { loadPolicy } from '../policy/load.js';
import { runComposite } from '../pipeline/composite.js';
import { runAction, type RunOutcome } from '../pipeline/run.js';
import type { RunEvent } from '../sandbox/types.js';
import { workspaceId, type Workspace } from '../workspace/workspace.js';
import { auditKilledRunsOnce } from './killed-runs.js';
import { sha256File, writeRunRecord, type Door, type RunRecord } from './record.js';

/**
 * The one path every door takes (DESIGN.md): policy -> approval -> (the door's own at-most-once
 * guard) -> lane -> judge -> output screen -> run record -> audit. A door only translates its
 * document into an Action and its approval into evidence, then renders what comes back. A missing
 * or invalid policy refuses, everywhere; every execution leaves a run record and one `executed`
 * audit record with its door, its decision's source, its sandbox id, its verdict and its result's
 * hash; every refusal leaves a `refused` record.
 */
export interface ExecuteRequest {
  action: Action;
  door: Door;
  approval: ApprovalEvidence;
  /** The action's inputs by name (already hash-checked by the door that staged them). */
  inputsDir: string;
  /** The request's language (a Tool Request's), for the policy's `languages` rule. */
  language?: string;
  /** Aborting it ends the run (the sandbox is killed); the run is recorded as interrupted. */
  signal?: AbortSignal;
  /** Progress and live output, for a person watching. */
  onEvent?: (e: RunEvent) => void;
  /**
   * Who asked, as the door knows it (UTP: the agent, its turn and call, the project and tool, the
   * approval's id): kept in the `executed` and `refused` audit records and in the run record, so a
   * run can be traced to the call and the approval that made it.
   */
  caller?: Readonly<Record<string, string>>;
  /** A door's last word before anything runs (the gate's replay ledger): problems refuse the run. */
  beforeRun?: (decision: ApprovalDecision) => Problem[];
  now?: () => Date;
}

export type ExecuteOutcome =
  | { kind: 'refused'; stage: 'policy' | 'approval' | 'guard' | 'run'; problems: Problem[]; decision?: ApprovalDecision }
  | { kind: 'ran'; outcome: Extract<RunOutcome, { kind: 'ran' }>; record: RunRecord; decision: ApprovalDecision };

export async function execute(ws: Workspace, req: ExecuteRequest): Promise<ExecuteOutcome> {
  const now = req.now ?? (() => new Date());
  const audit = openAuditLog(ws.auditFile);
  const ids = { ...(req.action.source === 'tool-request' ? { request_id: req.action.id } : { action_id: req.action.id }) };
  const caller = req.caller ? { caller: { ...req.caller } } : {};
  const refuse = (stage: Extract<ExecuteOutcome, { kind: 'refused' }>['stage'], problems: Problem[], decision?: ApprovalDecision): ExecuteOutcome => {
    audit.append({ type: 'refused', ...ids, ...(decision ? { actor: decision.actor } : {}), detail: { door: req.door, stage, codes: [...new Set(problems.map((p) => p.code))], ...(decision ? { decision_source: decision.source } : {}), ...caller } });
    return { kind: 'refused', stage, problems, ...(decision ? { decision } : {}) };
  };

  // Runs of this workspace whose process was killed before now get their record first.
  auditKilledRunsOnce(ws, audit);
  const policy = loadPolicy(ws.policyFile);
  if (!policy.ok) return refuse('policy', policy.problems);
  // A composite is held to the policy through each of its steps as well as as a whole.
  const held: Problem[] = [];
  for (const a of actionsOf(req.action)) {
    const d = evaluatePolicy(policy.value, a, req.language);
    held.push(...d.problems.filter((p) => !held.some((h) => h.code === p.code && h.message === p.message)));
    if (d.confirmationRequired) req.action.confirmationRequired = a.confirmationRequired = true;
  }
  if (held.length > 0) return refuse('policy', held);
  const approved = decideApproval(req.approval, policy.value, req.action, now(), () => workspaceId(ws));
  if (!approved.ok) return refuse('approval', approved.problems);
  const decision = approved.decision;
  const guard = req.beforeRun?.(decision) ?? [];
  if (guard.length > 0) return refuse('guard', guard, decision);

  const startedAt = now().toISOString();
  const ctx = { workspace: ws, inputsDir: req.inputsDir, network: { ceiling: policy.value.network }, scopeRoots: policy.value.scope_roots, ...(req.signal ? { signal: req.signal } : {}), ...(req.onEvent ? { onEvent: req.onEvent } : {}) };
  const outcome = req.action.run.kind === 'steps' ? await runComposite(req.action, ctx) : await runAction(req.action, ctx);
  if (outcome.kind === 'rejected') return refuse('run', outcome.problems, decision);

  const sr = outcome.sandboxResult;
  const record: RunRecord = {
    version: 1,
    sandbox_id: outcome.sandboxId,
    door: req.door,
    action: req.action,
    decision,
    policy_sha256: sha256File(ws.policyFile),
    result_sha256: sha256File(outcome.sandboxResultFile),
    verdict: sr.verdict.recommended_action,
    status: sr.execution.status,
    started_at: startedAt,
    ended_at: now().toISOString(),
    ...(req.signal?.aborted ? { interrupted: true } : {}),
    ...caller,
  };
  // The audit record first: a process killed between the two leaves a run the audit log names and
  // whose folder has no record.json (shown as unfinished), never a finished run the log misses.
  audit.append({
    type: 'executed',
    ...ids,
    sandbox_id: outcome.sandboxId,
    actor: decision.actor,
    detail: { door: req.door, decision_source: decision.source, lane: req.action.lane, verdict: record.verdict, status: record.status, exit_code: sr.execution.exit_code, ...(record.interrupted ? { interrupted: true } : {}), result_sha256: record.result_sha256, policy_sha256: record.policy_sha256, ...caller },
  });
  writeRunRecord(outcome.runDir, record);
  return { kind: 'ran', outcome, record, decision };
}
