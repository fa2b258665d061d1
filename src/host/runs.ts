// Past runs as a person looks them up (`airlock runs`, `airlock show`): each run folder's record and
// Sandbox Result, and the bytes before and after each change, taken only from the host's own
// content stores (or the real file while its hash is still the recorded one).
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { readVerified } from '../base/content-store.js';
import { ownerAlive } from '../base/owner.js';
import { RUN_OWNER_FILES } from '../pipeline/run.js';
import { join } from 'node:path';
import { sandboxResultContract, type DiffEntry, type SandboxResult } from '../contracts/sandbox-result.js';
import type { Problem } from '../base/problem.js';
import type { Workspace } from '../workspace/workspace.js';
import { readRunRecord, type RunRecord } from './record.js';

/** One line of `airlock runs`. */
export interface RunSummary {
  sandbox_id: string;
  started_at: string | null;
  door: string | null;
  verdict: string | null;
  status: string | null;
  command: string | null;
  interrupted: boolean;
  /** No result: `killed` when the process that ran it is gone (SIGKILL, a crash), `running` while it lives. */
  unfinished?: 'killed' | 'running';
}

/** What a run folder's name (its sandbox id) looks like. */
const RUN_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

function readResult(runDir: string): SandboxResult | null {
  try {
    const parsed = sandboxResultContract.parse(readFileSync(join(runDir, 'sandbox-result.json'), 'utf8'));
    return parsed.ok ? parsed.value : null;
  } catch {
    return null;
  }
}

/** The sandbox ids of the workspace's run folders, in no order (none when there is no runs/ yet). */
export function runIds(ws: Workspace): string[] {
  try {
    return readdirSync(ws.runs).filter((n) => RUN_ID.test(n));
  } catch {
    return [];
  }
}

/** The runs in the workspace, newest first (by start time, then id), at most `limit`. */
export function listRuns(ws: Workspace, limit: number): RunSummary[] {
  const rows: RunSummary[] = [];
  for (const id of runIds(ws)) {
    const dir = join(ws.runs, id);
    const rec = readRunRecord(dir);
    if (rec && rec.sandbox_id === id) {
      rows.push({ sandbox_id: id, started_at: rec.started_at, door: rec.door, verdict: rec.verdict, status: rec.status, command: rec.action.display ?? null, interrupted: rec.interrupted === true });
      continue;
    }
    // A run without a record (a composite's step, a run from before records): what its result says.
    const sr = existsSync(join(dir, 'sandbox-result.json')) ? readResult(dir) : null;
    if (!sr) {
      const unfinished = unfinishedRun(dir);
      if (unfinished) rows.push({ sandbox_id: id, started_at: unfinished.started_at, door: null, verdict: null, status: null, command: null, interrupted: unfinished.state === 'killed', unfinished: unfinished.state });
      continue;
    }
    rows.push({ sandbox_id: id, started_at: sr.execution.started_at, door: null, verdict: sr.verdict.recommended_action, status: sr.execution.status, command: null, interrupted: false });
  }
  rows.sort((a, b) => (b.started_at ?? '').localeCompare(a.started_at ?? '') || b.sandbox_id.localeCompare(a.sandbox_id));
  return rows.slice(0, limit);
}

/**
 * A run folder with no result: whose it was (the owner stamp in its partial result), whether that
 * process still lives, and what it ran (the stamp's second line, pipeline/run.ts runNote; null when
 * it is not there or not JSON).
 */
export function unfinishedRun(dir: string): { state: 'killed' | 'running'; started_at: string; owner: string; action: Record<string, unknown> | null } | null {
  for (const name of RUN_OWNER_FILES) {
    try {
      const [stamp = '', note = ''] = readFileSync(join(dir, name), 'utf8').split('\n');
      // ctime: a folder made ahead (pipeline/run-folder.ts) changes at its rename into place, not before.
      return { state: ownerAlive(stamp) ? 'running' : 'killed', started_at: statSync(dir).ctime.toISOString(), owner: stamp.trim().slice(0, 200), action: parseNote(note) };
    } catch {
      /* the next name, or not a run folder Airlock made */
    }
  }
  return null;
}

