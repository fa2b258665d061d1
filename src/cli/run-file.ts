import { readFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { basename, dirname } from 'node:path';
import type { Action } from '../action/action.js';
import { actionFromDescriptor } from '../action/from-action-descriptor.js';
import { actionFromToolRequest } from '../action/from-tool-request.js';
import { checkInputs } from '../action/inputs.js';
import type { ActionDescriptor } from '../contracts/action-descriptor.js';
import { checkText, type Problem } from '../contracts/index.js';
import { decodeDocument } from '../contracts/text.js';
import type { ToolRequest } from '../contracts/tool-request.js';
import { execute, type ExecuteOutcome } from '../host/execute.js';
import type { RunOutcome } from '../pipeline/run.js';
import type { Workspace } from '../workspace/workspace.js';

/** The person at the terminal: `airlock run` is the operator's own tool, and they are its approver. */
export const terminalUser = (): string => process.env.SUDO_USER ?? process.env.USER ?? userInfo().username;

/**
 * `airlock run FILE` (and the library's runFile): validates a Tool Request or an Action
 * Descriptor, translates it into an Action, and hands it to the host core with the person at the
 * terminal as its approver. What comes back is the run, or the coded reasons nothing ran.
 */
export async function runFile(file: string, opts: { workspace: Workspace; inputsDir?: string; operator?: string }): Promise<RunOutcome & { execution?: ExecuteOutcome }> {
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
  let request: { action: Action; language?: string; descriptor?: ActionDescriptor; children?: Action[] };
  if (checked.kind === 'tool-request') {
    const tr = checked.value as ToolRequest;
    const bad = checkInputs(tr.inputs, inputsDir);
    if (bad.length > 0) return { kind: 'rejected', problems: bad };
    request = { action: actionFromToolRequest(tr), language: tr.frontMatter.language };
  } else if (checked.kind === 'action-descriptor') {
    const descriptor = checked.value as ActionDescriptor;
    const translated = descriptorActions(descriptor);
    if ('problems' in translated) return { kind: 'rejected', problems: translated.problems };
    request = { ...translated, descriptor };
  } else {
    return { kind: 'rejected', problems: [{ code: 'RUN_NOT_RUNNABLE', message: `${basename(file)} is a ${checked.kind}, not something to run` }] };
  }
  const done = await execute(opts.workspace, { ...request, door: 'cli', approval, inputsDir });
  return done.kind === 'ran' ? { ...done.outcome, execution: done } : { kind: 'rejected', problems: done.problems, execution: done };
}

/**
 * A descriptor as the Action the host decides on; a composite is held to the policy through each
 * of its steps (the composite itself stands for the whole: its scope and declared effects).
 */
function descriptorActions(d: ActionDescriptor): { action: Action; children?: Action[] } | { problems: Problem[] } {
  if (d.action_type !== 'MULTI_STEP_COMPOSITE') {
    const action = actionFromDescriptor(d);
    return 'problems' in action ? action : { action };
  }
  const leaves = (x: ActionDescriptor): ActionDescriptor[] => (x.action_type === 'MULTI_STEP_COMPOSITE' ? (x.children ?? []).flatMap(leaves) : [x]);
  const children: Action[] = [];
  const problems: Problem[] = [];
  for (const [i, c] of leaves(d).entries()) {
    const a = actionFromDescriptor(c);
    if ('problems' in a) problems.push(...a.problems.map((p) => ({ ...p, message: `step ${i + 1}: ${p.message}` })));
    else children.push(a);
  }
  if (problems.length > 0) return { problems };
  const first = children[0] as Action;
  const action: Action = { ...first, id: d.action_id, scope: { paths: d.scope.filesystem.paths, recursive: d.scope.filesystem.recursive }, display: `MULTI_STEP_COMPOSITE ${d.intent_summary}`, risk: d.risk_level, confirmationRequired: d.confirmation.required };
  return { action, children };
}
