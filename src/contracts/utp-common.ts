import { formatPath, MAX_JSON_DEPTH, type JsonPath } from './json-doc.js';
import type { Problem } from '../base/problem.js';

/**
 * Shared field rules of every UTP payload: identifiers, turn_epoch, after_execution, status, and
 * safe copying of "any JSON" values. The payload parsers read already-decoded values (what a NATS
 * handler has), so nothing here trusts the shape of its input: own properties only, no getters,
 * bounded depth, no non-JSON values.
 */

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

export const AFTER_EXECUTION = ['suspend', 'terminate'] as const;
export type AfterExecution = (typeof AFTER_EXECUTION)[number];
export const TOOL_STATUS = ['success', 'failed', 'canceled', 'timeout', 'partial'] as const;
export type ToolStatus = (typeof TOOL_STATUS)[number];

/** Identifiers (agent_id, agent_turn_id, tool_call_id, card ids, step_id, tool_name...): 1..256 characters. */
export const MAX_ID_LENGTH = 256;
/**
 * No control characters (C0, DEL, C1) anywhere, no whitespace at either end: an id that prints
 * the same as another id, or that breaks a log line, is refused.
 */
// eslint-disable-next-line no-control-regex -- matching control characters is the point of this pattern
export const ID_PATTERN = /^[^\s\u0000-\u001f\u007f-\u009f](?:[^\u0000-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f])?$/;

export const commonRules = [
  {
    code: 'UTP_FIELD_TYPE',
    spec: 'UTP 4: payloads, card contents and their fields are JSON values of the documented types (objects where objects are expected, JSON only, nested at most 64 levels).',
    fix: 'Give the field the documented JSON type (see docs/utp.md); `arguments` is an object, headers are strings.',
  },
  {
    code: 'UTP_MISSING_FIELD',
    spec: 'UTP 4.1/4.2: the minimum required fields are present (command: agent_id, agent_turn_id, turn_epoch, tool_call_id, after_execution, tool_call_card_id; PMO adds step_id and tool_name; callback: tool_call_id, agent_turn_id, turn_epoch, agent_id, tool_result_card_id, status, after_execution).',
    fix: 'Add the field named in the message (identity fields may come from the CG-* headers instead).',
  },
  {
    code: 'UTP_BAD_ID',
    spec: `Airlock: identifiers (agent_id, agent_turn_id, tool_call_id, tool_call_card_id, tool_result_card_id, step_id, tool_name, context_box_id, card_id, trace_id) are non-empty strings of at most ${MAX_ID_LENGTH} characters, without control characters or surrounding whitespace.`,
    fix: 'Send the identifier as a plain JSON string, trimmed, non-empty and short.',
  },
  {
    code: 'UTP_BAD_TURN_EPOCH',
    spec: 'Airlock: turn_epoch is a JSON integer >= 0 (a numeric string such as "3" is refused: the spec gives no string form).',
    fix: 'Write turn_epoch as a bare non-negative integer, e.g. `"turn_epoch": 3`.',
  },
  {
    code: 'UTP_BAD_AFTER_EXECUTION',
    spec: 'UTP 3.1/4.2: after_execution is `suspend` or `terminate`.',
    fix: 'Use `suspend` (the agent resumes after the result) or `terminate` (the turn ends with the result).',
  },
  {
    code: 'UTP_BAD_STATUS',
    spec: 'UTP 4.2: status is one of success | failed | canceled | timeout | partial.',
    fix: 'Use one of the five status values, lowercase.',
  },
] as const;

/** Collects problems with their dotted path and, when reading a file, the line. */
export class Sink {
  readonly problems: Problem[] = [];
  constructor(private readonly lineOf?: (path: JsonPath) => number) {}

  add(code: string, message: string, at: JsonPath): void {
    const p: Problem = { code, message };
    if (at.length > 0) p.path = formatPath(at);
    if (this.lineOf) p.line = this.lineOf(at);
    this.problems.push(p);
  }
}

/** How a path is named in messages. */
export const nameOf = (at: JsonPath): string => (at.length > 0 ? `\`${formatPath(at)}\`` : 'the value');

/** A plain JSON-like object (not an array, not a class instance). */
export function isRecord(x: unknown): x is Record<string, unknown> {
  if (x === null || typeof x !== 'object' || Array.isArray(x)) return false;
  const proto = Object.getPrototypeOf(x) as unknown;
  return proto === Object.prototype || proto === null;
}

/** Own data property only: `obj.constructor`, getters and prototype members never count. */
export function own(obj: Record<string, unknown>, key: string): unknown {
  const d = Object.getOwnPropertyDescriptor(obj, key);
  return d && 'value' in d ? d.value : undefined;
}

export const has = (obj: Record<string, unknown>, key: string): boolean => own(obj, key) !== undefined;

/** Sets a key safely (a `__proto__` key stays data). */
export function setKey(obj: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
}

/**
 * A deep copy of a JSON value, or undefined with a problem when it is not one (non-finite numbers,
 * functions, class instances, cycles via the depth bound). -0 becomes 0 so render/parse round-trips.
 */
export function copyJson(x: unknown, sink: Sink, at: JsonPath, depth = 0): JsonValue | undefined {
  // Fast path without path bookkeeping; only a failing value is walked again to say where.
  const fast = copyFast(x, depth);
  if (fast !== FAIL) return fast;
  return copySlow(x, sink, at, depth);
}

