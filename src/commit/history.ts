import { existsSync } from 'node:fs';
import { openAuditLog, type AuditRecord } from '../audit/index.js';
import type { Workspace } from '../workspace/workspace.js';

/** One step of an action's story, from the audit log. */
export interface HistoryLine {
  seq: number;
  ts: string;
  type: string;
  sandbox_id?: string;
  actor?: string;
  text: string;
}

function describe(r: AuditRecord): string {
  const d = (r.detail ?? {}) as Record<string, unknown>;
  const ch = d.changes as { added?: number; modified?: number; deleted?: number } | undefined;
  const counts = ch ? `${ch.added ?? 0} added, ${ch.modified ?? 0} modified, ${ch.deleted ?? 0} deleted` : '';
  const diff = typeof d.diff_sha256 === 'string' ? ` (diff ${d.diff_sha256.slice(0, 12)})` : '';
  switch (r.type) {
    case 'executed':
      return `ran through the ${String(d.door)} door, approved by ${String(d.decision_source)}: ${String(d.status)}, verdict ${String(d.verdict)} (result ${String(d.result_sha256).slice(0, 12)})`;
    case 'refused':
      return `refused at ${String(d.stage)} (${Array.isArray(d.codes) ? d.codes.join(', ') : '?'}) through the ${String(d.door)} door`;
    case 'confirmed':
      return `confirmed by ${r.actor ?? '?'}${diff}`;
    case 'promoted':
      return `promoted: ${counts}${diff}${d.confirmed_by ? `, confirmed by ${String(d.confirmed_by)}` : ''}`;
    case 'rolled_back': {
      const kept = Array.isArray(d.newer_versions_kept) && d.newer_versions_kept.length ? `; ${d.newer_versions_kept.length} newer version(s) kept in the tombstones` : '';
      const why = d.trigger === 'FORCE_ROLLBACK' ? ` by policy (FORCE_ROLLBACK verdict of ${String(d.verdict_sandbox_id)})` : d.forced ? ' with --force' : '';
      return `rolled back${why}: ${counts}${diff}${kept}`;
    }
    case 'recovered':
      return `recovered an interrupted ${String(d.interrupted ?? 'operation')}: ${d.outcome === 'new_state' ? 'went on to the NEW state' : 'back to the OLD state'}${diff}${d.abandoned ? `; ABANDONED by ${r.actor ?? '?'}, ${Array.isArray(d.left_undone) ? d.left_undone.length : 0} path(s) left as they were` : ''}`;
    default:
      return `${r.type}${diff}`;
  }
}

/** `airlock history ID`: an action's or a request's records (its own id, or a composite that contains it). */
export function history(ws: Workspace, actionId: string): HistoryLine[] {
  if (!existsSync(ws.auditFile)) return [];
  const log = openAuditLog(ws.auditFile);
  const own = [...log.show({ action: actionId }), ...log.show({ request: actionId })];
  const seqs = new Set(own.map((r) => r.seq));
  // Children of a composite appear in their parent's records.
  const viaParent = log.show({}).filter((r) => !seqs.has(r.seq) && Array.isArray((r.detail as { child_action_ids?: unknown } | undefined)?.child_action_ids) && ((r.detail as { child_action_ids: unknown[] }).child_action_ids.includes(actionId)));
  return [...own, ...viaParent]
    .sort((a, b) => a.seq - b.seq)
    .map((r) => ({ seq: r.seq, ts: r.ts, type: r.type, ...(r.sandbox_id ? { sandbox_id: r.sandbox_id } : {}), ...(r.actor ? { actor: r.actor } : {}), text: describe(r) }));
}
