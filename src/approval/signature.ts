import { createHash, sign, verify, type KeyObject } from 'node:crypto';
import * as z from 'zod';
import type { Problem } from '../base/problem.js';
import type { Policy } from '../policy/policy.js';
import { decodePublicKey } from './keys.js';

/**
 * A person's approval of one Tool Request: an Ed25519 signature over the exact bytes of the approved
 * file (its front matter carries every input's sha256), kept beside it as `<file>.sig`. The TR itself
 * stays a plain ThreeGate document.
 */
export const approvalSchema = z.strictObject({
  alg: z.literal('ed25519'),
  operator: z.string().min(1),
  public_key: z.string(),
  request_id: z.string(),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  signed_utc: z.string(),
  signature: z.string(),
  /** The workspace a request's approval lets it run in (workspaceId); absent in a UTP call's approval, whose signed call names its own worker's approval id. */
  workspace: z.string().optional(),
});
export type Approval = z.infer<typeof approvalSchema>;

export const approvalRules = [
  { code: 'APPROVAL_UNSIGNED', spec: 'An unsigned request with approval strings is not approved.', fix: 'Have an operator run `airlock approve FILE --operator NAME`.' },
  { code: 'APPROVAL_SIGNATURE_INVALID', spec: 'The approval is an Ed25519 signature by the named key over the approved bytes.', fix: 'Approve the request again; the .sig file is damaged or forged.' },
  { code: 'APPROVAL_UNTRUSTED_KEY', spec: 'The signing key belongs to an operator the policy trusts.', fix: 'Add the operator with `airlock keygen`, or have a listed operator approve.' },
  { code: 'APPROVAL_TAMPERED', spec: 'The request is unchanged since approval (sha256 of its bytes, inputs\' hashes included).', fix: 'Approve the changed request again: what runs is exactly what a person approved.' },
  { code: 'APPROVAL_INPUT_CHANGED', spec: 'Airlock: an input is stored for the run from the bytes whose sha256 is the one the operator was shown, read once without following a link; an input changed or replaced by a link after the summary is refused, nothing is signed.', fix: 'Approve the request again (its draft folder is the agent\'s: look at who changed the input).' },
  { code: 'APPROVAL_OTHER_WORKSPACE', spec: 'Airlock: an approval of a request names the workspace it was given in (its workspace-id) and lets the request run there only; one given in another workspace that trusts the same key, or signed before approvals named their workspace, does not approve it here.', fix: 'Approve the request in this workspace: `airlock approve FILE --operator NAME --workspace DIR`.' },
  { code: 'APPROVAL_OPERATOR_MISMATCH', spec: 'approved_by names the operator who signed.', fix: 'Approve with `airlock approve`, which fills approved_by itself.' },
  { code: 'APPROVAL_EXPIRED', spec: 'An approval expires after the policy\'s approval.expiry_hours.', fix: 'Approve the request again.' },
  { code: 'APPROVAL_REPLAY', spec: 'A request_id runs at most once (the replay ledger).', fix: 'Draft a new request with a new request_id.' },
] as const;

const message = (a: Pick<Approval, 'request_id' | 'sha256' | 'signed_utc' | 'operator' | 'workspace'>): Buffer =>
  Buffer.from(a.workspace === undefined ? `airlock-approval-v1\n${a.request_id}\n${a.sha256}\n${a.signed_utc}\n${a.operator}\n` : `airlock-approval-v2\n${a.request_id}\n${a.sha256}\n${a.signed_utc}\n${a.operator}\n${a.workspace}\n`);

export const sha256Of = (bytes: Buffer): string => createHash('sha256').update(bytes).digest('hex');

export function signApproval(args: { requestId: string; bytes: Buffer; operator: string; key: KeyObject; publicKey: string; now: Date; workspace?: string }): Approval {
  const base = { request_id: args.requestId, sha256: sha256Of(args.bytes), signed_utc: args.now.toISOString(), operator: args.operator, ...(args.workspace !== undefined ? { workspace: args.workspace } : {}) };
  return { alg: 'ed25519', public_key: args.publicKey, ...base, signature: sign(null, message(base), args.key).toString('base64') };
}

/** A signature's JSON text read into its schema, or why it cannot be. */
export function readSignature<T>(schema: z.ZodType<T>, text: string): { value: T } | { error: string } {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    return { error: (e as Error).message };
  }
  const r = schema.safeParse(json);
  return r.success ? { value: r.data } : { error: r.error.issues[0]?.message ?? 'not the expected shape' };
}

