// `airlock show SANDBOX_ID` and `airlock runs`: a past run as a person reads it (like `git show` and
// `git log --oneline`), without opening sandbox-result.json by hand. Everything shown comes from the
// host's own records; file names and contents written by the sandboxed program are made inert for a
// terminal (control characters shown as \xNN).
import type { DiffEntry, SandboxResult } from '../contracts/sandbox-result.js';
import { contentOf, listRuns, readRun, type RunSummary, type ShownRun } from '../host/runs.js';
import { isText, TEXT_DIFF_MAX_BYTES, unifiedDiff } from '../report/text-diff.js';
import { openWorkspace, type Workspace } from '../workspace/workspace.js';
import { forTerminal } from './terminal.js';

/** One changed path, with its unified diff when both sides are text the host kept. */
export interface ShownChange {
  change: 'added' | 'modified' | 'deleted';
  path: string;
  type: string;
  size_bytes: number | null;
  /** The unified diff (`--- a/...`), or null with `note` saying why there is none. */
  text_diff: string | null;
  note?: string;
}

const CHANGE_MARK = { added: '+', modified: '~', deleted: '-' } as const;

/** Every change of the run, each with its text diff where one can be shown. */
export function changesOf(ws: Workspace, run: ShownRun): ShownChange[] {
  const d = run.result.filesystem_diff;
  const all: (readonly [ShownChange['change'], DiffEntry])[] = [...d.added.map((e) => ['added', e] as const), ...d.modified.map((e) => ['modified', e] as const), ...d.deleted.map((e) => ['deleted', e] as const)];
  return all.map(([change, e]) => {
    const base = { change, path: e.path, type: e.type, size_bytes: e.size_bytes };
    if (e.type !== 'file') return { ...base, text_diff: null, note: e.type === 'dir' ? 'directory' : `${e.type}${e.link_target ? ` -> ${e.link_target}` : ''}` };
    const c = contentOf(ws, run, e, change, TEXT_DIFF_MAX_BYTES);
    const missing = 'missing' in c.before ? c.before.missing : 'missing' in c.after ? c.after.missing : null;
    if (missing || !('bytes' in c.before) || !('bytes' in c.after)) return { ...base, text_diff: null, note: missing ?? 'content not kept' };
    if (!isText(c.before.bytes) || !isText(c.after.bytes)) return { ...base, text_diff: null, note: 'binary' };
    const names = { a: change === 'added' ? '/dev/null' : `a${e.path}`, b: change === 'deleted' ? '/dev/null' : `b${e.path}` };
    const text = unifiedDiff(c.before.bytes.toString('utf8'), c.after.bytes.toString('utf8'), names);
    if (text === null) return { ...base, text_diff: null, note: 'too many differences to show' };
    return { ...base, text_diff: text };
  });
}

const bytes = (n: number | null): string => {
  if (n === null) return 'not measured';
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
};
const ms = (n: number | null): string => (n === null ? 'not measured' : n < 1000 ? `${n} ms` : `${(n / 1000).toFixed(2)} s`);

/** The diff section: one line per change, then the text diffs (shared with `airlock confirm`). */
export function formatChanges(changes: ShownChange[]): string {
  if (changes.length === 0) return 'changes: none\n';
  const n = (k: ShownChange['change']) => changes.filter((c) => c.change === k).length;
  const lines = [`changes (${n('added')} added, ${n('modified')} modified, ${n('deleted')} deleted):`];
  for (const c of changes) lines.push(`  ${CHANGE_MARK[c.change]} ${c.path}${c.type === 'file' && c.size_bytes !== null ? ` (${bytes(c.size_bytes)})` : ''}${c.text_diff === null && c.note ? ` [${c.note}]` : ''}`);
  const diffs = changes.filter((c) => c.text_diff);
  return forTerminal([...lines, ...(diffs.length > 0 ? [''] : [])].join('\n') + '\n' + diffs.map((c) => c.text_diff).join(''));
}

