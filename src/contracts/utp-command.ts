import type { JsonPath } from './json-doc.js';
import type { Result } from '../base/problem.js';
import {
  AFTER_EXECUTION,
  checkEnum,
  checkId,
  compact,
  describeType,
  field,
  isRecord,
  own,
  Sink,
  TOOL_STATUS,
  type AfterExecution,
  type ToolStatus,
} from './utp-common.js';
import { checkRouteHeaders, mergeIdentityInto, readHeaders, requireIdentity, type UtpHeaders } from './utp-identity.js';
import { parseSubject, type SubjectRoute } from './utp-subject.js';

/**
 * The two messages of UTP section 4: the tool command (Worker -> Tool Service / PMO) and the
 * callback report (Tool Service / PMO -> ExecutionService). Unknown payload fields are ignored
 * (UTP 4.3) and kept out of the typed values.
 */

interface CommandFields {
  agent_id: string;
  agent_turn_id: string;
  turn_epoch: number;
  tool_call_id: string;
  after_execution: AfterExecution;
  /** Where the arguments are: the `tool.call` card. */
  tool_call_card_id: string;
  tool_name?: string;
  context_box_id?: string;
  step_id?: string;
}

/** `cmd.tool.*`: a Tool Service tool. */
export interface ToolServiceCommand extends CommandFields {
  form: 'tool';
}

/** `cmd.sys.pmo.internal.<tool>`: a PMO built-in; step_id and tool_name are required, tool_name is the subject's `<tool>`. */
export interface PmoCommand extends CommandFields {
  form: 'pmo';
  step_id: string;
  tool_name: string;
}

export type ToolCommand = ToolServiceCommand | PmoCommand;

/** A command as received: subject, its route, the identity headers read, the typed payload. */
export interface ToolCommandMessage<C extends ToolCommand = ToolCommand> {
  subject: string;
  route: SubjectRoute;
  headers: UtpHeaders;
  command: C;
}

export interface ToolCallback {
  agent_id: string;
  agent_turn_id: string;
  turn_epoch: number;
  tool_call_id: string;
  tool_result_card_id: string;
  status: ToolStatus;
  after_execution: AfterExecution;
  /** Recommended (resume/replay positioning). */
  step_id?: string;
}

/** Payload field order when rendering (and the keys of the typed values). */
export const COMMAND_KEYS = [
  'agent_id',
  'agent_turn_id',
  'turn_epoch',
  'tool_call_id',
  'step_id',
  'tool_name',
  'after_execution',
  'tool_call_card_id',
  'context_box_id',
] as const;
export const CALLBACK_KEYS = [
  'agent_id',
  'agent_turn_id',
  'turn_epoch',
  'tool_call_id',
  'step_id',
  'tool_result_card_id',
  'status',
  'after_execution',
] as const;

export const INLINE_ARG_KEYS = ['args', 'arguments', 'result'] as const;

export const commandRules = [
  {
    code: 'UTP_INLINE_ARGS',
    spec: 'UTP 4.1: tool services forbid inline arguments (`args`, `arguments`, `result`); arguments are read from the `tool.call` card named by `tool_call_card_id`.',
    fix: 'Remove the inline field; write the arguments into the tool.call card and send its id as `tool_call_card_id`.',
  },
  {
    code: 'UTP_INLINE_RESULT',
    spec: 'UTP 4.2: the callback should not repeat the result inline; the result lives in the `tool.result` card (Airlock: an inline `result` is refused).',
    fix: 'Remove `result` from the callback; put it in the tool.result card and send its id as `tool_result_card_id`.',
  },
  {
    code: 'UTP_FORM_MISMATCH',
    spec: 'UTP 4.1: a `cmd.tool.*` command is published on a `cmd.tool` subject and a PMO built-in on `cmd.sys.pmo.internal.<tool>` (Airlock: the PMO payload `tool_name` is that `<tool>`); a wakeup subject carries no command, a callback wakes `cmd.agent.<target>.wakeup`.',
    fix: 'Publish the command on the subject of its form (`utp: "tool_command"` -> cmd.tool, `utp: "pmo_command"` -> cmd.sys.pmo.internal) and make tool_name match the subject.',
  },
] as const;

interface CommandOptions {
  /** The form the caller expects (the `utp` kind of a file); a different subject form is UTP_FORM_MISMATCH. */
  form?: 'tool' | 'pmo';
  /** Where payload/headers/subject sit in a file (paths and lines of problems). */
  at?: { payload: JsonPath; headers: JsonPath; subject: JsonPath };
  sink?: Sink;
}

