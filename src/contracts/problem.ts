import type { ZodType } from 'zod';
import type { Problem, Result } from '../base/problem.js';

/** One rule of a spec: what `airlock check --explain CODE` prints and what docs/contracts.md lists. */
export interface Rule {
  code: string;
  /** The spec sentence (or Airlock's own stricter rule) this code enforces. */
  spec: string;
  /** How to fix a document that breaks it. */
  fix: string;
  /**
   * Where the rule comes from: the normative spec, Airlock's own stricter choice, or a spec rule
   * Airlock checks more strictly (`both`). Unset for contracts not yet classified.
   */
  source?: 'spec' | 'airlock' | 'both';
  /** `warning`: reported, not rejected. Unset: an error. */
  severity?: 'warning';
  /** For an Airlock (or `both`) rule kept as an error: what the stricter check protects. */
  protects?: string;
}

/** The codes of `rules` that are warnings. */
export function warningCodes(rules: readonly Rule[]): ReadonlySet<string> {
  return new Set(rules.filter((r) => r.severity === 'warning').map((r) => r.code));
}

/**
 * Splits problems by the severity their rule declares; warnings get `severity: 'warning'`.
 * The result is ok exactly when there is a value and no error.
 */
export function settle<T>(value: T | null, problems: Problem[], warnings: ReadonlySet<string>): Result<T> {
  const errors: Problem[] = [];
  const warned: Problem[] = [];
  for (const p of problems) {
    if (warnings.has(p.code)) warned.push({ ...p, severity: 'warning' });
    else errors.push(p);
  }
  const w = warned.length > 0 ? { warnings: warned } : {};
  if (errors.length === 0 && value !== null) return { ok: true, value, ...w };
  return { ok: false, problems: errors, ...w };
}

export type DocumentKind = 'tool-request' | 'tool-result' | 'action-descriptor' | 'sandbox-result' | 'utp';

/** What each document module exports: detection, parse (structure + every rule), render, rules. */
export interface Contract<T> {
  kind: DocumentKind;
  /** Cheap guess from the file name and the first bytes; parse decides for real. */
  detect(fileName: string, text: string): boolean;
  parse(text: string, opts?: { fileName?: string }): Result<T>;
  render(value: T): string;
  rules: readonly Rule[];
  /** Zod schemas published as JSON Schema under schemas/<name>.schema.json. */
  schemas: Record<string, ZodType>;
}
