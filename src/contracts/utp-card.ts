import type { JsonPath } from './json-doc.js';
import type { Problem, Result } from '../base/problem.js';
import {
  AFTER_EXECUTION,
  checkEnum,
  checkId,
  compact,
  copyJson,
  describeType,
  field,
  isRecord,
  nameOf,
  own,
  Sink,
  TOOL_STATUS,
  type AfterExecution,
  type JsonObject,
  type JsonValue,
  type ToolStatus,
} from './utp-common.js';
import type { ToolCallback, ToolCommand } from './utp-command.js';
import { parseTraceparent } from './utp-trace.js';

/**
 * The `tool.call` and `tool.result` cards. The spec names them (and `ToolResultContent`) but
 * leaves their fields to implementations; these are Airlock's minimal shapes (docs/utp.md):
 *
 *   card      { card_id, type: 'tool.call' | 'tool.result', created_at (RFC 3339), content, metadata? }
 *   metadata  { trace_id?, step_id?, parent_step_id?, traceparent? }  (CommonGround's lineage: a
 *             tool.result copies trace_id, step_id and parent_step_id from its tool.call)
 *   tool.call { tool_call_id, tool_name, arguments {...}, agent_turn_id?, step_id?, trace_id? }
 *   tool.result { status, after_execution, result?, error?, tool_call_id? }
 *
 * A tool.call card is found by its card_id (the command's tool_call_card_id); the idempotency
 * anchor (agent_turn_id, tool_call_id) is checked against its content by checkCommandAgainstCallCard.
 */

export interface ToolCallContent {
  tool_call_id: string;
  tool_name: string;
  /** The arguments, a JSON object (the command never carries them inline). */
  arguments: JsonObject;
  /** The turn that issued the call; when present a command naming this card must carry the same. */
  agent_turn_id?: string;
  step_id?: string;
  trace_id?: string;
}

export interface ToolError {
  /** Lowercase snake_case; known: tool_timeout, auth_failed, bad_request, upstream_unavailable, internal_error. */
  code: string;
  message: string;
  detail?: JsonValue;
}

export interface ToolResultContent {
  status: ToolStatus;
  after_execution: AfterExecution;
  /** Any JSON; an object may carry `__cg_control.after_execution` and the `error_code`/`error_message` mirror. */
  result?: JsonValue;
  /** Required unless status is success (and absent when it is). */
  error?: ToolError;
  tool_call_id?: string;
}

export interface CardMetadata {
  trace_id?: string;
  step_id?: string;
  /** The step that started the one this card belongs to (CommonGround's lineage). */
  parent_step_id?: string;
  traceparent?: string;
}

interface CardBase {
  card_id: string;
  /** RFC 3339 date-time with an explicit offset (`Z` or `+hh:mm`). */
  created_at: string;
  metadata?: CardMetadata;
}
export interface ToolCallCard extends CardBase {
  type: 'tool.call';
  content: ToolCallContent;
}
export interface ToolResultCard extends CardBase {
  type: 'tool.result';
  content: ToolResultContent;
}
export type UtpCard = ToolCallCard | ToolResultCard;

export const CARD_TYPES = ['tool.call', 'tool.result'] as const;
export const KNOWN_ERROR_CODES = ['tool_timeout', 'auth_failed', 'bad_request', 'upstream_unavailable', 'internal_error'] as const;
export const ERROR_CODE_PATTERN = /^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$/;
export const MAX_ERROR_CODE_LENGTH = 64;
export const MAX_ERROR_MESSAGE_LENGTH = 8192;
export const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.\d{1,9})?(?:[Zz]|[+-](\d{2}):(\d{2}))$/;

export const CALL_CONTENT_KEYS = ['tool_call_id', 'tool_name', 'arguments', 'agent_turn_id', 'step_id', 'trace_id'] as const;
export const RESULT_CONTENT_KEYS = ['tool_call_id', 'status', 'after_execution', 'result', 'error'] as const;
export const CARD_KEYS = ['card_id', 'type', 'created_at', 'content', 'metadata'] as const;
export const METADATA_KEYS = ['trace_id', 'step_id', 'parent_step_id', 'traceparent'] as const;

