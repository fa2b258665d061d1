import { sign, type KeyObject } from 'node:crypto';
import * as z from 'zod';
import type { Problem } from '../base/problem.js';
import type { Policy } from '../policy/policy.js';
import { keyId } from './keys.js';
import { checkOperatorSignature, readSignature } from './signature.js';
import { toolSha256 } from './utp-call.js';

/**
 * An operator's signature over a UTP tool registration (`airlock tools add --operator NAME`). The
 * store is shared with every client, which writes its call cards there, so a tool row says nothing
 * by itself: a worker serves a tool only when an operator its own policy.yaml trusts signed the row
 * exactly as it reads it (description, parameters, subject, after_execution and options, so
 * `approval.required`, the runner, the limits and the declared effects). The signature is kept in
 * the row's `signature` column as JSON.
 */
const registrationSchema = z.strictObject({
  alg: z.literal('ed25519'),
  operator: z.string().min(1),
  public_key: z.string(),
  tool_sha256: z.string().regex(/^[0-9a-f]{64}$/),
  signed_utc: z.string().refine((s) => Number.isFinite(Date.parse(s)), 'an ISO 8601 time'),
  signature: z.string(),
});
type Registration = z.infer<typeof registrationSchema>;

export const registrationRules = [
  { code: 'UTPS_TOOL_UNSIGNED', spec: 'Airlock: a worker serves a tool only when an operator signed its registration.', fix: 'Register it with `airlock tools add ... --operator NAME`, or read the row and sign it as it stands with `airlock tools sign NAME --project P --operator NAME` (the operator\'s key in the worker\'s policy.yaml: `airlock keygen`).' },
  { code: 'UTPS_TOOL_SIGNATURE', spec: 'Airlock: the registration\'s signature is an Ed25519 signature by the named operator over the row.', fix: 'Register the tool again with `airlock tools add --operator NAME`; the stored signature is damaged or forged.' },
  { code: 'UTPS_TOOL_UNTRUSTED_KEY', spec: 'Airlock: the signing key belongs to an operator the worker\'s policy.yaml lists.', fix: 'Add the operator to the worker\'s policy (`airlock keygen --operator NAME`), or have a listed operator register the tool.' },
  { code: 'UTPS_TOOL_TAMPERED', spec: 'Airlock: the row is unchanged since it was signed (sha256 of its canonical JSON).', fix: 'Register the tool again: a worker runs only what an operator registered.' },
  { code: 'UTPS_TOOL_ROLLBACK', spec: 'Airlock: a worker never goes back to a registration signed before one a worker of its workspace has already served, or before the time its policy.yaml pins for the tool (`tool_registrations`).', fix: 'Register the tool again (`airlock tools add --operator NAME`): to go back to an older form of a tool, sign it anew.' },
] as const;

/** A tool registration as signed: the fields its sha256 covers, and the signature (the store's `tools` row has this shape). */
export type SignedTool = Parameters<typeof toolSha256>[0] & { signature?: string | null };

const message = (r: Pick<Registration, 'tool_sha256' | 'signed_utc' | 'operator'>): Buffer =>
  Buffer.from(`airlock-utp-tool-v1\n${r.tool_sha256}\n${r.signed_utc}\n${r.operator}\n`);

/** The `signature` column for `tool`, signed with the operator's private key. */
export function signRegistration(args: { tool: SignedTool; operator: string; key: KeyObject; publicKey: string; now: Date }): string {
  const base = { tool_sha256: toolSha256(args.tool), signed_utc: args.now.toISOString(), operator: args.operator };
  const r: Registration = { alg: 'ed25519', operator: args.operator, public_key: args.publicKey, tool_sha256: base.tool_sha256, signed_utc: base.signed_utc, signature: sign(null, message(base), args.key).toString('base64') };
  return JSON.stringify(r);
}

export interface Registrant {
  operator: string;
  keyId: string;
  /** When the operator signed (ms since the epoch): a worker refuses to go back to an older one. */
  signedAt: number;
}

/** Who registered `tool`, checked against the policy's operator keys; or why the row is not to be served. */
export function verifyRegistration(tool: SignedTool, policy: Policy): { ok: true; value: Registrant } | { ok: false; problems: Problem[] } {
  const no = (code: string, message: string) => ({ ok: false as const, problems: [{ code, message, path: 'signature' }] });
  if (tool.signature === null || tool.signature === undefined) {
    return no('UTPS_TOOL_UNSIGNED', `${tool.project_id}/${tool.tool_name} is not signed by an operator: register it with \`airlock tools add ... --operator NAME\`, or read it and sign it as it stands with \`airlock tools sign ${tool.tool_name} --project ${tool.project_id} --operator NAME\``);
  }
  const read = readSignature(registrationSchema, tool.signature);
  if ('error' in read) return no('UTPS_TOOL_SIGNATURE', `the signature of ${tool.project_id}/${tool.tool_name} is not a valid registration signature: ${read.error}`);
  const r = read.value;
  const bad = checkOperatorSignature(r, message(r), policy, { untrusted: 'UTPS_TOOL_UNTRUSTED_KEY', invalid: 'UTPS_TOOL_SIGNATURE' }, `${tool.project_id}/${tool.tool_name}`);
  if (bad) return { ok: false, problems: [{ ...bad, path: 'signature' }] };
  let sha: string;
  try {
    sha = toolSha256(tool);
  } catch (e) {
    // A row nested past the stack (a client can write one): refused alone, never a throw that stops every row's refresh.
    return no('UTPS_TOOL_TAMPERED', `${tool.project_id}/${tool.tool_name} cannot be hashed as it stands (${(e as Error).message}): it is not what ${r.operator} signed`);
  }
  if (sha !== r.tool_sha256) {
    return no('UTPS_TOOL_TAMPERED', `${tool.project_id}/${tool.tool_name} changed after ${r.operator} signed it (its sha256 differs from the signed one)`);
  }
  const signedAt = Date.parse(r.signed_utc);
  const pin = policy.tool_registrations[`${tool.project_id}/${tool.tool_name}`];
  if (pin !== undefined && signedAt < Date.parse(pin)) {
    return no('UTPS_TOOL_ROLLBACK', `${tool.project_id}/${tool.tool_name} was signed at ${r.signed_utc}, before ${pin}, the oldest registration policy.yaml lets it have (tool_registrations): an older registration was put back in the store`);
  }
  return { ok: true, value: { operator: r.operator, keyId: keyId(r.public_key), signedAt } };
}

/** The policy.yaml line that pins `tool`'s registration signed at `signedAt` (tool_registrations). */
export const pinLine = (tool: Pick<SignedTool, 'project_id' | 'tool_name'>, signedAt: number): string =>
  `tool_registrations: { "${tool.project_id}/${tool.tool_name}": "${new Date(signedAt).toISOString()}" }`;
