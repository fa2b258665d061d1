import { readFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { basename, dirname } from 'node:path';
import type { Action } from '../action/action.js';
import { actionFromDescriptor } from '../action/from-action-descriptor.js';
import { actionFromToolRequest } from '../action/from-tool-request.js';
import { checkInputs } from '../action/inputs.js';
import type { ActionDescriptor } from '../contracts/action-descriptor.js';
import { checkText } from '../contracts/index.js';
import { decodeDocument } from '../contracts/text.js';
import type { ToolRequest } from '../contracts/tool-request.js';
import { writeToolResult, type ToolResultFile } from '../gates/tool-result-file.js';
import { execute, type ExecuteOutcome } from '../host/execute.js';
import type { Door } from '../host/record.js';
import type { RunOutcome } from '../pipeline/run.js';
import type { RunEvent } from '../sandbox/types.js';
import type { Workspace } from '../workspace/workspace.js';

/** The person at the terminal: `airlock run` is the operator's own tool, and they are its approver. */
export const terminalUser = (): string => process.env.SUDO_USER ?? process.env.USER ?? userInfo().username;

/**
 * `airlock run FILE` (and the library's runFile): validates a Tool Request or an Action
 * Descriptor, translates it into an Action, and hands it to the host core with the person at the
 * terminal as its approver. What comes back is the run, or the coded reasons nothing ran.
 */
export type FileRunOutcome = RunOutcome & { execution?: ExecuteOutcome; toolResult?: ToolResultFile };

export interface RunFileOptions {
  workspace: Workspace;
  /** Where the inputs are (default: the file's folder). */
  inputsDir?: string;
  /** The approver (default: the user running this process). */
  operator?: string;
  /** The door recorded in the run record and the audit log (default `cli`; the library says `library`). */
  door?: Door;
  signal?: AbortSignal;
  onEvent?: (e: RunEvent) => void;
}

export async function runFile(file: string, opts: RunFileOptions): Promise<FileRunOutcome> {
  let bytes: Buffer;
  try {
    bytes = readFileSync(file);
  } catch (e) {
    return { kind: 'rejected', problems: [{ code: 'RUN_NOT_RUNNABLE', message: `cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? e}` }] };
  }
  const decoded = decodeDocument(bytes);
  if ('problem' in decoded) return { kind: 'rejected', problems: [decoded.problem] };
  const checked = checkText(basename(file), decoded.text);
  if (checked.problems.length > 0) return { kind: 'rejected', problems: checked.problems };
  const inputsDir = opts.inputsDir ?? dirname(file);
  const approval = { kind: 'operator', operator: opts.operator ?? terminalUser(), how: 'terminal' } as const;
  let request: { action: Action; language?: string };
  if (checked.kind === 'tool-request') {
    const tr = checked.value as ToolRequest;
    const bad = checkInputs(tr.inputs, inputsDir);
    if (bad.length > 0) return { kind: 'rejected', problems: bad };
    request = { action: actionFromToolRequest(tr), language: tr.frontMatter.language };
  } else if (checked.kind === 'action-descriptor') {
    const action = actionFromDescriptor(checked.value as ActionDescriptor);
    if ('problems' in action) return { kind: 'rejected', problems: action.problems };
    request = { action };
  } else {
    return { kind: 'rejected', problems: [{ code: 'RUN_NOT_RUNNABLE', message: `${basename(file)} is a ${checked.kind}, not something to run` }] };
  }
  const done = await execute(opts.workspace, { ...request, door: opts.door ?? 'cli', approval, inputsDir, ...(opts.signal ? { signal: opts.signal } : {}), ...(opts.onEvent ? { onEvent: opts.onEvent } : {}) });
  if (done.kind === 'refused') return { kind: 'rejected', problems: done.problems, execution: done };
  // A Tool Request is answered with a Tool Result, as the ThreeGate gate answers it.
  const toolResult = checked.kind === 'tool-request' ? writeToolResult(request.action, done.outcome) : undefined;
  return { ...done.outcome, execution: done, ...(toolResult ? { toolResult } : {}) };
}