/**
 * The key check every operator signature shares: the policy lists the key under the operator named
 * in the signature, and the signature over `message` verifies with it.
 */
export function checkOperatorSignature(
  s: { operator: string; public_key: string; signature: string },
  msg: Buffer,
  policy: Policy,
  codes: { untrusted: string; invalid: string },
  what: string,
): Problem | undefined {
  const trusted = policy.operators.find((o) => o.public_key === s.public_key);
  if (!trusted) return { code: codes.untrusted, message: `${what} was signed by a key the policy does not list (operator ${s.operator})` };
  if (trusted.name !== s.operator) return { code: codes.untrusted, message: `the key belongs to operator ${trusted.name}, not ${s.operator}` };
  return verifiedOnce(s.public_key, s.signature, msg) ? undefined : { code: codes.invalid, message: `the signature does not verify with ${trusted.name}'s key` };
}

/**
 * Ed25519 verification, remembered: a worker checks the same tool registration for every call of
 * the tool, and a verification costs far more than the run of a small Monty program. The outcome
 * depends only on the key, the signature and the message, which together are the cache key.
 */
const verified = new Map<string, boolean>();
const VERIFIED_MAX = 1024;

function verifiedOnce(publicKey: string, signature: string, msg: Buffer): boolean {
  const key = `${publicKey}\n${signature}\n${msg.toString('base64')}`;
  const hit = verified.get(key);
  if (hit !== undefined) return hit;
  let valid: boolean;
  try {
    valid = verify(null, msg, decodePublicKey(publicKey), Buffer.from(signature, 'base64'));
  } catch {
    valid = false;
  }
  if (verified.size >= VERIFIED_MAX) verified.clear();
  verified.set(key, valid);
  return valid;
}

/**
 * Verifies an approval for the file bytes against the policy (trusted keys, expiry) and, with
 * `workspace`, that it was given for that workspace (a request's; null: the workspace's id is
 * unreadable). The replay ledger is checked by the caller, which owns the store.
 */
export function verifyApproval(args: { sigText: string | null; bytes: Buffer; requestId: string; approvedBy: string; policy: Policy; now: Date; workspace?: string | null }): Problem[] {
  if (args.sigText === null) return [{ code: 'APPROVAL_UNSIGNED', message: 'no operator signature (.sig) beside the request: approval strings alone do not approve' }];
  const read = readSignature(approvalSchema, args.sigText);
  if ('error' in read) return [{ code: 'APPROVAL_SIGNATURE_INVALID', message: `the .sig file is not a valid approval: ${read.error}` }];
  const parsed = read.value;
  const bad = checkOperatorSignature(parsed, message(parsed), args.policy, { untrusted: 'APPROVAL_UNTRUSTED_KEY', invalid: 'APPROVAL_SIGNATURE_INVALID' }, 'the request');
  if (bad) return [bad];
  const problems: Problem[] = [];
  if (parsed.request_id !== args.requestId) problems.push({ code: 'APPROVAL_TAMPERED', message: `the signature approves ${parsed.request_id}, not ${args.requestId}` });
  if (sha256Of(args.bytes) !== parsed.sha256) problems.push({ code: 'APPROVAL_TAMPERED', message: 'the request changed after it was approved (its sha256 differs from the signed one)' });
  if (args.workspace !== undefined && (args.workspace === null || parsed.workspace !== args.workspace)) {
    const given = parsed.workspace === undefined ? 'names no workspace (signed before approvals named theirs)' : `was given in workspace ${parsed.workspace}`;
    problems.push({ code: 'APPROVAL_OTHER_WORKSPACE', message: `the approval ${given}; this workspace is ${args.workspace ?? '(its workspace-id is damaged)'}: approve the request here` });
  }
  if (args.approvedBy !== parsed.operator) problems.push({ code: 'APPROVAL_OPERATOR_MISMATCH', message: `approved_by is ${args.approvedBy} but ${parsed.operator} signed` });
  const age = args.now.getTime() - Date.parse(parsed.signed_utc);
  if (!(age <= args.policy.approval.expiry_hours * 3600_000)) {
    problems.push({ code: 'APPROVAL_EXPIRED', message: `approved ${parsed.signed_utc}; approvals expire after ${args.policy.approval.expiry_hours} h (rule approval.expiry_hours)` });
  }
  if (age < -5 * 60_000) problems.push({ code: 'APPROVAL_EXPIRED', message: `the approval is dated in the future (${parsed.signed_utc})` });
  return problems;
}