export const cardRules = [
  {
    code: 'UTP_CARD_TYPE',
    spec: 'UTP 4: tool calls use `tool.call` cards and results `tool.result` cards (Airlock checks only these two types).',
    fix: 'Set the card `type` to `tool.call` or `tool.result`.',
  },
  {
    code: 'UTP_BAD_TIMESTAMP',
    spec: 'Airlock: a card `created_at` is an RFC 3339 date-time with an explicit offset, e.g. `2025-01-31T12:00:00Z`.',
    fix: 'Write created_at as `YYYY-MM-DDThh:mm:ss[.fff]Z` (or with `+hh:mm`).',
  },
  {
    code: 'UTP_CARD_MISMATCH',
    spec: 'UTP 3.2/4.3: the tool.call context decides idempotency and routing fields must not be altered; Airlock: a card agrees with itself (metadata and content step_id/trace_id, traceparent trace-id) and with the command or callback that names it.',
    fix: 'Make the card metadata and content carry the same step_id/trace_id, and the traceparent the same trace-id.',
  },
  {
    code: 'UTP_CG_CONTROL',
    spec: 'UTP 3.1/4.3: `result.__cg_control.after_execution` overrides after_execution when present and valid (Airlock: an invalid one is refused, not silently ignored).',
    fix: 'Make `__cg_control` an object whose `after_execution` is `suspend` or `terminate`, or remove it.',
  },
  {
    code: 'UTP_ERROR_MISSING',
    spec: 'UTP 4.3/5: `error` and `status` carry the failure semantics of a tool.result (Airlock: `error` {code, message} is required whenever status is not success).',
    fix: 'Add `error: { "code": "internal_error", "message": "what went wrong" }` (or set status to success).',
  },
  {
    code: 'UTP_ERROR_INVALID',
    spec: `UTP 5: error is { code, message, detail? }; Airlock: code is lowercase snake_case (known: ${KNOWN_ERROR_CODES.join(', ')}; extensible), message a non-empty string, and a success result carries no error.`,
    fix: 'Use a snake_case error code such as `tool_timeout`, a human message, and put structured data in `detail`.',
  },
  {
    code: 'UTP_ERROR_MIRROR',
    spec: 'UTP 5: `result.error_code` / `result.error_message` mirror `error.code` / `error.message` (optional in Airlock; when present they must agree, and a success result has none).',
    fix: 'Make result.error_code equal error.code and result.error_message equal error.message, or drop the mirror.',
  },
] as const;

// ---- tool.result content ----------------------------------------------------------------------

/** The override in `result.__cg_control.after_execution`, when present and valid. */
export function cgControlAfterExecution(result: unknown): AfterExecution | undefined {
  if (!isRecord(result)) return undefined;
  const control = own(result, '__cg_control');
  if (!isRecord(control)) return undefined;
  const v = own(control, 'after_execution');
  return typeof v === 'string' && (AFTER_EXECUTION as readonly string[]).includes(v) ? (v as AfterExecution) : undefined;
}

/** The after_execution that applies: the valid `__cg_control` override, else the content's own. */
export function effectiveAfterExecution(content: Pick<ToolResultContent, 'after_execution' | 'result'>): AfterExecution {
  return cgControlAfterExecution(content.result) ?? content.after_execution;
}

function checkError(v: unknown, sink: Sink, at: JsonPath): ToolError | undefined {
  if (!isRecord(v)) {
    sink.add('UTP_ERROR_INVALID', `${nameOf(at)} must be an object { code, message, detail? }, not ${describeType(v)}`, at);
    return undefined;
  }
  const before = sink.problems.length;
  const code = own(v, 'code');
  const message = own(v, 'message');
  if (typeof code !== 'string' || code.length > MAX_ERROR_CODE_LENGTH || !ERROR_CODE_PATTERN.test(code)) {
    sink.add('UTP_ERROR_INVALID', `${nameOf([...at, 'code'])} must be a lowercase snake_case code of at most ${MAX_ERROR_CODE_LENGTH} characters (e.g. ${KNOWN_ERROR_CODES.join(', ')})`, [...at, 'code']);
  }
  if (typeof message !== 'string' || message.trim() === '' || message.length > MAX_ERROR_MESSAGE_LENGTH) {
    sink.add('UTP_ERROR_INVALID', `${nameOf([...at, 'message'])} must be a non-empty string of at most ${MAX_ERROR_MESSAGE_LENGTH} characters`, [...at, 'message']);
  }
  const rawDetail = own(v, 'detail');
  const detail = rawDetail === undefined ? undefined : copyJson(rawDetail, sink, [...at, 'detail']);
  if (sink.problems.length > before) return undefined;
  return compact<ToolError>({ code: code as string, message: message as string, detail }, ['code', 'message', 'detail']);
}

