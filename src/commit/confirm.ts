import { keyDir as defaultKeyDir, loadOperatorKey } from '../approval/keys.js';
import type { Workspace } from '../workspace/workspace.js';
import { signConfirmation, storeConfirmation, type Confirmation } from './confirmation.js';
import { loadPolicy, loadRun } from './load.js';
import { audit } from './store.js';
import { fail, type CommitResult } from './types.js';

/**
 * `airlock confirm SANDBOX_ID --operator NAME`: an operator signs the exact diff of a
 * REQUIRE_CONFIRMATION run. The key must be one the policy lists for that operator, so a
 * confirmation is only ever made by someone promotion will trust.
 */
export function confirm(ws: Workspace, sandboxId: string, opts: { operator: string; keyDir?: string; now?: () => Date; /** The diff the person was shown: anything else is not signed. */ expectDiffSha256?: string }): CommitResult<{ confirmation: Confirmation; file: string; summary: { added: number; modified: number; deleted: number } }> {
  const now = (opts.now ?? (() => new Date()))();
  const loaded = loadRun(ws, sandboxId);
  if (!loaded.ok) return loaded;
  const run = loaded.run;
  const verdict = run.result.verdict.recommended_action;
  if (verdict !== 'REQUIRE_CONFIRMATION') return fail('CONFIRM_VERDICT', `the verdict of ${sandboxId} is ${verdict}: only REQUIRE_CONFIRMATION is confirmed by a person`);
  if (opts.expectDiffSha256 !== undefined && opts.expectDiffSha256 !== run.diffSha256) return fail('CONFIRM_CHANGED', `the diff of ${sandboxId} changed since it was shown (sha256 ${run.diffSha256}, shown ${opts.expectDiffSha256}): nothing signed; run confirm again`);
  if (run.cross.length > 0) return { ok: false, problems: run.cross.map((p) => ({ ...p, code: 'COMMIT_RESULT_INVALID', message: `the result contradicts its descriptor: ${p.code}: ${p.message}` })) };
  const pol = loadPolicy(ws);
  if (!pol.ok) return pol;
  const key = loadOperatorKey(opts.operator, defaultKeyDir(opts.keyDir));
  if ('error' in key) return fail('CONFIRM_KEY', key.error);
  const listed = pol.policy.operators.find((o) => o.name === opts.operator);
  if (!listed || listed.public_key !== key.publicKey) return fail('CONFIRM_KEY', `operator ${opts.operator} with this key is not in ${ws.policyFile}: run \`airlock keygen --operator ${opts.operator}\` for this workspace`);
  const c = signConfirmation(run, { operator: opts.operator, key: key.key, publicKey: key.publicKey, now });
  const d = run.result.filesystem_diff;
  const rec = audit(ws, {
    type: 'confirmed',
    action_id: run.result.action_id,
    sandbox_id: sandboxId,
    actor: opts.operator,
    detail: { diff_sha256: run.diffSha256, result_sha256: run.resultSha256, verdict, reasons: run.result.verdict.reasons.slice(0, 10), changes: { added: d.added.length, modified: d.modified.length, deleted: d.deleted.length } },
  });
  if (!rec.ok) return rec;
  const file = storeConfirmation(run, c);
  return { ok: true, confirmation: c, file, summary: { added: d.added.length, modified: d.modified.length, deleted: d.deleted.length } };
}