/** Checks a command's subject, headers and payload. Never throws; collects every problem. */
export function parseToolCommand(subject: unknown, payload: unknown, headers?: unknown, opts: CommandOptions = {}): Result<ToolCommandMessage> {
  const sink = opts.sink ?? new Sink();
  const at = opts.at ?? { payload: [], headers: ['headers'], subject: ['subject'] };
  const start = sink.problems.length;

  const routed = parseSubject(subject);
  let form: 'tool' | 'pmo' | undefined = opts.form;
  let route: SubjectRoute | undefined;
  if (!routed.ok) for (const p of routed.problems) sink.add(p.code, p.message, at.subject);
  else if (routed.value.kind === 'wakeup') {
    sink.add('UTP_FORM_MISMATCH', 'a tool command is published on cmd.tool.* or cmd.sys.pmo.internal.*, not on a cmd.agent.<target>.wakeup subject', at.subject);
  } else {
    route = routed.value;
    const subjectForm = routed.value.kind;
    if (form !== undefined && form !== subjectForm) {
      sink.add(
        'UTP_FORM_MISMATCH',
        form === 'pmo' ? 'a PMO command must be published on cg.<ver>.<project>.<channel>.cmd.sys.pmo.internal.<tool>' : 'a tool command must be published on cg.<ver>.<project>.<channel>.cmd.tool.<target>',
        at.subject,
      );
    }
    form ??= subjectForm;
  }

  const hs = readHeaders(headers, sink, at.headers);
  if (route) checkRouteHeaders(hs, route, sink, at.headers);
  if (!isRecord(payload)) {
    sink.add('UTP_FIELD_TYPE', `the command payload must be a JSON object, not ${describeType(payload)}`, at.payload);
    return { ok: false, problems: sink.problems.slice(start) };
  }
  const p = at.payload;
  for (const k of INLINE_ARG_KEYS) {
    if (own(payload, k) !== undefined) {
      sink.add('UTP_INLINE_ARGS', `inline \`${k}\` is forbidden in a tool command; arguments are read from the tool.call card named by tool_call_card_id`, [...p, k]);
    }
  }
  const pmo = form === 'pmo';
  const id = mergeIdentityInto(payload, hs, sink, p);
  requireIdentity(id, payload, sink, p, pmo ? ['agent_id', 'agent_turn_id', 'turn_epoch', 'tool_call_id', 'step_id'] : ['agent_id', 'agent_turn_id', 'turn_epoch', 'tool_call_id']);
  const idCheck = (v: unknown, a: JsonPath) => checkId(v, sink, a);
  const after = field(payload, 'after_execution', true, (v, a) => checkEnum(v, AFTER_EXECUTION, 'UTP_BAD_AFTER_EXECUTION', sink, a), sink, p, ' (suspend or terminate)');
  const card = field(payload, 'tool_call_card_id', true, idCheck, sink, p, ': it names the tool.call card that holds the arguments');
  const toolName = field(payload, 'tool_name', pmo, idCheck, sink, p, pmo ? ' for a PMO built-in command' : '');
  const box = field(payload, 'context_box_id', false, idCheck, sink, p);
  if (pmo && route?.kind === 'pmo' && toolName !== undefined && toolName !== route.target) {
    sink.add('UTP_FORM_MISMATCH', '`tool_name` must be the <tool> token of the cmd.sys.pmo.internal.<tool> subject', [...p, 'tool_name']);
  }

  if (sink.problems.length > start || !route || !form) return { ok: false, problems: sink.problems.slice(start) };
  const fields = compact<CommandFields>(
    { ...id, after_execution: after, tool_call_card_id: card, tool_name: toolName, context_box_id: box } as Partial<CommandFields>,
    COMMAND_KEYS,
  );
  const command = { form, ...fields } as ToolCommand;
  return { ok: true, value: { subject: subject as string, route, headers: hs, command } };
}

/** Checks a callback report payload (and its identity headers when given). Never throws. */
export function parseCallback(payload: unknown, headers?: unknown): Result<ToolCallback> {
  const r = parseCallbackMessage(payload, headers);
  return r.ok ? { ok: true, value: r.value.callback } : r;
}

/** parseCallback that also returns the identity headers it read. */
export function parseCallbackMessage(
  payload: unknown,
  headers?: unknown,
  opts: { at?: { payload: JsonPath; headers: JsonPath }; sink?: Sink } = {},
): Result<{ headers: UtpHeaders; callback: ToolCallback }> {
  const sink = opts.sink ?? new Sink();
  const at = opts.at ?? { payload: [], headers: ['headers'] };
  const start = sink.problems.length;
  const hs = readHeaders(headers, sink, at.headers);
  if (!isRecord(payload)) {
    sink.add('UTP_FIELD_TYPE', `the callback payload must be a JSON object, not ${describeType(payload)}`, at.payload);
    return { ok: false, problems: sink.problems.slice(start) };
  }
  const p = at.payload;
  if (own(payload, 'result') !== undefined) {
    sink.add('UTP_INLINE_RESULT', 'the callback must not carry an inline `result`; the result belongs in the tool.result card named by tool_result_card_id', [...p, 'result']);
  }
  const id = mergeIdentityInto(payload, hs, sink, p);
  requireIdentity(id, payload, sink, p, ['agent_id', 'agent_turn_id', 'turn_epoch', 'tool_call_id']);
  const card = field(payload, 'tool_result_card_id', true, (v, a) => checkId(v, sink, a), sink, p, ': resume hard-checks it');
  const status = field(payload, 'status', true, (v, a) => checkEnum(v, TOOL_STATUS, 'UTP_BAD_STATUS', sink, a), sink, p);
  const after = field(payload, 'after_execution', true, (v, a) => checkEnum(v, AFTER_EXECUTION, 'UTP_BAD_AFTER_EXECUTION', sink, a), sink, p, ' (suspend or terminate)');
  if (sink.problems.length > start) return { ok: false, problems: sink.problems.slice(start) };
  const { traceparent: _trace, ...ids } = id;
  const callback = compact<ToolCallback>({ ...ids, tool_result_card_id: card, status, after_execution: after } as Partial<ToolCallback>, CALLBACK_KEYS);
  return { ok: true, value: { headers: hs, callback } };
}

/** The payload object of a typed command (what a Worker publishes). */
export function commandPayload(c: ToolCommand): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k of COMMAND_KEYS) if (c[k] !== undefined) out[k] = c[k];
  return out;
}

export function callbackPayload(c: ToolCallback): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k of CALLBACK_KEYS) if (c[k] !== undefined) out[k] = c[k];
  return out;
}