export function readToolResultContent(x: unknown, sink: Sink, at: JsonPath): ToolResultContent | undefined {
  if (!isRecord(x)) {
    sink.add('UTP_FIELD_TYPE', `${nameOf(at)} (tool.result content) must be a JSON object, not ${describeType(x)}`, at);
    return undefined;
  }
  const before = sink.problems.length;
  const status = field(x, 'status', true, (v, a) => checkEnum(v, TOOL_STATUS, 'UTP_BAD_STATUS', sink, a), sink, at);
  const after = field(x, 'after_execution', true, (v, a) => checkEnum(v, AFTER_EXECUTION, 'UTP_BAD_AFTER_EXECUTION', sink, a), sink, at, ' (suspend or terminate)');
  const callId = field(x, 'tool_call_id', false, (v, a) => checkId(v, sink, a), sink, at);
  const rawResult = own(x, 'result');
  const result = rawResult === undefined ? undefined : copyJson(rawResult, sink, [...at, 'result']);
  const rawError = own(x, 'error');
  const error = rawError === undefined ? undefined : checkError(rawError, sink, [...at, 'error']);

  if (status !== undefined && status !== 'success' && rawError === undefined) {
    sink.add('UTP_ERROR_MISSING', `status \`${status}\` needs an \`error\` object { code, message } saying what went wrong`, [...at, 'status']);
  }
  if (status === 'success' && rawError !== undefined) {
    sink.add('UTP_ERROR_INVALID', 'a success result must not carry `error`; use status failed or partial', [...at, 'error']);
  }
  if (isRecord(result)) {
    const control = own(result, '__cg_control');
    const cAt = [...at, 'result', '__cg_control'];
    if (control !== undefined) {
      if (!isRecord(control)) sink.add('UTP_CG_CONTROL', `${nameOf(cAt)} must be an object, not ${describeType(control)}`, cAt);
      else if (own(control, 'after_execution') !== undefined && cgControlAfterExecution(result) === undefined) {
        sink.add('UTP_CG_CONTROL', `${nameOf([...cAt, 'after_execution'])} must be suspend or terminate`, [...cAt, 'after_execution']);
      }
    }
    for (const [mirror, key] of [
      ['error_code', 'code'],
      ['error_message', 'message'],
    ] as const) {
      const m = own(result, mirror);
      const mAt = [...at, 'result', mirror];
      if (m === undefined) continue;
      if (status === 'success') sink.add('UTP_ERROR_MIRROR', `a success result must not carry \`result.${mirror}\``, mAt);
      else if (typeof m !== 'string') sink.add('UTP_ERROR_MIRROR', `\`result.${mirror}\` must be a string mirroring error.${key}`, mAt);
      else if (error && error[key] !== m) sink.add('UTP_ERROR_MIRROR', `\`result.${mirror}\` must equal \`error.${key}\``, mAt);
    }
  }
  if (sink.problems.length > before) return undefined;
  return compact<ToolResultContent>({ tool_call_id: callId, status, after_execution: after, result, error } as Partial<ToolResultContent>, RESULT_CONTENT_KEYS);
}

// ---- tool.call content -----------------------------------------------------------------------

export function readToolCallContent(x: unknown, sink: Sink, at: JsonPath): ToolCallContent | undefined {
  if (!isRecord(x)) {
    sink.add('UTP_FIELD_TYPE', `${nameOf(at)} (tool.call content) must be a JSON object, not ${describeType(x)}`, at);
    return undefined;
  }
  const before = sink.problems.length;
  const idCheck = (v: unknown, a: JsonPath) => checkId(v, sink, a);
  const callId = field(x, 'tool_call_id', true, idCheck, sink, at);
  const toolName = field(x, 'tool_name', true, idCheck, sink, at);
  const args = field(
    x,
    'arguments',
    true,
    (v, a) => {
      if (!isRecord(v)) {
        sink.add('UTP_FIELD_TYPE', `${nameOf(a)} must be a JSON object of named arguments, not ${describeType(v)}`, a);
        return undefined;
      }
      return copyJson(v, sink, a) as JsonObject | undefined;
    },
    sink,
    at,
    ' (use {} for a tool without arguments)',
  );
  const turn = field(x, 'agent_turn_id', false, idCheck, sink, at);
  const step = field(x, 'step_id', false, idCheck, sink, at);
  const trace = field(x, 'trace_id', false, idCheck, sink, at);
  if (sink.problems.length > before) return undefined;
  return compact<ToolCallContent>(
    { tool_call_id: callId, tool_name: toolName, arguments: args, agent_turn_id: turn, step_id: step, trace_id: trace } as Partial<ToolCallContent>,
    CALL_CONTENT_KEYS,
  );
}