const FAIL = Symbol('not JSON');

function copyFast(x: unknown, depth: number): JsonValue | typeof FAIL {
  if (x === null || typeof x === 'string' || typeof x === 'boolean') return x;
  if (typeof x === 'number') return Number.isFinite(x) ? (x === 0 ? 0 : x) : FAIL;
  if (depth >= MAX_JSON_DEPTH) return FAIL;
  if (Array.isArray(x)) {
    const out: JsonValue[] = new Array<JsonValue>(x.length);
    for (let i = 0; i < x.length; i++) {
      const v = copyFast(Object.getOwnPropertyDescriptor(x, i)?.value, depth + 1);
      if (v === FAIL) return FAIL;
      out[i] = v;
    }
    return out;
  }
  if (!isRecord(x)) return FAIL;
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(x)) {
    const v = copyFast(own(x, k), depth + 1);
    if (v === FAIL) return FAIL;
    if (k === '__proto__') setKey(out, k, v);
    else out[k] = v;
  }
  return out as JsonObject;
}

function copySlow(x: unknown, sink: Sink, at: JsonPath, depth: number): JsonValue | undefined {
  if (x === null || typeof x === 'string' || typeof x === 'boolean') return x;
  if (typeof x === 'number') {
    if (!Number.isFinite(x)) {
      sink.add('UTP_FIELD_TYPE', `${nameOf(at)} is a number outside the JSON range`, at);
      return undefined;
    }
    return x === 0 ? 0 : x;
  }
  if (depth >= MAX_JSON_DEPTH) {
    sink.add('UTP_FIELD_TYPE', `${nameOf(at)} nests more than ${MAX_JSON_DEPTH} levels deep`, at);
    return undefined;
  }
  if (Array.isArray(x)) {
    const out: JsonValue[] = [];
    for (let i = 0; i < x.length; i++) {
      const v = copySlow(Object.getOwnPropertyDescriptor(x, i)?.value, sink, [...at, i], depth + 1);
      if (v === undefined) return undefined;
      out.push(v);
    }
    return out;
  }
  if (isRecord(x)) {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(x)) {
      const v = copySlow(own(x, k), sink, [...at, k], depth + 1);
      if (v === undefined) return undefined;
      setKey(out, k, v);
    }
    return out as JsonObject;
  }
  sink.add('UTP_FIELD_TYPE', `${nameOf(at)} is not a JSON value`, at);
  return undefined;
}

/** Checks an identifier; returns it when valid. */
export function checkId(value: unknown, sink: Sink, at: JsonPath, code = 'UTP_BAD_ID'): string | undefined {
  if (typeof value !== 'string') {
    sink.add(code, `${nameOf(at)} must be a string identifier, not ${describeType(value)}`, at);
    return undefined;
  }
  if (value.length === 0) sink.add(code, `${nameOf(at)} must not be empty`, at);
  else if (value.length > MAX_ID_LENGTH) sink.add(code, `${nameOf(at)} is ${value.length} characters; the limit is ${MAX_ID_LENGTH}`, at);
  else if (!ID_PATTERN.test(value)) sink.add(code, `${nameOf(at)} has control characters or leading/trailing whitespace`, at);
  else return value;
  return undefined;
}

export function checkEpoch(value: unknown, sink: Sink, at: JsonPath): number | undefined {
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return value === 0 ? 0 : value;
  const why =
    typeof value === 'string'
      ? 'a JSON integer, not a string (numeric strings are refused)'
      : typeof value === 'number'
        ? 'a whole number between 0 and 2^53-1'
        : `a non-negative integer, not ${describeType(value)}`;
  sink.add('UTP_BAD_TURN_EPOCH', `${nameOf(at)} must be ${why}`, at);
  return undefined;
}

export function checkEnum<T extends string>(value: unknown, allowed: readonly T[], code: string, sink: Sink, at: JsonPath): T | undefined {
  if (typeof value === 'string' && (allowed as readonly string[]).includes(value)) return value as T;
  sink.add(code, `${nameOf(at)} must be one of ${allowed.join(' | ')}`, at);
  return undefined;
}

export function describeType(x: unknown): string {
  if (x === null) return 'null';
  if (Array.isArray(x)) return 'an array';
  if (typeof x === 'object') return 'an object';
  return `a ${typeof x}`;
}

/** Reads a required or optional field, reporting UTP_MISSING_FIELD when a required one is absent. */
export function field<T>(
  obj: Record<string, unknown>,
  key: string,
  required: boolean,
  check: (v: unknown, at: JsonPath) => T | undefined,
  sink: Sink,
  base: JsonPath,
  missingHint = '',
): T | undefined {
  const v = own(obj, key);
  if (v === undefined) {
    if (required) sink.add('UTP_MISSING_FIELD', `\`${key}\` is required${missingHint}`, [...base, key]);
    return undefined;
  }
  return check(v, [...base, key]);
}

/** Copies the defined entries of `src` in the order of `keys` (typed values never hold `undefined`). */
export function compact<T extends object>(src: { [K in keyof T]?: T[K] | undefined }, keys: readonly (keyof T)[]): T {
  const out: Partial<T> = {};
  for (const k of keys) if (src[k] !== undefined) out[k] = src[k] as T[typeof k];
  return out as T;
}
