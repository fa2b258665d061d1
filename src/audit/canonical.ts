import { createHash } from 'node:crypto';
import { findSecrets } from '../contracts/secrets.js';
import { AuditError, GENESIS_HASH, type AuditEvent, type AuditRecord } from './types.js';

/**
 * Canonical JSON: object keys sorted (UTF-16 code unit order), no whitespace, JSON.stringify's
 * escapes for strings and numbers. The hash of a record is defined over these bytes, so any
 * verifier in any language can recompute it.
 */
const MAX_DEPTH = 32;

/** Canonical text of a JSON value, or an error string naming the path of the first bad value. */
export function canonicalJson(value: unknown, path = '$', depth = 0): { text: string } | { error: string } {
  if (depth > MAX_DEPTH) return { error: `${path} is nested deeper than ${MAX_DEPTH} levels` };
  if (value === null) return { text: 'null' };
  switch (typeof value) {
    case 'string':
      return { text: JSON.stringify(value) };
    case 'boolean':
      return { text: value ? 'true' : 'false' };
    case 'number':
      return Number.isFinite(value) ? { text: JSON.stringify(value) } : { error: `${path} is not a finite number` };
    case 'object': {
      if (Array.isArray(value)) {
        const parts: string[] = [];
        for (let i = 0; i < value.length; i++) {
          const c = canonicalJson(value[i], `${path}[${i}]`, depth + 1);
          if ('error' in c) return c;
          parts.push(c.text);
        }
        return { text: `[${parts.join(',')}]` };
      }
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) return { error: `${path} is not plain JSON data (a ${proto?.constructor?.name ?? 'non-plain'} object)` };
      const parts: string[] = [];
      for (const key of Object.keys(value).sort()) {
        const v = (value as Record<string, unknown>)[key];
        if (v === undefined) continue; // as JSON.stringify does: an absent optional field
        const c = canonicalJson(v, `${path}.${key}`, depth + 1);
        if ('error' in c) return c;
        parts.push(`${JSON.stringify(key)}:${c.text}`);
      }
      return { text: `{${parts.join(',')}}` };
    }
    default:
      return { error: `${path} is a ${typeof value}, not JSON data` };
  }
}

export const sha256Hex = (text: string): string => createHash('sha256').update(text, 'utf8').digest('hex');

/** The hash a record must carry: sha256 of the canonical JSON of every field but `hash` and `seal`. */
export function recordHash(record: Omit<AuditRecord, 'hash'> & { hash?: string }): string | undefined {
  const { hash: _omit, seal: _seal, ...body } = record;
  const c = canonicalJson(body);
  return 'text' in c ? sha256Hex(c.text) : undefined;
}

const TYPE_RE = /^[a-z][a-z0-9_]{0,63}$/;
/** Ids are printable ASCII without spaces (request ids, uuids, sandbox ids). */
const ID_RE = /^[\x21-\x7e]{1,200}$/;
/** Actor names may be any text without control, format (bidi) or line-separator characters. */
const ACTOR_RE = /^[^\p{Cc}\p{Cf}\p{Zl}\p{Zp}]{1,200}$/u;
export const HEX64_RE = /^[0-9a-f]{64}$/;
export const TS_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

const ID_FIELDS = ['request_id', 'action_id', 'sandbox_id'] as const;

/** Replaces every string in `value` that looks like a secret; the audit log outlives the run and must not carry credentials. */
function redactSecrets(value: unknown): unknown {
  if (typeof value === 'string') {
    const found = findSecrets(value);
    return found.length === 0 ? value : `[redacted: ${[...new Set(found.map((f) => f.kind))].join(', ')}]`;
  }
  if (Array.isArray(value)) return value.map(redactSecrets);
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = redactSecrets(v);
    return out;
  }
  return value;
}

