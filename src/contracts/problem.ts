import type { ZodType } from 'zod';

/**
 * Every rejection Airlock makes is a Problem: a stable code, a message a person can act on, and
 * where it applies the 1-based line in the document and the field path (e.g. `inputs[0].sha256`).
 */
export interface Problem {
  code: string;
  message: string;
  line?: number;
  path?: string;
}

export type Result<T> = { ok: true; value: T } | { ok: false; problems: Problem[] };

export const ok = <T>(value: T): Result<T> => ({ ok: true, value });
export const fail = <T = never>(problems: Problem[]): Result<T> => ({ ok: false, problems });

/** One rule of a spec: what `airlock check --explain CODE` prints and what docs/contracts.md lists. */
export interface Rule {
  code: string;
  /** The spec sentence (or Airlock's own stricter rule) this code enforces. */
  spec: string;
  /** How to fix a document that breaks it. */
  fix: string;
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
