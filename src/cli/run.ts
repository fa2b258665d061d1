import { basename, resolve } from 'node:path';
import { sandboxIdle } from '../sandbox/ns/runner.js';
import { interruptible, watchRun } from './terminal.js';
import type { Problem } from '../base/problem.js';
import { runFile, type FileRunOutcome } from './run-file.js';
import { openWorkspace } from '../workspace/workspace.js';

/** `airlock run FILE`: exit 0 a result was produced, 2 rejected before running, 3 internal or sandbox error, 130 interrupted. */
export async function runCommand(file: string, opts: { inputs?: string; workspace?: string; json?: boolean; follow?: boolean }): Promise<number> {
  const workspace = openWorkspace(opts.workspace);
  // On a terminal: the phase and elapsed time, and with --follow the program's output as it comes.
  const watch = watchRun({ live: opts.follow === true && !opts.json, status: !opts.json, label: basename(file) });
  const stop = interruptible(() => watch.done());
  const outcome = await runFile(resolve(file), { workspace, inputsDir: opts.inputs ? resolve(opts.inputs) : undefined, signal: stop.signal, onEvent: watch.onEvent }).finally(() => {
    watch.done();
    stop.release();
  });
  await sandboxIdle();
  if (outcome.kind === 'rejected') {
    // --json: a document on stdout in every case (the problems are also on stderr for a person).
    if (opts.json) process.stdout.write(JSON.stringify({ rejected: true, file, problems: outcome.problems }, null, 2) + '\n');
    for (const p of outcome.problems) process.stderr.write(`${file}:${p.line ?? 1}: ${p.code}: ${p.message}${p.path ? ` [${p.path}]` : ''}\n`);
    process.stderr.write(`${file}: REJECTED before running (${outcome.problems.length} problem${outcome.problems.length === 1 ? '' : 's'}); nothing ran\n`);
    return 2;
  }
  if (opts.json) process.stdout.write(JSON.stringify(outcome.sandboxResult, null, 2) + '\n');
  else process.stdout.write(summarize(outcome));
  if (outcome.execution?.kind === 'ran' && outcome.execution.record.interrupted) {
    process.stderr.write(`${file}: interrupted: the sandbox was ended before the program; the run is recorded as interrupted\n`);
    return 130;
  }
  for (const p of outcome.selfCheckProblems) process.stderr.write(`airlock: internal error: our own Sandbox Result is invalid: ${p.code}: ${p.message}\n`);
  return outcome.selfCheckProblems.length > 0 || outcome.sandboxResult.execution.status === 'SANDBOX_ERROR' ? 3 : 0;
}

function summarize(o: Extract<FileRunOutcome, { kind: 'ran' }>): string {
  const sr = o.sandboxResult;
  const ex = sr.execution;
  const end = ex.exit_code !== null ? `exit ${ex.exit_code}` : ex.signal ? `signal ${ex.signal}` : 'no exit status';
  const lines = [
    `ran ${sr.action_id} once in sandbox ${sr.sandbox_id}: ${ex.status} (${end}) in ${(ex.wall_time_ms / 1000).toFixed(3)} s`,
    `verdict: ${sr.verdict.recommended_action}`,
    ...sr.verdict.reasons.map((r) => `  - ${r}`),
  ];
  for (const e of sr.filesystem_diff.added) lines.push(`added    ${e.path}${e.sha256_after ? `  sha256 ${e.sha256_after}` : ` (${e.type})`}`);
  for (const e of sr.filesystem_diff.modified) lines.push(`modified ${e.path}`);
  for (const e of sr.filesystem_diff.deleted) lines.push(`deleted  ${e.path}`);
  lines.push(`sandbox result: ${o.sandboxResultFile}`);
  // The same result screen as the gate and the UTP door (a TR run's includes it in the Tool Result's problems).
  const item = (p: Problem) => `  - ${p.severity === 'warning' ? 'warning: ' : ''}${p.code}${p.path ? ` [${p.path}${p.line ? `:${p.line}` : ''}]` : ''}: ${p.message}`;
  if (o.toolResult) {
    lines.push(`tool result:    ${o.toolResult.file} (${o.toolResult.valid ? 'valid: safe to hand on' : 'INVALID: would be quarantined'})`);
    for (const p of [...o.toolResult.problems, ...o.toolResult.warnings]) lines.push(item(p));
  } else {
    const { problems, warnings } = o.screening;
    lines.push(`result screen:  ${problems.length === 0 ? 'clean' : `${problems.length} finding${problems.length === 1 ? '' : 's'}: the output would be withheld (UTP) or quarantined (gate)`}`);
    for (const p of [...problems, ...warnings]) lines.push(item(p));
  }
  return lines.join('\n') + '\n';
}
