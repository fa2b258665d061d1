import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Action } from '../action/action.js';
import { declarationHash, declarationOf } from '../action/declaration.js';
import { readRunRecord } from '../host/record.js';
import { sandboxResultContract, validateSandboxResultAgainst, type SandboxResult } from '../contracts/sandbox-result.js';
import { canonicalJson } from '../audit/canonical.js';
import { parsePolicy, type Policy } from '../policy/policy.js';
import type { Workspace } from '../workspace/workspace.js';
import type { ScopeRecord } from './scopes.js';
import { fail, type CommitResult } from './types.js';

/** A run as promotion sees it: its Sandbox Result and the Action its run record holds. */
export interface LoadedRun {
  sandboxId: string;
  runDir: string;
  result: SandboxResult;
  action: Action;
  resultSha256: string;
  diffSha256: string;
  declarationSha256: string;
  /** Findings of the cross-check against the Action's declaration (any of them forbids promotion). */
  cross: { code: string; message: string; path?: string }[];
  /** The scope roots as the run recorded them (inode, owner); null when the run has no record. */
  scopes: ScopeRecord[] | null;
}

/** runs/<id>/scopes.json: written by the host when the run ended (src/pipeline/run.ts). */
export const scopesFile = (runDir: string): string => join(runDir, 'scopes.json');

export function readScopes(runDir: string): ScopeRecord[] | null {
  try {
    const v = JSON.parse(readFileSync(scopesFile(runDir), 'utf8')) as unknown;
    const ok = (r: unknown): r is ScopeRecord => {
      const x = r as ScopeRecord;
      return typeof x?.path === 'string' && (x.kind === 'dir' || x.kind === 'file') && typeof x.root === 'string' && Number.isInteger(x.owner?.uid) && Number.isInteger(x.owner?.gid);
    };
    return Array.isArray(v) && v.every(ok) ? v : null;
  } catch {
    return null;
  }
}

const SANDBOX_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
export const validSandboxId = (id: string): boolean => SANDBOX_ID.test(id);

const sha256 = (b: Buffer | string): string => createHash('sha256').update(b).digest('hex');

function canonicalHash(value: unknown): string {
  const c = canonicalJson(value);
  if ('error' in c) throw new Error(`not JSON data: ${c.error}`); // validated documents are JSON: a bug
  return sha256(c.text);
}

/** The hash a confirmation signs and every audit record carries: the diff as the result states it. */
export const diffHash = (result: SandboxResult): string => canonicalHash(result.filesystem_diff);

/**
 * A run as promotion finds it in its folder: the Sandbox Result (re-validated by its contract),
 * the run record (the Action the host decided on, for every door), and the result cross-checked
 * against that Action's declaration.
 */
export function loadRun(ws: Workspace, sandboxId: string): CommitResult<{ run: LoadedRun }> {
  if (!validSandboxId(sandboxId)) return fail('COMMIT_BAD_ID', `${JSON.stringify(sandboxId.slice(0, 80))} is not a sandbox id`);
  const runDir = join(ws.runs, sandboxId);
  const resultFile = join(runDir, 'sandbox-result.json');
  if (!existsSync(resultFile)) return fail('COMMIT_NO_RUN', `no sandbox run ${sandboxId} in ${ws.runs}`);
  const bytes = readFileSync(resultFile);
  const parsed = sandboxResultContract.parse(bytes.toString('utf8'));
  if (!parsed.ok) return { ok: false, problems: parsed.problems.map((p) => ({ ...p, code: 'COMMIT_RESULT_INVALID', message: `${resultFile}: ${p.code}: ${p.message}` })) };
  const result = parsed.value;
  if (result.sandbox_id !== sandboxId) return fail('COMMIT_RESULT_INVALID', `${resultFile} is the result of ${result.sandbox_id}, not ${sandboxId}`);
  const child = join(runDir, 'composite-child.json');
  if (existsSync(child)) return fail('PROMOTE_COMPOSITE_CHILD', `${sandboxId} is one step of a composite (${readFileSync(child, 'utf8').trim().slice(0, 200)}): promote, confirm or roll back the composite's sandbox id`);
  const record = readRunRecord(runDir);
  if (!record || record.sandbox_id !== sandboxId) return fail('COMMIT_NO_RECORD', `run ${sandboxId} has no run record (${join(runDir, 'record.json')}): a run from before records, or a step of a composite; run the action again`);
  const action = record.action;
  const cross = validateSandboxResultAgainst(result, declarationOf(action));
  return {
    ok: true,
    run: { sandboxId, runDir, result, action, resultSha256: sha256(bytes), diffSha256: diffHash(result), declarationSha256: declarationHash(action), cross, scopes: readScopes(runDir) },
  };
}

export function loadPolicy(ws: Workspace): CommitResult<{ policy: Policy }> {
  let text: string;
  try {
    text = readFileSync(ws.policyFile, 'utf8');
  } catch (e) {
    return fail('COMMIT_POLICY', `cannot read ${ws.policyFile}: ${(e as NodeJS.ErrnoException).code ?? e}`);
  }
  const p = parsePolicy(text);
  if (!p.ok) return { ok: false, problems: p.problems.map((q) => ({ ...q, code: 'COMMIT_POLICY', message: `${ws.policyFile}: ${q.code}: ${q.message}` })) };
  return { ok: true, policy: p.value };
}
