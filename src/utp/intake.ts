import { parseJsonDocument } from '../contracts/json-doc.js';
import type { Problem } from '../base/problem.js';
import {
  AFTER_EXECUTION,
  ID_PATTERN,
  MAX_ID_LENGTH,
  parseSubject,
  parseToolCommand,
  recoverIdentity,
  type AfterExecution,
  type SubjectRoute,
  type ToolCommandMessage,
  type UtpIdentity,
} from '../contracts/utp.js';

/**
 * First look at a message from the stream: is it a valid tool command, a cancel, an invalid
 * command whose context can still be recovered (it gets a failed tool.result), or something
 * that cannot be answered at all (acknowledged with term() and logged with its reason)?
 */

export const intakeRules = [
  { code: 'UTPS_PAYLOAD_TOO_LARGE', spec: 'Airlock: a tool command payload is at most --max-payload bytes (default 1 MiB); arguments live in the tool.call card, not the command.', fix: 'Send only the routing fields; put the arguments in the tool.call card.' },
  { code: 'UTPS_PAYLOAD_NOT_UTF8', spec: 'Airlock: a command payload is UTF-8 JSON.', fix: 'Publish the payload as UTF-8 encoded JSON.' },
  { code: 'UTPS_UNRECOVERABLE', spec: 'Airlock: a command without a valid identity (agent_id, agent_turn_id, turn_epoch, tool_call_id in the payload or CG-* headers, agreeing) or on a subject that is not a cmd.tool subject cannot be answered: it is acknowledged, logged and dropped.', fix: 'Send the identity fields (or CG-* headers) with valid values; see docs/utp.md.' },
] as const;

/** Where and for whom a call is answered, recovered from a command even when the command is invalid. */
export interface CallContext {
  subject: string;
  route: SubjectRoute;
  identity: UtpIdentity;
  after_execution: AfterExecution;
  tool_call_card_id: string | null;
  tool_name?: string;
}

export type Intake =
  | { kind: 'command'; msg: ToolCommandMessage; ctx: CallContext }
  | { kind: 'cancel'; msg: ToolCommandMessage; ctx: CallContext }
  | { kind: 'invalid'; ctx: CallContext; problems: Problem[] }
  | { kind: 'drop'; problems: Problem[] };

export interface IntakeOptions {
  maxPayloadBytes: number;
  /** The registered after_execution of the tool on this subject (used when the command's own is unusable). */
  afterExecutionFor(subject: string): AfterExecution | undefined;
}

const isCancel = (r: SubjectRoute): boolean => r.kind === 'tool' && r.target === 'airlock' && r.rest.length === 1 && r.rest[0] === 'cancel';
const validId = (v: unknown): v is string => typeof v === 'string' && v.length > 0 && v.length <= MAX_ID_LENGTH && ID_PATTERN.test(v);
const utf8 = new TextDecoder('utf-8', { fatal: true });

export function decodeCommand(subject: string, data: Uint8Array, headers: unknown, opts: IntakeOptions): Intake {
  const routed = parseSubject(subject);
  if (!routed.ok) return { kind: 'drop', problems: routed.problems };
  const route = routed.value;
  if (route.kind !== 'tool') return { kind: 'drop', problems: [{ code: 'UTPS_UNRECOVERABLE', message: `${route.kind} subjects carry no tool command for Airlock` }] };

  const problems: Problem[] = [];
  let payload: unknown;
  if (data.byteLength > opts.maxPayloadBytes) {
    problems.push({ code: 'UTPS_PAYLOAD_TOO_LARGE', message: `the payload is ${data.byteLength} bytes, more than ${opts.maxPayloadBytes}; arguments belong in the tool.call card` });
  } else {
    let text: string | undefined;
    try {
      text = utf8.decode(data);
    } catch {
      problems.push({ code: 'UTPS_PAYLOAD_NOT_UTF8', message: 'the payload is not UTF-8 text' });
    }
    if (text !== undefined) {
      const doc = parseJsonDocument(text);
      if (doc.ok) payload = doc.value.data;
      else problems.push(...doc.problems);
    }
  }

  if (problems.length === 0) {
    const r = parseToolCommand(subject, payload, headers);
    if (r.ok) {
      const c = r.value.command;
      const ctx: CallContext = {
        subject,
        route,
        identity: { agent_id: c.agent_id, agent_turn_id: c.agent_turn_id, turn_epoch: c.turn_epoch, tool_call_id: c.tool_call_id, ...(c.step_id !== undefined ? { step_id: c.step_id } : {}), ...(r.value.headers.traceparent ? { traceparent: r.value.headers.traceparent } : {}) },
        after_execution: c.after_execution,
        tool_call_card_id: c.tool_call_card_id,
        ...(c.tool_name !== undefined ? { tool_name: c.tool_name } : {}),
      };
      return isCancel(route) ? { kind: 'cancel', msg: r.value, ctx } : { kind: 'command', msg: r.value, ctx };
    }
    problems.push(...r.problems);
  }

  // Recovery: the required identity must be whole and unambiguous, else no one can be answered; a
  // bad optional field (step_id, traceparent) is only left out (its problem is already listed).
  const obj = typeof payload === 'object' && payload !== null && !Array.isArray(payload) ? (payload as Record<string, unknown>) : {};
  const id = recoverIdentity(obj, headers);
  if (!id.ok || isCancel(route)) {
    const why = isCancel(route) ? [{ code: 'UTPS_UNRECOVERABLE', message: 'an invalid cancel command is dropped (nothing is answered for it)' }] : id.ok ? [] : id.problems;
    // parseToolCommand already reported most identity problems: list each once.
    return { kind: 'drop', problems: unique([...problems, ...why]) };
  }
  const own = (k: string): unknown => (Object.prototype.hasOwnProperty.call(obj, k) ? obj[k] : undefined);
  const after = own('after_execution');
  const card = own('tool_call_card_id');
  const name = own('tool_name');
  const ctx: CallContext = {
    subject,
    route,
    identity: id.value,
    after_execution: typeof after === 'string' && (AFTER_EXECUTION as readonly string[]).includes(after) ? (after as AfterExecution) : (opts.afterExecutionFor(subject) ?? 'suspend'),
    tool_call_card_id: validId(card) ? card : null,
    ...(validId(name) ? { tool_name: name } : {}),
  };
  return { kind: 'invalid', ctx, problems };
}

function unique(problems: Problem[]): Problem[] {
  const seen = new Set<string>();
  return problems.filter((p) => {
    const k = `${p.code}\u0000${p.path ?? ''}\u0000${p.message}`;
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
}
