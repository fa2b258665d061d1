import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Action } from '../action/action.js';
import { writeFileAtomic } from '../audit/files.js';
import type { ApprovalDecision } from '../approval/decide.js';

/** Which front door an execution came through. */
export type Door = 'cli' | 'gate' | 'utp' | 'library';

/**
 * WORKSPACE/runs/<sandbox_id>/record.json: what the host decided and ran, whatever the door. It
 * holds the Action itself (what promotion, `airlock show` and history work from), the decision's
 * source, and the hashes that tie it to the policy and to the Sandbox Result.
 */
export interface RunRecord {
  version: 1;
  sandbox_id: string;
  door: Door;
  action: Action;
  decision: ApprovalDecision;
  /** sha256 of policy.yaml's bytes when the run was decided. */
  policy_sha256: string;
  /** sha256 of sandbox-result.json's bytes. */
  result_sha256: string;
  verdict: string;
  status: string;
  started_at: string;
  ended_at: string;
  /** The caller ended the run (Ctrl-C, a cancel): its sandbox was killed before the program's end. */
  interrupted?: true;
  /** Who asked, as the door knows it (ExecuteRequest.caller): a UTP call's agent, turn, call, tool and approval. */
  caller?: Record<string, string>;
}

export const recordFile = (runDir: string): string => join(runDir, 'record.json');

export const sha256File = (file: string): string => createHash('sha256').update(readFileSync(file)).digest('hex');

export function writeRunRecord(runDir: string, r: RunRecord): void {
  writeFileAtomic(recordFile(runDir), JSON.stringify(r, null, 2) + '\n');
}

/** The run's record, or null when the run has none (a run from before records, or not a run). */
export function readRunRecord(runDir: string): RunRecord | null {
  try {
    const r = JSON.parse(readFileSync(recordFile(runDir), 'utf8')) as RunRecord;
    return r.version === 1 && typeof r.sandbox_id === 'string' && r.action !== null && typeof r.action === 'object' ? r : null;
  } catch {
    return null;
  }
}