export function formatShow(run: ShownRun, changes: ShownChange[]): string {
  const sr: SandboxResult = run.result;
  const ex = sr.execution;
  const rec = run.record;
  const end = ex.exit_code !== null ? `exit ${ex.exit_code}` : ex.signal ? `signal ${ex.signal}` : 'no exit status';
  const r = sr.resources;
  const se = sr.side_effects;
  const lines = [
    `sandbox ${sr.sandbox_id}`,
    `verdict:   ${sr.verdict.recommended_action}${rec?.interrupted ? ' (interrupted)' : ''}`,
    ...(rec ? [`command:   ${rec.action.display}`, `door:      ${rec.door}, decided by ${rec.decision.source}`] : []),
    `action:    ${sr.action_id}`,
    `ran:       ${ex.started_at} .. ${ex.ended_at}, ${ex.status} (${end})`,
    'reasons:',
    ...sr.verdict.reasons.map((x) => `  - ${x}`),
    `resources: wall ${ms(r.wall_time_ms)}, cpu ${ms(r.cpu_user_ms)} user + ${ms(r.cpu_system_ms)} system, peak memory ${bytes(r.peak_memory_bytes)}, disk written ${bytes(r.disk_write_bytes)}, network ${bytes(r.network_bytes_out)} out / ${bytes(r.network_bytes_in)} in`,
    `processes: ${se.processes_spawned ?? 'not measured'}${se.executables?.length ? ` (${se.executables.slice(0, 8).join(', ')}${se.executables.length > 8 ? ', ...' : ''})` : ''}`,
    `network attempts: ${se.network_attempts?.length ? se.network_attempts.map((n) => `${n.protocol} ${n.protocol === 'unix' ? n.address : `${n.address}:${n.port}`}${n.allowed ? '' : ' (refused)'}`).join(', ') : 'none'}`,
    `file access attempts: ${se.file_access_attempts?.length ? se.file_access_attempts.map((f) => `${f.access} ${f.path}${f.as_written ? ` (as ${f.as_written})` : ''}`).join(', ') : 'none'}`,
    `stdout:    ${bytes(sr.outputs.stdout.total_bytes)}${sr.outputs.stdout.truncated ? ' (truncated)' : ''}; stderr: ${bytes(sr.outputs.stderr.total_bytes)}${sr.outputs.stderr.truncated ? ' (truncated)' : ''}`,
  ];
  return forTerminal(lines.join('\n') + '\n') + formatChanges(changes);
}

export function showCommand(sandboxId: string, opts: { workspace?: string; json?: boolean }): number {
  const ws = openWorkspace(opts.workspace);
  const got = readRun(ws, sandboxId);
  if (!got.ok) {
    if (opts.json) process.stdout.write(JSON.stringify({ ok: false, problems: got.problems }, null, 2) + '\n');
    for (const p of got.problems) process.stderr.write(`airlock show: ${p.code}: ${forTerminal(p.message)}\n`);
    return 2;
  }
  const changes = changesOf(ws, got.run);
  if (opts.json) process.stdout.write(JSON.stringify({ ok: true, sandbox_id: got.run.sandboxId, record: got.run.record, sandbox_result: got.run.result, changes }, null, 2) + '\n');
  else process.stdout.write(formatShow(got.run, changes));
  return 0;
}

const oneLine = (r: RunSummary): string =>
  [r.started_at ?? '-', r.sandbox_id, (r.door ?? '-').padEnd(7), `${r.verdict ?? (r.unfinished === 'killed' ? 'KILLED' : r.unfinished === 'running' ? 'RUNNING' : '-')}${r.interrupted ? '*' : ''}`.padEnd(21), (r.command ?? (r.unfinished === 'killed' ? '(its process died before a result: no result, nothing to promote)' : r.unfinished === 'running' ? '(still running)' : '(no record)')).replace(/\s+/g, ' ').slice(0, 100)].join('  ');

export function runsCommand(opts: { workspace?: string; json?: boolean; limit?: number; last?: boolean }): number {
  const rows = listRuns(openWorkspace(opts.workspace), opts.last ? 1 : (opts.limit ?? 20));
  if (opts.last) {
    // One id and nothing else on stdout, so that a shell can keep it: id=$(airlock runs --last).
    if (rows[0] === undefined) {
      process.stderr.write('no runs yet\n');
      return 2;
    }
    process.stdout.write(`${rows[0].sandbox_id}\n`);
    return 0;
  }
  if (opts.json) process.stdout.write(JSON.stringify({ runs: rows }, null, 2) + '\n');
  else if (rows.length === 0) process.stdout.write('no runs yet\n');
  else process.stdout.write(forTerminal(rows.map(oneLine).join('\n') + '\n') + (rows.some((r) => r.interrupted) ? '(* interrupted)\n' : ''));
  return 0;
}
