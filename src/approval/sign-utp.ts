import type { Problem } from '../base/problem.js';
import type { Policy } from '../policy/policy.js';
import { keyId } from './decide.js';
import { loadOperatorKey } from './keys.js';
import { signApproval, verifyApproval } from './signature.js';
import { callOfSummary, canonical, utpCallBytes, type UtpCallApproval } from './utp-call.js';

/**
 * An operator's approval of one pending UTP call (`airlock approvals approve ID --operator NAME`):
 * the call the row asks about, re-checked against the row's own columns, signed with the
 * operator's private key, and verified against the policy before it is stored, so a key the
 * workers will not trust is reported here and not as a refused call later.
 */
export interface UtpApprovalRow {
  id: string;
  agent_turn_id: string;
  tool_call_id: string;
  project_id: string;
  tool_name: string;
  summary: Record<string, unknown>;
}

export function signUtpApproval(args: { row: UtpApprovalRow; operator: string; keyDir: string; policy: Policy; now: Date }): { ok: true; signature: string; call: UtpCallApproval; keyId: string } | { ok: false; problems: Problem[] } {
  const { row } = args;
  const call = callOfSummary(row.summary);
  if (!call) return { ok: false, problems: [{ code: 'APPROVAL_CALL_UNKNOWN', message: `${row.id} does not carry the call it approves (made by an Airlock before signed UTP approvals): reject it, or let it expire, and have the agent call again` }] };
  const agrees = call.approval_id === row.id && call.agent_turn_id === row.agent_turn_id && call.tool_call_id === row.tool_call_id && call.project_id === row.project_id && call.tool_name === row.tool_name;
  if (!agrees) return { ok: false, problems: [{ code: 'APPROVAL_CALL_UNKNOWN', message: `${row.id}: the call in the row does not match the row's own ids (the row was changed in the store); nothing was signed` }] };
  // The row's display copies must say what the call says: an operator shown other arguments than
  // the ones signed would approve what they never saw.
  const shown = (['arguments', 'agent_id', 'subject'] as const).filter((k) => k in row.summary && canonical(row.summary[k]) !== canonical(call[k]));
  if (shown.length > 0) {
    return { ok: false, problems: [{ code: 'APPROVAL_CALL_UNKNOWN', message: `${row.id}: the row's ${shown.join(', ')} differ from the call it approves (the row was changed in the store); nothing was signed: reject it` }] };
  }
  const key = loadOperatorKey(args.operator, args.keyDir);
  if ('error' in key) return { ok: false, problems: [{ code: 'APPROVAL_UNTRUSTED_KEY', message: key.error }] };
  const bytes = utpCallBytes(call);
  const signed = signApproval({ requestId: row.id, bytes, operator: args.operator, key: key.key, publicKey: key.publicKey, now: args.now });
  const signature = JSON.stringify(signed);
  const problems = verifyApproval({ sigText: signature, bytes, requestId: row.id, approvedBy: args.operator, policy: args.policy, now: args.now });
  if (problems.length > 0) return { ok: false, problems };
  return { ok: true, signature, call, keyId: keyId(key.publicKey) };
}
