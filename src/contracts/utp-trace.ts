import { randomBytes } from 'node:crypto';
import type { Result } from '../base/problem.js';

/**
 * W3C Trace Context `traceparent` (https://www.w3.org/TR/trace-context/#traceparent-header):
 * `<version 2hex>-<trace-id 32hex>-<parent-id 16hex>-<flags 2hex>`, lowercase hex only.
 * Version `ff` is invalid; an all-zero trace-id or parent-id is invalid; version `00` is exactly
 * 55 characters; a later version may append `-...` fields, which are ignored (the spec's rule for
 * forward compatibility).
 */
export interface Traceparent {
  version: string;
  traceId: string;
  parentId: string;
  /** The trace-flags byte. */
  flags: number;
  sampled: boolean;
}

export const traceRules = [
  {
    code: 'UTP_TRACEPARENT',
    spec: 'W3C Trace Context: `traceparent` is `00-<32 lowercase hex trace-id, not all zero>-<16 lowercase hex parent-id, not all zero>-<2 hex flags>`.',
    fix: 'Send a traceparent made by your tracing library (or childTraceparent), e.g. `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01`.',
  },
] as const;

const HEAD = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})/;

export function parseTraceparent(value: unknown): Result<Traceparent> {
  const bad = (why: string): Result<Traceparent> => ({ ok: false, problems: [{ code: 'UTP_TRACEPARENT', message: `traceparent ${why}` }] });
  if (typeof value !== 'string') return bad('must be a string');
  if (value.length > 512) return bad('is too long');
  const m = HEAD.exec(value);
  if (!m) return bad('must be `<2 hex>-<32 hex>-<16 hex>-<2 hex>` in lowercase hex');
  const [, version, traceId, parentId, flags] = m as unknown as [string, string, string, string, string];
  if (version === 'ff') return bad('version `ff` is invalid');
  if (version === '00' && value.length !== 55) return bad('version 00 must be exactly 55 characters');
  if (value.length > 55 && value[55] !== '-') return bad('has extra characters after the flags');
  if (/^0+$/.test(traceId)) return bad('trace-id must not be all zeros');
  if (/^0+$/.test(parentId)) return bad('parent-id must not be all zeros');
  const f = Number.parseInt(flags, 16);
  return { ok: true, value: { version, traceId, parentId, flags: f, sampled: (f & 1) === 1 } };
}

export function formatTraceparent(t: Pick<Traceparent, 'traceId' | 'parentId' | 'flags'>): string {
  return `00-${t.traceId}-${t.parentId}-${(t.flags & 0xff).toString(16).padStart(2, '0')}`;
}

/**
 * The traceparent for work done on behalf of `parent`: same trace-id, a new random parent-id
 * (span id), version 00, and only the sampled flag carried over (other bits are not defined for
 * version 00 and must not be guessed). `random` is for tests.
 */
export function childTraceparent(parent: string | Traceparent, random: (n: number) => Uint8Array = randomBytes): Result<string> {
  const p = typeof parent === 'string' ? parseTraceparent(parent) : parseTraceparent(formatTraceparent(parent));
  if (!p.ok) return p;
  for (let attempt = 0; attempt < 8; attempt++) {
    const id = Buffer.from(random(8)).toString('hex').padStart(16, '0').slice(0, 16);
    if (!/^0+$/.test(id) && id !== p.value.parentId) {
      return { ok: true, value: formatTraceparent({ traceId: p.value.traceId, parentId: id, flags: p.value.sampled ? 1 : 0 }) };
    }
  }
  // Only a broken random source gets here.
  return { ok: false, problems: [{ code: 'UTP_TRACEPARENT', message: 'could not draw a non-zero span id' }] };
}
