import type { JsonPath } from './json-doc.js';
import type { Result } from '../base/problem.js';
import { checkEpoch, checkId, describeType, isRecord, nameOf, own, Sink } from './utp-common.js';
import { parseTraceparent } from './utp-trace.js';

/**
 * Identity of a tool call: deployed platforms carry it in NATS headers, older ones in the payload.
 * Either is accepted; when both carry a field they must agree exactly (the gate and routing fields
 * must not be altered in transit, UTP 4.3), otherwise UTP_IDENTITY_CONFLICT names the field.
 */

export const IDENTITY_HEADERS = ['CG-Project-Id', 'CG-Channel-Id', 'CG-Agent-Id', 'CG-Turn-Id', 'CG-Turn-Epoch', 'CG-Tool-Call-Id', 'CG-Step-Id', 'traceparent'] as const;
export type IdentityHeader = (typeof IDENTITY_HEADERS)[number];
/**
 * The identity headers Airlock reads, under their canonical names; other headers are ignored.
 * CG-Project-Id and CG-Channel-Id name the call's route, which the subject also gives: when present
 * they must agree with it (checkRouteHeaders), as CommonGround's ingress requires.
 */
export type UtpHeaders = Partial<Record<IdentityHeader, string>>;

export interface UtpIdentity {
  agent_id: string;
  agent_turn_id: string;
  turn_epoch: number;
  tool_call_id: string;
  step_id?: string;
  /** Only from the `traceparent` header (payloads have no trace field). */
  traceparent?: string;
}

/** Payload field <-> header. */
export const IDENTITY_FIELDS = [
  { field: 'agent_id', header: 'CG-Agent-Id' },
  { field: 'agent_turn_id', header: 'CG-Turn-Id' },
  { field: 'turn_epoch', header: 'CG-Turn-Epoch' },
  { field: 'tool_call_id', header: 'CG-Tool-Call-Id' },
  { field: 'step_id', header: 'CG-Step-Id' },
] as const;

export const identityRules = [
  {
    code: 'UTP_BAD_HEADER',
    spec: 'Airlock: the identity headers (CG-Agent-Id, CG-Turn-Id, CG-Turn-Epoch, CG-Tool-Call-Id, CG-Step-Id) are single string values; CG-Turn-Epoch is a plain decimal integer; ids follow the identifier rule; one header is not given twice with different values.',
    fix: 'Send each CG-* header once, with the same value the payload field would hold (CG-Turn-Epoch as `3`, not `03` or `+3`).',
  },
  {
    code: 'UTP_ROUTE_CONFLICT',
    spec: 'CommonGround ingress: the CG-Project-Id and CG-Channel-Id headers, when present, name the project and channel of the subject the message was published on.',
    fix: 'Send CG-Project-Id / CG-Channel-Id equal to the subject\'s <project_id> / <channel_id> (or leave them out); a disagreement means the message was re-routed or forged.',
  },
  {
    code: 'UTP_IDENTITY_CONFLICT',
    spec: 'UTP 4.3: the gate and routing fields (agent_turn_id, turn_epoch, tool_call_id, ...) must not be altered; Airlock: a field carried both in the payload and in its CG-* header must have the same value.',
    fix: 'Make the payload field and its header agree (or send the identity in one place only); a disagreement means the message was altered.',
  },
] as const;

const CANONICAL = new Map<string, IdentityHeader>(IDENTITY_HEADERS.map((h) => [h.toLowerCase(), h]));
const EPOCH_HEADER = /^(0|[1-9][0-9]{0,15})$/;

/** Something shaped like nats.js `MsgHdrs` (keys() and values(k)). */
interface HeaderBag {
  keys(): Iterable<string>;
  values(k: string): Iterable<string>;
}
// Arrays and Maps also have keys()/values(), with other meanings: they are not header bags.
const isHeaderBag = (x: unknown): x is HeaderBag =>
  typeof x === 'object' &&
  x !== null &&
  !Array.isArray(x) &&
  !(x instanceof Map) &&
  typeof (x as HeaderBag).keys === 'function' &&
  typeof (x as HeaderBag).values === 'function';

/**
 * Reads the identity headers from a plain object (`{ name: value | [values] }`) or a nats.js
 * MsgHdrs. Names match case-insensitively; unknown headers are ignored. Never throws.
 */
