/**
 * The audit log's data model. One record per line of `<workspace>/audit/audit.jsonl`; see docs/audit.md.
 */

/** Event types Airlock itself writes. Any other lower_snake name is allowed (the log is open to new kinds of decision). */
export type KnownAuditType =
  | 'validated'
  | 'rejected'
  | 'approved'
  | 'ran'
  | 'judged'
  | 'accepted'
  | 'quarantined'
  | 'promoted'
  | 'confirmed'
  | 'rolled_back'
  | 'recovered'
  | 'interrupted'
  | 'killed'
  | 'tombstones_pruned'
  | 'pruned'
  | 'audit_repaired';

/** What a caller appends. The log adds seq, ts, prev and hash. */
export interface AuditEvent {
  // `string & {}` keeps editor completion for the known names while allowing new ones.
  type: KnownAuditType | (string & {});
  request_id?: string;
  action_id?: string;
  sandbox_id?: string;
  /** Who decided: an operator name, `policy`, `airlock serve`, ... */
  actor?: string;
  /** JSON data only (no undefined inside arrays, no functions, no non-finite numbers). Secret-looking strings are redacted. */
  detail?: Record<string, unknown>;
}

/** One line of the log, exactly as stored (canonical JSON, keys sorted). */
export interface AuditRecord {
  seq: number;
  /** ISO 8601 UTC with milliseconds, e.g. `2026-02-09T16:05:01.123Z`. */
  ts: string;
  type: string;
  request_id?: string;
  action_id?: string;
  sandbox_id?: string;
  actor?: string;
  detail?: Record<string, unknown>;
  /** `hash` of the record before (or of the anchor after pruning); 64 zeros for seq 1. */
  prev: string;
  /** sha256 (hex) of the canonical JSON of this record without `hash` and `seal`. */
  hash: string;
  /** HMAC-SHA256 of `hash` under the host's audit seal key (seal.ts); absent only in logs written before seals. */
  seal?: string;
}

/** The head file: the last record appended, so truncation of the tail is visible. */
export interface AuditHead {
  seq: number;
  hash: string;
  ts: string;
  /** HMAC-SHA256 of seq and hash under the seal key, and which key (seal.ts). */
  seal?: string;
  key_id?: string;
}

/** The anchor file written by prune: where the surviving chain starts. */
export interface AuditAnchor {
  /** seq and hash of the last pruned record; the first kept record has seq + 1 and prev = hash. */
  seq: number;
  hash: string;
  /** ts of the last pruned record. */
  ts: string;
  /** Records removed by the prune that wrote this anchor, and by every prune so far. */
  count: number;
  pruned_total: number;
  pruned_at: string;
  /** The anchor before this one (or null: the genesis), so a prune interrupted after writing the anchor still verifies. */
  previous: { seq: number; hash: string } | null;
}

export type AuditProblemCode =
  | 'AUDIT_EDITED'
  | 'AUDIT_REMOVED'
  | 'AUDIT_REORDERED'
  | 'AUDIT_DUPLICATE'
  | 'AUDIT_TRUNCATED'
  | 'AUDIT_PARTIAL_LINE'
  | 'AUDIT_BAD_JSON'
  | 'AUDIT_BAD_RECORD'
  | 'AUDIT_HEAD_MISSING'
  | 'AUDIT_HEAD_BAD'
  | 'AUDIT_HEAD_MISMATCH'
  | 'AUDIT_ANCHOR_BAD'
  | 'AUDIT_ANCHOR_MISMATCH'
  | 'AUDIT_ANCHOR_UNRECORDED'
  | 'AUDIT_UNSEALED'
  | 'AUDIT_SEAL_KEY_MISSING'
  | 'AUDIT_UNREADABLE';

export interface AuditProblem {
  code: AuditProblemCode;
  message: string;
  /** 1-based line of the log the problem is at (for a truncated tail: the line after the last). */
  line: number;
  /** The record concerned (for a removed or truncated range: the first missing seq). */
  seq?: number;
}

export interface VerifyReport {
  ok: boolean;
  file: string;
  /** Well-formed records read (lines that are not a record are not counted). */
  records: number;
  firstSeq?: number;
  lastSeq?: number;
  anchor?: { seq: number; hash: string; pruned_total: number };
  /** The seals: which key checked them, how many records carry one, how many older records (before seals) carry none. */
  seals?: { key_id: string | null; sealed: number; unsealed_before_seals: number };
  problems: AuditProblem[];
}

export interface AuditFilter {
  request?: string;
  action?: string;
  sandbox?: string;
  type?: string;
  /** Inclusive bounds on `ts`. */
  since?: Date;
  until?: Date;
}

export interface PruneResult {
  pruned: number;
  fromSeq?: number;
  toSeq?: number;
  anchor?: AuditAnchor;
  /** The `pruned` record appended to the log. */
  record?: AuditRecord;
}

export interface RepairResult {
  /** Where the partial last line went (never deleted), if there was one. */
  quarantined?: { file: string; bytes: number; sha256: string };
  /** The head file was one record behind (a crash between the line and the head) and was brought up to date. */
  headUpdated: boolean;
  /** The `audit_repaired` record, or why it could not be appended (another problem needs a person). */
  record?: AuditRecord;
  recordError?: string;
  report: VerifyReport;
}

/** Codes of the errors `append`, `prune` and `repair` throw (the log could not be written safely). */
export type AuditErrorCode =
  | AuditProblemCode
  | 'AUDIT_BAD_EVENT'
  | 'AUDIT_BAD_ARGUMENT'
  | 'AUDIT_RECORD_TOO_LARGE'
  | 'AUDIT_LOCK_TIMEOUT'
  | 'AUDIT_PRUNE_REFUSED'
  | 'AUDIT_IO';

/**
 * Thrown when the log cannot be written safely. An audit append that fails must stop the decision
 * it records (fail closed), so this is an exception and not a Result a caller could ignore.
 */
export class AuditError extends Error {
  constructor(
    readonly code: AuditErrorCode,
    message: string,
    readonly problems: AuditProblem[] = [],
  ) {
    super(`${code}: ${message}`);
    this.name = 'AuditError';
  }
}

export const GENESIS_HASH = '0'.repeat(64);
/** A record's canonical line may not exceed this (keeps the tail read bounded and the log readable). */
export const MAX_RECORD_BYTES = 256 * 1024;
