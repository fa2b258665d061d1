import { sign, verify, type KeyObject } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as z from 'zod';
import { decodePublicKey } from '../approval/keys.js';
import { writeFileAtomic } from '../audit/files.js';
import type { Problem } from '../base/problem.js';
import type { Policy } from '../policy/policy.js';
import type { LoadedRun } from './load.js';

/**
 * An operator's confirmation of a REQUIRE_CONFIRMATION verdict: an Ed25519 signature (same keys as
 * approval) over the sandbox id, the action id and the sha256 of the exact diff that will be
 * applied. Kept as WORKSPACE/runs/<sandbox_id>/confirmation.json. A different diff, another
 * sandbox, an untrusted key or an expired signature is no confirmation.
 */
export const confirmationSchema = z.strictObject({
  alg: z.literal('ed25519'),
  operator: z.string().min(1).max(64),
  public_key: z.string().max(100),
  sandbox_id: z.string().max(128),
  action_id: z.string().max(200),
  diff_sha256: z.string().regex(/^[0-9a-f]{64}$/),
  signed_utc: z.string().max(40),
  signature: z.string().max(200),
});
export type Confirmation = z.infer<typeof confirmationSchema>;

const message = (c: Omit<Confirmation, 'alg' | 'public_key' | 'signature'>): Buffer =>
  Buffer.from(`airlock-promotion-confirmation-v1\n${c.sandbox_id}\n${c.action_id}\n${c.diff_sha256}\n${c.signed_utc}\n${c.operator}\n`);

export const confirmationFile = (run: { runDir: string }): string => join(run.runDir, 'confirmation.json');

export function signConfirmation(run: LoadedRun, args: { operator: string; key: KeyObject; publicKey: string; now: Date }): Confirmation {
  const base = { operator: args.operator, sandbox_id: run.sandboxId, action_id: run.result.action_id, diff_sha256: run.diffSha256, signed_utc: args.now.toISOString() };
  return { alg: 'ed25519', public_key: args.publicKey, ...base, signature: sign(null, message(base), args.key).toString('base64') };
}

export function storeConfirmation(run: LoadedRun, c: Confirmation): string {
  const f = confirmationFile(run);
  writeFileAtomic(f, JSON.stringify(c, null, 2) + '\n');
  return f;
}

/** The stored confirmation of this run, checked against the policy; the operator's name when valid. */
export function verifyConfirmation(run: LoadedRun, policy: Policy, now: Date): { operator: string } | { problems: Problem[] } {
  const f = confirmationFile(run);
  if (!existsSync(f)) return { problems: [{ code: 'PROMOTE_NEEDS_CONFIRMATION', message: `the verdict is REQUIRE_CONFIRMATION and no operator has confirmed ${run.sandboxId}: run \`airlock confirm ${run.sandboxId} --operator NAME\`` }] };
  const bad = (code: string, message: string) => ({ problems: [{ code, message }] });
  let c: Confirmation;
  try {
    const r = confirmationSchema.safeParse(JSON.parse(readFileSync(f, 'utf8')));
    if (!r.success) return bad('CONFIRM_INVALID', `${f} is not a valid confirmation: ${r.error.issues[0]?.message ?? 'schema'}`);
    c = r.data;
  } catch (e) {
    return bad('CONFIRM_INVALID', `${f} is not JSON: ${(e as Error).message.slice(0, 200)}`);
  }
  const trusted = policy.operators.find((o) => o.public_key === c.public_key);
  if (!trusted || trusted.name !== c.operator) return bad('CONFIRM_INVALID', `the confirmation is signed by a key the policy does not list for operator ${c.operator}`);
  let ok: boolean;
  try {
    ok = verify(null, message(c), decodePublicKey(c.public_key), Buffer.from(c.signature, 'base64'));
  } catch {
    ok = false;
  }
  if (!ok) return bad('CONFIRM_INVALID', `the confirmation's signature does not verify with ${c.operator}'s key`);
  if (c.sandbox_id !== run.sandboxId || c.action_id !== run.result.action_id) return bad('CONFIRM_INVALID', `the confirmation is for ${c.sandbox_id} / ${c.action_id}, not this run`);
  if (c.diff_sha256 !== run.diffSha256) return bad('CONFIRM_INVALID', 'the confirmation was signed for another diff (its sha256 differs): confirm the diff as it is now');
  const age = now.getTime() - Date.parse(c.signed_utc);
  if (!(age <= policy.approval.expiry_hours * 3600_000) || age < -5 * 60_000) return bad('CONFIRM_EXPIRED', `confirmed ${c.signed_utc}; confirmations expire after ${policy.approval.expiry_hours} h (approval.expiry_hours)`);
  return { operator: c.operator };
}