/** Checks a caller's event and returns the record fields it contributes (everything but seq, ts, prev, hash). */
export function eventFields(event: AuditEvent): Omit<AuditRecord, 'seq' | 'ts' | 'prev' | 'hash'> {
  const bad = (msg: string): never => {
    throw new AuditError('AUDIT_BAD_EVENT', msg);
  };
  if (event === null || typeof event !== 'object') bad('an audit event must be an object');
  if (typeof event.type !== 'string' || !TYPE_RE.test(event.type)) bad('event type must be a lower_snake name of 1-64 characters (e.g. "approved")');
  const known = new Set(['type', ...ID_FIELDS, 'actor', 'detail']);
  for (const k of Object.keys(event)) if (!known.has(k)) bad(`unknown event field "${k.slice(0, 40)}"; put extra data in detail`);
  const out: Omit<AuditRecord, 'seq' | 'ts' | 'prev' | 'hash'> = { type: event.type };
  for (const f of ID_FIELDS) {
    const v = event[f];
    if (v === undefined) continue;
    if (typeof v !== 'string' || !ID_RE.test(v)) bad(`${f} must be 1-200 printable ASCII characters without spaces`);
    out[f] = v;
  }
  if (event.actor !== undefined) {
    if (typeof event.actor !== 'string' || !ACTOR_RE.test(event.actor)) bad('actor must be 1-200 characters without control characters');
    out.actor = event.actor;
  }
  if (event.detail !== undefined) {
    const d = event.detail;
    if (d === null || typeof d !== 'object' || Array.isArray(d)) bad('detail must be a plain object');
    const c = canonicalJson(d, 'detail', 1); // depth 1: detail sits inside the record
    if ('error' in c) bad(c.error);
    // Round trip through the canonical text: a plain-data copy the caller can no longer mutate.
    out.detail = redactSecrets(JSON.parse((c as { text: string }).text)) as Record<string, unknown>;
  }
  return out;
}

/**
 * Reads one line as a record: the structure must be exact (known fields, right types) and the line
 * must be byte-for-byte the canonical form, so duplicate keys or hand edits that keep the parsed value
 * cannot hide. Returns the record, or the problem (code BAD_JSON, BAD_RECORD or EDITED) and its message.
 */
export function parseRecordLine(line: string): { record: AuditRecord } | { code: 'AUDIT_BAD_JSON' | 'AUDIT_BAD_RECORD' | 'AUDIT_EDITED'; message: string } {
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch {
    return { code: 'AUDIT_BAD_JSON', message: line.length === 0 ? 'empty line' : 'not valid JSON' };
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return { code: 'AUDIT_BAD_RECORD', message: 'not a JSON object' };
  const r = v as Record<string, unknown>;
  const allowed = new Set(['seq', 'ts', 'type', 'request_id', 'action_id', 'sandbox_id', 'actor', 'detail', 'prev', 'hash', 'seal']);
  for (const k of Object.keys(r)) if (!allowed.has(k)) return { code: 'AUDIT_BAD_RECORD', message: `unknown field "${k.slice(0, 40)}"` };
  if (typeof r.seq !== 'number' || !Number.isSafeInteger(r.seq) || r.seq < 1) return { code: 'AUDIT_BAD_RECORD', message: 'seq must be a positive integer' };
  if (typeof r.ts !== 'string' || !TS_RE.test(r.ts) || Number.isNaN(Date.parse(r.ts))) return { code: 'AUDIT_BAD_RECORD', message: 'ts must be an ISO UTC time with milliseconds' };
  if (typeof r.type !== 'string' || !TYPE_RE.test(r.type)) return { code: 'AUDIT_BAD_RECORD', message: 'type must be a lower_snake name' };
  for (const f of ID_FIELDS) if (r[f] !== undefined && (typeof r[f] !== 'string' || !ID_RE.test(r[f] as string))) return { code: 'AUDIT_BAD_RECORD', message: `${f} must be printable ASCII` };
  if (r.actor !== undefined && (typeof r.actor !== 'string' || !ACTOR_RE.test(r.actor))) return { code: 'AUDIT_BAD_RECORD', message: 'actor must be text without control characters' };
  if (r.detail !== undefined && (r.detail === null || typeof r.detail !== 'object' || Array.isArray(r.detail))) return { code: 'AUDIT_BAD_RECORD', message: 'detail must be an object' };
  for (const f of ['prev', 'hash'] as const) if (typeof r[f] !== 'string' || !HEX64_RE.test(r[f] as string)) return { code: 'AUDIT_BAD_RECORD', message: `${f} must be 64 lowercase hex digits` };
  if (r.seal !== undefined && (typeof r.seal !== 'string' || !HEX64_RE.test(r.seal))) return { code: 'AUDIT_BAD_RECORD', message: 'seal must be 64 lowercase hex digits' };
  const record = r as unknown as AuditRecord;
  const canon = canonicalJson(record);
  if ('error' in canon) return { code: 'AUDIT_BAD_RECORD', message: canon.error };
  if (canon.text !== line) return { code: 'AUDIT_EDITED', message: 'the line is not in the canonical form the log writes (spacing, key order, escapes or a duplicate key changed)' };
  if (recordHash(record) !== record.hash) return { code: 'AUDIT_EDITED', message: 'its content no longer matches its hash: the record was edited' };
  return { record };
}

export { GENESIS_HASH };