/** The stamp's note (what a run ran), or null: absent (folders of earlier versions), cut short by the kill, or not an object. */
function parseNote(line: string): Record<string, unknown> | null {
  if (!line || line.length > 4096) return null;
  try {
    const v: unknown = JSON.parse(line);
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

export interface ShownRun {
  sandboxId: string;
  runDir: string;
  result: SandboxResult;
  record: RunRecord | null;
}

/** A run's Sandbox Result (validated) and record, or coded problems (SHOW_BAD_ID, SHOW_NO_RUN, SHOW_RESULT_INVALID). */
export function readRun(ws: Workspace, sandboxId: string): { ok: true; run: ShownRun } | { ok: false; problems: Problem[] } {
  if (!RUN_ID.test(sandboxId)) return { ok: false, problems: [{ code: 'SHOW_BAD_ID', message: `${JSON.stringify(sandboxId.slice(0, 80))} is not a sandbox id (sbx-...; \`airlock runs\` lists them)` }] };
  const runDir = join(ws.runs, sandboxId);
  const file = join(runDir, 'sandbox-result.json');
  if (!existsSync(file)) return { ok: false, problems: [{ code: 'SHOW_NO_RUN', message: `no run ${sandboxId} in ${ws.runs} (\`airlock runs\` lists the runs)` }] };
  const parsed = sandboxResultContract.parse(readFileSync(file, 'utf8'));
  if (!parsed.ok) return { ok: false, problems: parsed.problems.map((p) => ({ code: 'SHOW_RESULT_INVALID', message: `${file}: ${p.code}: ${p.message}` })) };
  if (parsed.value.sandbox_id !== sandboxId) return { ok: false, problems: [{ code: 'SHOW_RESULT_INVALID', message: `${file} is the result of ${parsed.value.sandbox_id}, not ${sandboxId}` }] };
  const record = readRunRecord(runDir);
  return { ok: true, run: { sandboxId, runDir, result: parsed.value, record: record?.sandbox_id === sandboxId ? record : null } };
}

/** Bytes with this hash, from the first place that holds them exactly (hash checked), else null. */
function byHash(sha: string | null | undefined, places: string[], max: number): Buffer | null {
  if (!sha || !/^[0-9a-f]{64}$/.test(sha)) return null;
  for (const p of places) {
    const b = readVerified(p, sha, max);
    if (b) return b;
  }
  return null;
}

export type ContentSide = { bytes: Buffer } | { missing: string };

/**
 * The content of a changed file before and after the run: before from the tombstones (the run kept
 * the pre-image) or the real file while it still has that hash; after from the blobs (what promotion
 * would apply) or the run's own /out copy. Each side is hash-checked against the Sandbox Result.
 */
export function contentOf(ws: Workspace, run: ShownRun, e: DiffEntry, change: 'added' | 'modified' | 'deleted', max: number): { before: ContentSide; after: ContentSide } {
  const none = { bytes: Buffer.alloc(0) };
  const tooLarge = (e.size_bytes ?? 0) > max;
  const side = (sha: string | null | undefined, places: string[]): ContentSide => {
    if (tooLarge) return { missing: `larger than ${max} bytes` };
    const b = byHash(sha, places, max);
    return b ? { bytes: b } : { missing: 'content not kept by the host' };
  };
  const outRel = e.path.startsWith('/out/') ? e.path.slice('/out/'.length) : null;
  const before = change === 'added' ? none : side(e.sha256_before, [join(ws.tombstones, e.sha256_before ?? '-'), e.path]);
  const after = change === 'deleted' ? none : side(e.sha256_after, [join(ws.blobs, e.sha256_after ?? '-'), ...(outRel ? [join(run.runDir, 'out', outRel)] : [])]);
  return { before, after };
}
