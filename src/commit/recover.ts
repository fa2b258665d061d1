import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { openAuditLog } from '../audit/index.js';
import type { Problem } from '../contracts/problem.js';
import type { Workspace } from '../workspace/workspace.js';
import { removeStaging, step } from './apply.js';
import { loadRun } from './load.js';
import { forceRollback } from './promote.js';
import { finishRollback } from './rollback.js';
import { audit, auditDetail, inflightIds, readJournal, recordDir, setInflight, withCommitLock, writeJournal } from './store.js';
import type { CommitFailure } from './types.js';

export interface Recovered {
  sandboxId: string;
  actionId?: string;
  /** What the tree holds now for this promotion. */
  outcome: 'old_state' | 'new_state' | 'nothing_applied' | 'failed';
  /** What was interrupted. */
  interrupted: 'promotion' | 'rollback' | 'claim';
  /** Paths that held neither state (kept in the tombstones first). */
  unexpected: { path: string; kept: string | null }[];
  problems: Problem[];
}

export interface RecoverReport {
  recovered: Recovered[];
  /** Live promotions rolled back because a later run of the same action has a FORCE_ROLLBACK verdict. */
  forced: { verdictSandboxId: string; sandboxId: string; ok: boolean; problems: Problem[] }[];
}

/** Was the `promoted` record (the commit point) appended for this attempt? */
function promotionCommitted(ws: Workspace, sandboxId: string, token: string): number | undefined {
  if (!existsSync(ws.auditFile)) return undefined;
  const recs = openAuditLog(ws.auditFile).show({ sandbox: sandboxId, type: 'promoted' });
  return recs.find((r) => (r.detail as { journal_token?: string } | undefined)?.journal_token === token)?.seq;
}

/**
 * `airlock recover`: brings every interrupted promotion or rollback to a consistent state and says
 * which. An interrupted promotion goes back to the old state, unless its `promoted` audit record
 * was written (the commit point), in which case it goes on to the new state. An interrupted
 * rollback is always finished (old state). Then FORCE_ROLLBACK verdicts are honoured.
 */
export function recover(ws: Workspace, opts: { now?: () => Date } = {}): RecoverReport | CommitFailure {
  const now = opts.now ?? (() => new Date());
  const first = withCommitLock(ws, () => {
    const recovered: Recovered[] = [];
    for (const id of inflightIds(ws)) recovered.push(recoverOne(ws, id, now));
    return recovered;
  });
  if (!Array.isArray(first)) return first;
  const forced: RecoverReport['forced'] = [];
  if (first.every((r) => r.outcome !== 'failed')) {
    for (const verdictSid of forceRollbackRuns(ws)) {
      const loaded = loadRun(ws, verdictSid);
      if (!loaded.ok) continue;
      const out = forceRollback(ws, loaded.run, now);
      if (!out.ok || out.status !== 'force_rolled_back') continue;
      for (const r of out.rolledBack) forced.push({ verdictSandboxId: verdictSid, sandboxId: r.sandboxId, ok: r.outcome.ok, problems: r.outcome.ok ? [] : r.outcome.problems });
    }
  }
  return { recovered: first, forced };
}