export function readHeaders(headers: unknown, sink: Sink, base: JsonPath): UtpHeaders {
  const out: UtpHeaders = {};
  if (headers === undefined || headers === null) return out;
  const entries: [string, unknown][] = [];
  try {
    if (isHeaderBag(headers)) for (const k of headers.keys()) entries.push([String(k), [...headers.values(k)]]);
    else if (isRecord(headers)) for (const k of Object.keys(headers)) entries.push([k, own(headers, k)]);
    else {
      sink.add('UTP_FIELD_TYPE', `${nameOf(base)} must be an object of header names to string values, not ${describeType(headers)}`, base);
      return out;
    }
  } catch {
    sink.add('UTP_FIELD_TYPE', `${nameOf(base)} could not be read`, base);
    return out;
  }
  const seen = new Map<IdentityHeader, string>();
  for (const [name, raw] of entries) {
    const canonical = CANONICAL.get(name.toLowerCase());
    if (!canonical) continue;
    const at = [...base, name];
    const values = Array.isArray(raw) ? raw : [raw];
    if (values.length === 0 || !values.every((v): v is string => typeof v === 'string')) {
      sink.add('UTP_BAD_HEADER', `header ${canonical} must be a string value`, at);
      continue;
    }
    if (new Set(values).size > 1) {
      sink.add('UTP_BAD_HEADER', `header ${canonical} has several different values; send it once`, at);
      continue;
    }
    const value = values[0] as string;
    const before = seen.get(canonical);
    if (before !== undefined && before !== value) {
      sink.add('UTP_BAD_HEADER', `header ${canonical} is given twice (different letter case) with different values`, at);
      continue;
    }
    seen.set(canonical, value);
    if (canonical === 'traceparent') {
      const t = parseTraceparent(value);
      if (!t.ok) {
        for (const p of t.problems) sink.add(p.code, p.message, at);
        continue;
      }
    } else if (canonical === 'CG-Turn-Epoch') {
      if (!EPOCH_HEADER.test(value) || !Number.isSafeInteger(Number(value))) {
        sink.add('UTP_BAD_HEADER', 'header CG-Turn-Epoch must be a plain decimal integer >= 0 (no sign, no leading zeros)', at);
        continue;
      }
    } else if (checkId(value, sink, at, 'UTP_BAD_HEADER') === undefined) continue;
    out[canonical] = value;
  }
  // Canonical order, so rendering and deep equality do not depend on the sender's order.
  const ordered: UtpHeaders = {};
  for (const h of IDENTITY_HEADERS) if (out[h] !== undefined) ordered[h] = out[h];
  return ordered;
}

/**
 * CG-Project-Id / CG-Channel-Id, when present, must equal the subject's project and channel
 * (UTP_ROUTE_CONFLICT at the header's path).
 */
export function checkRouteHeaders(headers: UtpHeaders, route: { projectId: string; channelId: string }, sink: Sink, at: JsonPath): void {
  const pairs = [
    ['CG-Project-Id', route.projectId, 'project_id'],
    ['CG-Channel-Id', route.channelId, 'channel_id'],
  ] as const;
  for (const [h, want, what] of pairs) {
    const v = headers[h];
    if (v !== undefined && v !== want) sink.add('UTP_ROUTE_CONFLICT', `header ${h} is ${JSON.stringify(v.slice(0, 80))} but the subject's ${what} is ${JSON.stringify(want)}; they must be the same`, [...at, h]);
  }
}

export type PartialIdentity = Partial<UtpIdentity>;

/**
 * Merges the identity from a payload object and already-read headers. Checks each side's types;
 * reports conflicts; does not check that required fields are present (the caller knows which are).
 */
