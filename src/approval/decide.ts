import type { Action } from '../action/action.js';
import type { Problem } from '../base/problem.js';
import type { Policy } from '../policy/policy.js';
import { keyId } from './keys.js';
import { verifyApproval } from './signature.js';
import { verifyRegistration, type SignedTool } from './tool-registration.js';

export { keyId };

/**
 * How a door says an execution was approved, and the host's check of it. Every door hands its
 * evidence to the host core, which checks it against the policy the same way for all:
 *
 * - `signature`: an operator's Ed25519 signature over the exact bytes of the request (`airlock
 *   approve`; the gate). The key must be one the policy lists; the signature must be fresh.
 * - `policy-rule`: the policy approves this kind of action alone (`approval.auto_approve.*`).
 * - `operator`: a person at a terminal ran it themselves (`airlock run`, `airlock exec`), or signed
 *   it through another door (a UTP approval, checked by that door's own signature before).
 * - `tool`: a UTP tool whose options need no person, registered by an operator: the registration's
 *   signature (`airlock tools add --operator`) must verify with a key the policy lists.
 *
 * The result names the decision's source for the run record and the audit log: a key id or the
 * policy rule, never "approved" alone.
 */
export type ApprovalEvidence =
  /** `workspaceBound`: a request's approval, which must name the workspace it runs in (a UTP call's names its worker's approval id instead). */
  | { kind: 'signature'; sigText: string | null; bytes: Buffer; requestId: string; approvedBy: string; workspaceBound?: true }
  | { kind: 'policy-rule' }
  | { kind: 'operator'; operator: string; how: 'terminal' | 'signed-utp-approval'; keyId?: string }
  | { kind: 'tool'; record: SignedTool };

export interface ApprovalDecision {
  /** `key:<operator>:<key id>`, `policy:<rule>`, `terminal:<user>`, `tool:<project>/<tool>@key:<operator>:<key id>`. */
  source: string;
  actor: string;
}

export function decideApproval(e: ApprovalEvidence, policy: Policy, action: Action, now: Date, workspace: () => string | null = () => null): { ok: true; decision: ApprovalDecision } | { ok: false; problems: Problem[] } {
  switch (e.kind) {
    case 'signature': {
      const problems = verifyApproval({ sigText: e.sigText, bytes: e.bytes, requestId: e.requestId, approvedBy: e.approvedBy, policy, now, ...(e.workspaceBound ? { workspace: workspace() } : {}) });
      if (problems.length > 0) return { ok: false, problems };
      const op = policy.operators.find((o) => o.name === e.approvedBy);
      return { ok: true, decision: { source: `key:${e.approvedBy}:${op ? keyId(op.public_key) : '?'}`, actor: e.approvedBy } };
    }
    case 'policy-rule':
      if (policy.approval.auto_approve.monty_without_inputs && action.lane === 'monty' && action.inputs.length === 0) {
        return { ok: true, decision: { source: 'policy:approval.auto_approve.monty_without_inputs', actor: 'policy' } };
      }
      return { ok: false, problems: [{ code: 'APPROVAL_UNSIGNED', message: 'no operator signature, and no policy rule approves this action alone (approval.auto_approve covers only Monty-lane requests without inputs, when on)' }] };
    case 'operator':
      return { ok: true, decision: { source: e.how === 'terminal' ? `terminal:${e.operator}` : `key:${e.operator}:${e.keyId ?? '?'}`, actor: e.operator } };
    case 'tool': {
      // A registration approves only the runs of a tool that needs no person: one whose signed
      // options ask for a person needs that person's signed approval of the call (kind `signature`).
      const o = e.record.options as { approval?: { required?: unknown }; retired?: unknown } | null | undefined;
      if (o?.retired !== undefined) return { ok: false, problems: [{ code: 'UTPS_TOOL_RETIRED', message: `${e.record.project_id}/${e.record.tool_name} is retired: its registration approves no run` }] };
      const asks = o?.approval?.required;
      if (asks !== undefined && asks !== false) {
        return { ok: false, problems: [{ code: 'APPROVAL_UNSIGNED', message: `${e.record.project_id}/${e.record.tool_name} needs a person's approval of each call (options.approval.required): its registration alone does not approve a run` }] };
      }
      const r = verifyRegistration(e.record, policy);
      if (!r.ok) return { ok: false, problems: r.problems };
      const t = e.record;
      return { ok: true, decision: { source: `tool:${t.project_id}/${t.tool_name}@key:${r.value.operator}:${r.value.keyId}`, actor: `tool ${t.tool_name}` } };
    }
  }
}
