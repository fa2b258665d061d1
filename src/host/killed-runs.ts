import { closeSync, openSync } from 'node:fs';
import { join } from 'node:path';
import type { AuditLog } from '../audit/index.js';
import type { Workspace } from '../workspace/workspace.js';
import { runIds, unfinishedRun } from './runs.js';

/** Made in a killed run's folder before its `killed` record is written: one record, however many processes look at once. */
const KILLED_AUDITED = 'killed.audited';

/**
 * A run whose process died before it had a result (SIGKILL, a crash, a power cut) leaves its folder
 * with the owner stamp and no result, and no audit record of its own: its process never got to
 * write one. This writes one `killed` record for each such run not yet recorded (its owner is gone,
 * so it can never finish), and returns their sandbox ids.
 */
function auditKilledRuns(ws: Workspace, audit: AuditLog): string[] {
  const recorded: string[] = [];
  for (const id of runIds(ws)) {
    const dir = join(ws.runs, id);
    const run = unfinishedRun(dir);
    if (run?.state !== 'killed' || !claim(join(dir, KILLED_AUDITED))) continue;
    const action = run.action ? { action: run.action } : {};
    audit.append({ type: 'killed', sandbox_id: id, actor: 'airlock', detail: { started_at: run.started_at, owner: run.owner, ...action, note: 'its process died before the run had a result: nothing of it can be promoted' } });
    recorded.push(id);
  }
  return recorded;
}

/** Creates `file` if it is not there (O_EXCL); false when another process made it first. */
function claim(file: string): boolean {
  try {
    closeSync(openSync(file, 'wx', 0o600));
    return true;
  } catch {
    return false;
  }
}

const looked = new Set<string>();

/** auditKilledRuns once per workspace per process: the host core calls it before its first run. */
export function auditKilledRunsOnce(ws: Workspace, audit: AuditLog): void {
  if (looked.has(ws.root)) return;
  looked.add(ws.root);
  auditKilledRuns(ws, audit);
}