export function mergeIdentityInto(
  payload: Record<string, unknown>,
  headers: UtpHeaders,
  sink: Sink,
  payloadAt: JsonPath,
): PartialIdentity {
  const id: Record<string, string | number> = {};
  for (const { field, header } of IDENTITY_FIELDS) {
    const raw = own(payload, field);
    const at = [...payloadAt, field];
    const fromPayload = raw === undefined ? undefined : field === 'turn_epoch' ? checkEpoch(raw, sink, at) : checkId(raw, sink, at);
    const h = headers[header];
    const fromHeader = h === undefined ? undefined : field === 'turn_epoch' ? Number(h) : h;
    if (fromPayload !== undefined && fromHeader !== undefined && fromPayload !== fromHeader) {
      sink.add('UTP_IDENTITY_CONFLICT', `\`${field}\` in the payload and header ${header} differ; they must be identical`, at);
      continue;
    }
    // A field that failed its own check stays unset (its problem is already reported).
    if (raw !== undefined && fromPayload === undefined) continue;
    const v = fromPayload ?? fromHeader;
    if (v !== undefined) id[field] = v;
  }
  const out: PartialIdentity = {};
  if (typeof id.agent_id === 'string') out.agent_id = id.agent_id;
  if (typeof id.agent_turn_id === 'string') out.agent_turn_id = id.agent_turn_id;
  if (typeof id.turn_epoch === 'number') out.turn_epoch = id.turn_epoch;
  if (typeof id.tool_call_id === 'string') out.tool_call_id = id.tool_call_id;
  if (typeof id.step_id === 'string') out.step_id = id.step_id;
  if (headers.traceparent !== undefined) out.traceparent = headers.traceparent;
  return out;
}

export const REQUIRED_IDENTITY = ['agent_id', 'agent_turn_id', 'turn_epoch', 'tool_call_id'] as const;

/** Reports UTP_MISSING_FIELD for each required identity field neither the payload nor the headers gave. */
export function requireIdentity(
  id: PartialIdentity,
  payload: Record<string, unknown>,
  sink: Sink,
  payloadAt: JsonPath,
  required: readonly (keyof UtpIdentity)[],
): void {
  for (const f of required) {
    // Present-but-invalid fields already have their own problem.
    if (id[f] === undefined && own(payload, f) === undefined) {
      const header = IDENTITY_FIELDS.find((x) => x.field === f)?.header;
      sink.add('UTP_MISSING_FIELD', `\`${f}\` is required (in the payload${header ? ` or the ${header} header` : ''})`, [...payloadAt, f]);
    }
  }
}

/**
 * The identity of a message from its payload and headers (either may carry each field; both must
 * agree). Requires agent_id, agent_turn_id, turn_epoch and tool_call_id. Never throws.
 */
export function mergeIdentity(payload: unknown, headers?: unknown): Result<UtpIdentity> {
  const sink = new Sink();
  const hs = readHeaders(headers, sink, ['headers']);
  if (!isRecord(payload)) {
    sink.add('UTP_FIELD_TYPE', `the payload must be a JSON object, not ${describeType(payload)}`, []);
    return { ok: false, problems: sink.problems };
  }
  const id = mergeIdentityInto(payload, hs, sink, []);
  requireIdentity(id, payload, sink, [], REQUIRED_IDENTITY);
  if (sink.problems.length > 0) return { ok: false, problems: sink.problems };
  return { ok: true, value: id as UtpIdentity };
}

/** Where a problem with an optional identity field sits (paths as readHeaders and mergeIdentityInto write them). */
const OPTIONAL_IDENTITY_PATHS = new Set(['step_id', 'headers.cg-step-id', 'headers.traceparent']);

/**
 * The identity of an INVALID command, to answer it with a failed tool.result: like mergeIdentity,
 * but a bad optional field (step_id of a wrong type, a malformed CG-Step-Id or traceparent, a
 * step_id conflict) is left out instead of making the call unanswerable. Any problem with a
 * required field (missing, malformed, payload and header disagreeing) still fails: no one could
 * say who to answer. Never throws.
 */
export function recoverIdentity(payload: Record<string, unknown>, headers?: unknown): Result<UtpIdentity> {
  const sink = new Sink();
  const hs = readHeaders(headers, sink, ['headers']);
  // Both leave a field that failed its check (or conflicts) unset: only the valid values remain.
  const id = mergeIdentityInto(payload, hs, sink, []);
  requireIdentity(id, payload, sink, [], REQUIRED_IDENTITY);
  const fatal = sink.problems.filter((p) => !OPTIONAL_IDENTITY_PATHS.has((p.path ?? '').toLowerCase()));
  if (fatal.length > 0) return { ok: false, problems: fatal };
  return { ok: true, value: id as UtpIdentity };
}
