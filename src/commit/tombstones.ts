import { existsSync, lstatSync, readdirSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import type { Workspace } from '../workspace/workspace.js';
import { allRecordIds, audit, readJournal, withCommitLock } from './store.js';
import type { CommitFailure } from './types.js';

export interface PruneReport {
  removed: { sha256: string; bytes: number }[];
  /** Older than the retention but still needed by a live promotion's rollback. */
  keptForRollback: number;
  retentionDays: number;
  auditSeq?: number;
}

const HEX64 = /^[0-9a-f]{64}$/;

/**
 * Removes tombstones older than `retentionDays` (policy retention.tombstones_days), except those a
 * live (applied, not rolled back) promotion still needs to roll back: those stay as long as the
 * promotion is live. Each prune is audited (`tombstones_pruned`) with the hashes removed.
 */
export function pruneTombstones(ws: Workspace, retentionDays: number, opts: { now?: () => Date } = {}): Promise<PruneReport | CommitFailure> {
  const now = (opts.now ?? (() => new Date()))().getTime();
  return withCommitLock(ws, async () => {
    const needed = new Set<string>();
    for (const id of allRecordIds(ws)) {
      const j = readJournal(ws, id);
      if (!j || (j.phase !== 'applied' && j.phase !== 'applying' && j.phase !== 'rolling_back')) continue;
      for (const o of j.ops) if (o.before?.sha256) needed.add(o.before.sha256);
    }
    const report: PruneReport = { removed: [], keptForRollback: 0, retentionDays };
    if (!existsSync(ws.tombstones)) return report;
    const cutoff = now - retentionDays * 86_400_000;
    const doomed: { sha256: string; bytes: number; file: string }[] = [];
    for (const name of readdirSync(ws.tombstones)) {
      if (!HEX64.test(name)) continue;
      const file = join(ws.tombstones, name);
      const st = lstatSync(file);
      if (st.mtimeMs > cutoff) continue;
      if (needed.has(name)) {
        report.keptForRollback++;
        continue;
      }
      doomed.push({ sha256: name, bytes: st.size, file });
    }
    if (doomed.length === 0) return report;
    // Recorded first: a prune the log cannot record does not happen.
    const rec = audit(ws, {
      type: 'tombstones_pruned',
      actor: 'airlock',
      detail: { retention_days: retentionDays, count: doomed.length, bytes: doomed.reduce((a, d) => a + d.bytes, 0), sha256: doomed.slice(0, 500).map((d) => d.sha256), ...(doomed.length > 500 ? { not_listed: doomed.length - 500 } : {}), kept_for_rollback: report.keptForRollback },
    });
    if (!rec.ok) return rec;
    for (const d of doomed) {
      unlinkSync(d.file);
      report.removed.push({ sha256: d.sha256, bytes: d.bytes });
    }
    report.auditSeq = rec.record.seq;
    return report;
  });
}
