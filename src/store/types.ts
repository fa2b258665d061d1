/**
 * The shared state of the UTP tool service (issue 6): cards, the inbox, the tool registry,
 * idempotency claims and pending approvals. Two implementations behind this one interface:
 * SQLite (embedded default, one file in the workspace) and PostgreSQL (many workers on many hosts).
 * test/store/store-suite.ts runs the same suite against both.
 *
 * Exactly-once answers are enforced here, by constraints, not by hope:
 *   - claims: primary key (agent_turn_id, tool_call_id) — the UTP 3.2 anchor; the claim is an INSERT
 *     that either wins or finds the existing row (no check-then-insert race);
 *   - cards: a unique index on (agent_turn_id, tool_call_id) for tool.result cards: one per call;
 *   - inbox: a unique index on (agent_turn_id, tool_call_id, kind): one report per call.
 * `answer` writes the result card, the report and the claim's new state in one transaction, and
 * only if the caller still owns a live claim.
 */

/** How long woken flags are collected before one write sets them all (far below the sweeper's wakeup retry). */
export const WOKEN_FLUSH_MS = 50;

/** The UTP 3.2 idempotency anchor. */
export interface Anchor {
  agent_turn_id: string;
  tool_call_id: string;
}

/** A row of `resource.tools` (UTP section 2). `parameters` is a JSON Schema; `options` says how Airlock runs it. */
export interface ToolRecord {
  project_id: string;
  tool_name: string;
  description: string;
  parameters: Record<string, unknown>;
  target_subject: string;
  after_execution: 'suspend' | 'terminate';
  options: Record<string, unknown>;
  /** An operator's signature over the rest of the row (JSON, src/approval/tool-registration.ts); workers serve only signed rows. */
  signature?: string | null;
}

/** What a wakeup looks like, stored with the answer so any worker can (re)publish it. */
export interface WakeupRecord {
  subject: string;
  payload: Record<string, unknown>;
  headers: Record<string, string>;
}

export type ClaimState = 'running' | 'answered';

export interface ClaimRecord extends Anchor {
  tool_call_card_id: string | null;
  /** What is needed to answer the call without the command (after the worker died): identity, route, after_execution. */
  context: Record<string, unknown> | null;
  worker_id: string;
  state: ClaimState;
  /** Epoch ms (the store's clock) after which a running claim's worker is presumed dead. */
  lease_until: number;
  cancel_requested: boolean;
  result_card_id: string | null;
  wakeup: WakeupRecord | null;
  /** The wakeup was published at least once. */
  woken: boolean;
  created_at: number;
  updated_at: number;
}

/** A won claim returns nothing more: the winner knows what it wrote, and the row is not read back (no row to send or parse per call). */
export type ClaimOutcome = { claimed: true } | { claimed: false; existing: ClaimRecord };

export interface InboxReport extends Anchor {
  id: number;
  agent_id: string;
  kind: string;
  payload: Record<string, unknown>;
  created_at: number;
}

/** Everything one answer writes, atomically. */
export interface AnswerInput extends Anchor {
  worker_id: string;
  /** The whole tool.result card (already validated by the caller). */
  card: { card_id: string; type: 'tool.result'; created_at: string; content: unknown; metadata?: unknown };
  report: { agent_id: string; kind: string; payload: Record<string, unknown> };
  wakeup: WakeupRecord;
}

export type AnswerOutcome = { ok: true } | { ok: false; reason: 'not-owner' | 'duplicate'; existing: ClaimRecord | undefined };

export type ApprovalState = 'pending' | 'approved' | 'rejected' | 'expired' | 'canceled';

export interface ApprovalRecord extends Anchor {
  id: string;
  project_id: string;
  tool_name: string;
  /** What the person is asked to approve: the tool and its arguments (JSON). */
  summary: Record<string, unknown>;
  state: ApprovalState;
  decided_by: string | null;
  reason: string | null;
  /**
   * An approval's proof: the operator's signature (src/approval/signature.ts, JSON) over the exact
   * call (src/approval/utp-call.ts). A worker runs an approved call only when it verifies; the
   * state alone, which anyone with the store can write, approves nothing.
   */
  signature: string | null;
  created_at: number;
  expires_at: number;
  decided_at: number | null;
}

export interface Store {
  readonly kind: 'sqlite' | 'postgres';
  /** Creates the tables and indexes when missing (idempotent). */
  init(): Promise<void>;
  close(): Promise<void>;
  /** The store's clock, epoch ms (leases compare against it). */
  now(): Promise<number>;