function recoverOne(ws: Workspace, id: string, now: () => Date): Recovered {
  const j = readJournal(ws, id);
  if (!j) {
    // Crashed between the in-flight marker and the journal: nothing was touched.
    rmSync(recordDir(ws, id), { recursive: true, force: true });
    setInflight(ws, id, false);
    return { sandboxId: id, outcome: 'nothing_applied', interrupted: 'claim', unexpected: [], problems: [] };
  }
  const base = { sandboxId: id, actionId: j.action_id };
  try {
    if (j.phase === 'applying') {
      const seq = promotionCommitted(ws, id, j.token);
      if (seq !== undefined) {
        const rep = step(ws, j.ops, 'forward', `${j.token}r`);
        removeStaging(j.ops, [j.token, `${j.token}r`]);
        j.phase = 'applied';
        j.applied_at = now().toISOString();
        j.audit = { promoted: seq };
        const rec = audit(ws, { type: 'recovered', action_id: j.action_id, sandbox_id: id, actor: 'airlock recover', detail: auditDetail(j, { interrupted: 'promotion', outcome: 'new_state', unexpected: rep.unexpected }) });
        if (!rec.ok) return { ...base, outcome: 'failed', interrupted: 'promotion', unexpected: rep.unexpected, problems: rec.problems };
        writeJournal(ws, j);
        setInflight(ws, id, false);
        return { ...base, outcome: 'new_state', interrupted: 'promotion', unexpected: rep.unexpected, problems: [] };
      }
      const rep = step(ws, j.ops, 'backward', `${j.token}u`);
      removeStaging(j.ops, [j.token, `${j.token}u`]);
      const rec = audit(ws, { type: 'recovered', action_id: j.action_id, sandbox_id: id, actor: 'airlock recover', detail: auditDetail(j, { interrupted: 'promotion', outcome: 'old_state', unexpected: rep.unexpected }) });
      if (!rec.ok) return { ...base, outcome: 'failed', interrupted: 'promotion', unexpected: rep.unexpected, problems: rec.problems };
      j.phase = 'aborted';
      writeJournal(ws, j);
      setInflight(ws, id, false);
      return { ...base, outcome: 'old_state', interrupted: 'promotion', unexpected: rep.unexpected, problems: [] };
    }
    if (j.phase === 'rolling_back') {
      const rep = step(ws, j.ops, 'backward', `${j.rollback_token ?? j.token}r`, { tolerateNonEmpty: true });
      const rec = audit(ws, { type: 'recovered', action_id: j.action_id, sandbox_id: id, actor: 'airlock recover', detail: auditDetail(j, { interrupted: 'rollback', outcome: 'old_state', unexpected: rep.unexpected }) });
      if (!rec.ok) return { ...base, outcome: 'failed', interrupted: 'rollback', unexpected: rep.unexpected, problems: rec.problems };
      removeStaging(j.ops, [`${j.rollback_token ?? j.token}r`]);
      const fin = finishRollback(ws, j, rep, now(), { recovered: true });
      if (!fin.ok) return { ...base, outcome: 'failed', interrupted: 'rollback', unexpected: rep.unexpected, problems: fin.problems };
      return { ...base, outcome: 'old_state', interrupted: 'rollback', unexpected: rep.unexpected, problems: [] };
    }
    // applied / aborted / rolled_back with a marker left behind: the journal already says where it is.
    setInflight(ws, id, false);
    return { ...base, outcome: j.phase === 'applied' ? 'new_state' : 'old_state', interrupted: 'promotion', unexpected: [], problems: [] };
  } catch (e) {
    return { ...base, outcome: 'failed', interrupted: j.phase === 'rolling_back' ? 'rollback' : 'promotion', unexpected: [], problems: [{ code: 'ROLLBACK_FAILED', message: `recovery of ${id} stopped: ${(e as Error).message}; fix it and run \`airlock recover\` again`, ...((e as { path?: string }).path ? { path: (e as { path: string }).path } : {}) }] };
  }
}

/** Runs whose verdict is FORCE_ROLLBACK (read from each run's sandbox-result.json). */
function forceRollbackRuns(ws: Workspace): string[] {
  if (!existsSync(ws.runs)) return [];
  const out: string[] = [];
  for (const id of readdirSync(ws.runs)) {
    try {
      const text = readFileSync(join(ws.runs, id, 'sandbox-result.json'), 'utf8');
      if (text.includes('"FORCE_ROLLBACK"') && (JSON.parse(text) as { verdict?: { recommended_action?: string } }).verdict?.recommended_action === 'FORCE_ROLLBACK') out.push(id);
    } catch {
      /* not a run with a result */
    }
  }
  return out;
}
