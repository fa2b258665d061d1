// Errors are values: every rejection anywhere in Airlock is a Problem with a stable code.

/**
 * Every rejection Airlock makes is a Problem: a stable code, a message a person can act on, and
 * where it applies the 1-based line in the document and the field path (e.g. `inputs[0].sha256`).
 */
export interface Problem {
  code: string;
  message: string;
  line?: number;
  path?: string;
  /**
   * Absent: an error (the document is rejected). `warning`: reported, never a rejection — the
   * document breaks one of Airlock's own stricter choices that protects nothing (docs/contracts.md).
   */
  severity?: 'warning';
}

/**
 * A parse outcome. `problems` holds errors only; `warnings` (when a contract has any to report)
 * holds problems with `severity: 'warning'`, on either branch: a valid document can carry warnings.
 */
export type Result<T> = { ok: true; value: T; warnings?: Problem[] } | { ok: false; problems: Problem[]; warnings?: Problem[] };

export const ok = <T>(value: T): Result<T> => ({ ok: true, value });
export const fail = <T = never>(problems: Problem[]): Result<T> => ({ ok: false, problems });