  // cards
  /**
   * Inserts a card; false when a card with that card_id (or, for tool.result, that anchor) exists.
   * A tool.call card is visible to every worker when this resolves; on PostgreSQL its commit does not
   * wait for its own WAL flush: the claim that reads it (a flushed commit, later in the WAL) makes it
   * durable before the call can run. A database crash before any claim loses the card of a call that
   * never started (it is answered failed, card not found); other cards are flushed before this resolves.
   */
  putCard(card: { card_id: string; type: string; created_at: string; content: unknown; metadata?: unknown }, anchor?: Anchor): Promise<boolean>;
  /** The card as stored (raw JSON: the caller validates it with parseCard). */
  getCard(cardId: string): Promise<unknown | undefined>;
  /** The tool.result card of a call: the one its claim names (its answer), if answered. */
  getResultCardFor(anchor: Anchor): Promise<unknown | undefined>;
  /**
   * How many tool.result cards carry the anchor (tests and audits; no index: a scan). Airlock writes
   * one per call; any more were written by someone else with the store, and are not the answer.
   */
  countResultCards(anchor: Anchor): Promise<number>;

  // tool registry
  upsertTool(t: ToolRecord): Promise<void>;
  getTool(projectId: string, toolName: string): Promise<ToolRecord | undefined>;
  listTools(projectId?: string): Promise<ToolRecord[]>;
  removeTool(projectId: string, toolName: string): Promise<boolean>;

  // idempotency claims
  /**
   * Claims the anchor for `workerId` with a lease; if it exists, returns the existing claim instead.
   * With `readCardId`, the card of that id is read in the same round trip and returned as `card`
   * (raw, as getCard; undefined when missing): the hot path of every call reads the tool.call card
   * this way (it is only used if the claim is won; reading runs nothing).
   */
  claim(anchor: Anchor, toolCallCardId: string | null, workerId: string, leaseMs: number, context: Record<string, unknown>, readCardId?: string | null): Promise<ClaimOutcome & { card?: unknown }>;
  getClaim(anchor: Anchor): Promise<ClaimRecord | undefined>;
  /**
   * Extends the lease of the given running claims of `workerId` — the calls it is running now, not
   * every claim in its name (one whose claim committed but whose reply was lost is nobody's run: its
   * lease must run out so a sweeper answers it). Returns the anchors whose cancel was requested.
   */
  heartbeat(workerId: string, leaseMs: number, running: Anchor[]): Promise<Anchor[]>;
  /** Atomically moves running claims whose lease expired to `workerId` (fresh lease) and returns them. */
  takeOverExpired(workerId: string, leaseMs: number, limit: number): Promise<ClaimRecord[]>;
  /** Result card + report + claim state, in one transaction, only while `worker_id` owns the running claim. */
  answer(a: AnswerInput): Promise<AnswerOutcome>;
  /**
   * Records that the call's wakeup was published. Collected for WOKEN_FLUSH_MS and written together:
   * a flag lost to a crash only means a sweeper publishes the same wakeup again (at-least-once
   * wakeups), and one write per batch keeps this bookkeeping off the busy path.
   */
  markWoken(anchor: Anchor): Promise<void>;
  /** Answered claims whose wakeup was never published and that were answered more than `olderThanMs` ago. */
  unwokenAnswers(olderThanMs: number, limit: number): Promise<ClaimRecord[]>;
  /** Flags a running claim for cancellation; returns the claim as it is now (undefined when none). */
  requestCancel(anchor: Anchor): Promise<ClaimRecord | undefined>;

  // inbox
  listInbox(filter?: { agent_id?: string; anchor?: Anchor; limit?: number }): Promise<InboxReport[]>;

  // approvals
  createApproval(a: Omit<ApprovalRecord, 'state' | 'decided_by' | 'reason' | 'decided_at' | 'created_at' | 'signature'>): Promise<ApprovalRecord>;
  getApproval(id: string): Promise<ApprovalRecord | undefined>;
  listApprovals(state?: ApprovalState): Promise<ApprovalRecord[]>;
  /** Moves a pending approval to a final state; false when it was not pending any more. */
  decideApproval(id: string, state: Exclude<ApprovalState, 'pending'>, by: string | null, reason: string | null, signature?: string | null): Promise<boolean>;
}

/** Thrown (a bug or an unreachable service, never bad input) with a message that says how to fix it. */
export class StoreUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StoreUnavailableError';
  }
}