// ---- the card envelope -----------------------------------------------------------------------

function checkTimestamp(v: unknown, sink: Sink, at: JsonPath): string | undefined {
  const m = typeof v === 'string' ? RFC3339.exec(v) : null;
  const n = (i: number) => Number(m?.[i] ?? 0);
  const valid =
    m !== null &&
    n(2) >= 1 && n(2) <= 12 && n(3) >= 1 && n(3) <= new Date(Date.UTC(n(1), n(2), 0)).getUTCDate() &&
    n(4) <= 23 && n(5) <= 59 && n(6) <= 60 && n(7) <= 23 && n(8) <= 59;
  if (!valid) {
    sink.add('UTP_BAD_TIMESTAMP', `${nameOf(at)} must be an RFC 3339 date-time with an offset, e.g. 2025-01-31T12:00:00Z`, at);
    return undefined;
  }
  return v as string;
}

function readMetadata(x: unknown, sink: Sink, at: JsonPath): CardMetadata | undefined {
  if (!isRecord(x)) {
    sink.add('UTP_FIELD_TYPE', `${nameOf(at)} must be a JSON object, not ${describeType(x)}`, at);
    return undefined;
  }
  const before = sink.problems.length;
  const idCheck = (v: unknown, a: JsonPath) => checkId(v, sink, a);
  const trace = field(x, 'trace_id', false, idCheck, sink, at);
  const step = field(x, 'step_id', false, idCheck, sink, at);
  const parentStep = field(x, 'parent_step_id', false, idCheck, sink, at);
  const tp = field(
    x,
    'traceparent',
    false,
    (v, a) => {
      const r = parseTraceparent(v);
      if (!r.ok) for (const p of r.problems) sink.add(p.code, p.message, a);
      return r.ok ? (v as string) : undefined;
    },
    sink,
    at,
  );
  if (sink.problems.length > before) return undefined;
  return compact<CardMetadata>({ trace_id: trace, step_id: step, parent_step_id: parentStep, traceparent: tp }, METADATA_KEYS);
}

export function readCard(x: unknown, sink: Sink, at: JsonPath): UtpCard | undefined {
  if (!isRecord(x)) {
    sink.add('UTP_FIELD_TYPE', `${nameOf(at)} (card) must be a JSON object, not ${describeType(x)}`, at);
    return undefined;
  }
  const before = sink.problems.length;
  const cardId = field(x, 'card_id', true, (v, a) => checkId(v, sink, a), sink, at);
  const type = field(x, 'type', true, (v, a) => checkEnum(v, CARD_TYPES, 'UTP_CARD_TYPE', sink, a), sink, at, ' (tool.call or tool.result)');
  const created = field(x, 'created_at', true, (v, a) => checkTimestamp(v, sink, a), sink, at);
  const rawMeta = own(x, 'metadata');
  const metadata = rawMeta === undefined ? undefined : readMetadata(rawMeta, sink, [...at, 'metadata']);
  const rawContent = own(x, 'content');
  const cAt = [...at, 'content'];
  let content: ToolCallContent | ToolResultContent | undefined;
  if (rawContent === undefined) sink.add('UTP_MISSING_FIELD', '`content` is required', cAt);
  else if (type === 'tool.call') content = readToolCallContent(rawContent, sink, cAt);
  else if (type === 'tool.result') content = readToolResultContent(rawContent, sink, cAt);

  if (metadata && content && type === 'tool.call') {
    const c = content as ToolCallContent;
    for (const k of ['step_id', 'trace_id'] as const) {
      if (metadata[k] !== undefined && c[k] !== undefined && metadata[k] !== c[k]) {
        sink.add('UTP_CARD_MISMATCH', `metadata.${k} and content.${k} differ; a card has one ${k}`, [...at, 'metadata', k]);
      }
    }
  }
  if (metadata?.traceparent) {
    const t = parseTraceparent(metadata.traceparent);
    const traceIds = [metadata.trace_id, type === 'tool.call' ? (content as ToolCallContent | undefined)?.trace_id : undefined];
    if (t.ok && traceIds.some((id) => id !== undefined && id !== t.value.traceId)) {
      sink.add('UTP_CARD_MISMATCH', 'the trace-id inside metadata.traceparent differs from the card trace_id', [...at, 'metadata', 'traceparent']);
    }
  }
  if (sink.problems.length > before || !content) return undefined;
  return compact<UtpCard>({ card_id: cardId, type, created_at: created, content, metadata } as Partial<UtpCard>, CARD_KEYS);
}

// ---- public entry points on decoded values ---------------------------------------------------

const run = <T>(read: (x: unknown, sink: Sink, at: JsonPath) => T | undefined, x: unknown): Result<T> => {
  const sink = new Sink();
  const v = read(x, sink, []);
  return v === undefined || sink.problems.length > 0 ? { ok: false, problems: sink.problems } : { ok: true, value: v };
};

export const parseToolResultContent = (x: unknown): Result<ToolResultContent> => run(readToolResultContent, x);
export const parseToolCallContent = (x: unknown): Result<ToolCallContent> => run(readToolCallContent, x);
export const parseCard = (x: unknown): Result<UtpCard> => run(readCard, x);

// ---- cross-checks a service makes once it has loaded the card --------------------------------

const mismatch = (message: string, path: string): Problem => ({ code: 'UTP_CARD_MISMATCH', message, path });

/**
 * The tool.call card a command points to: it must be that card (card_id), a tool.call, and agree
 * on tool_call_id, and on tool_name / agent_turn_id / step_id where both sides give them.
 */
export function checkCommandAgainstCallCard(cmd: ToolCommand, card: UtpCard): Result<ToolCallCard> {
  const problems: Problem[] = [];
  if (card.type !== 'tool.call') return { ok: false, problems: [mismatch('tool_call_card_id must name a tool.call card', 'type')] };
  if (card.card_id !== cmd.tool_call_card_id) problems.push(mismatch('the card is not the one named by tool_call_card_id', 'card_id'));
  const c = card.content;
  if (c.tool_call_id !== cmd.tool_call_id) problems.push(mismatch('the card tool_call_id differs from the command tool_call_id', 'content.tool_call_id'));
  if (cmd.tool_name !== undefined && c.tool_name !== cmd.tool_name) problems.push(mismatch('the card tool_name differs from the command tool_name', 'content.tool_name'));
  if (c.agent_turn_id !== undefined && c.agent_turn_id !== cmd.agent_turn_id) problems.push(mismatch('the card agent_turn_id differs from the command agent_turn_id', 'content.agent_turn_id'));
  if (c.step_id !== undefined && cmd.step_id !== undefined && c.step_id !== cmd.step_id) problems.push(mismatch('the card step_id differs from the command step_id', 'content.step_id'));
  return problems.length > 0 ? { ok: false, problems } : { ok: true, value: card };
}

/**
 * The tool.result card a callback points to: that card, a tool.result, the same status and base
 * after_execution (the __cg_control override applies on top of both), the same tool_call_id if given.
 */
export function checkCallbackAgainstResultCard(cb: ToolCallback, card: UtpCard): Result<ToolResultCard> {
  const problems: Problem[] = [];
  if (card.type !== 'tool.result') return { ok: false, problems: [mismatch('tool_result_card_id must name a tool.result card', 'type')] };
  if (card.card_id !== cb.tool_result_card_id) problems.push(mismatch('the card is not the one named by tool_result_card_id', 'card_id'));
  const c = card.content;
  if (c.status !== cb.status) problems.push(mismatch('the callback status differs from the card status', 'content.status'));
  if (c.after_execution !== cb.after_execution) problems.push(mismatch('the callback after_execution differs from the card after_execution', 'content.after_execution'));
  if (c.tool_call_id !== undefined && c.tool_call_id !== cb.tool_call_id) problems.push(mismatch('the card tool_call_id differs from the callback tool_call_id', 'content.tool_call_id'));
  return problems.length > 0 ? { ok: false, problems } : { ok: true, value: card };
}
