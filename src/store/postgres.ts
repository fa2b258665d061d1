import pg from 'pg';
import { DelayedBatch, GroupCommit, ItemFailed, settleItem } from './batch.js';
import { HeldClient } from './held-client.js';
import { rowToApproval, rowToClaim, rowToInbox, rowToTool, type Row } from './rows.js';
import {
  StoreUnavailableError,
  type Anchor,
  type AnswerInput,
  type AnswerOutcome,
  type ApprovalRecord,
  type ApprovalState,
  type ClaimOutcome,
  type ClaimRecord,
  type InboxReport,
  type Store,
  type ToolRecord,
  WOKEN_FLUSH_MS,
} from './types.js';

/**
 * The distributed store: PostgreSQL shared by every worker on every host. Leases use the
 * database's clock (clock_timestamp()), so workers on different hosts need not agree on time.
 * All tables live in one schema (default `airlock`; `?schema=name` in the URL or the option).
 */

const NOW = `(extract(epoch from clock_timestamp()) * 1000)::bigint`;
export const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

const tables = `
CREATE TABLE IF NOT EXISTS cards (
  card_id text PRIMARY KEY,
  type text NOT NULL,
  agent_turn_id text,
  tool_call_id text,
  body jsonb NOT NULL,
  created_at bigint NOT NULL
);
-- A call's result is the card its claim names (claims.result_card_id), not whatever tool.result card
-- has its anchor: a unique index on those let a card forged by anyone with the store block the answer.
DROP INDEX IF EXISTS cards_one_result;
CREATE TABLE IF NOT EXISTS tools (
  project_id text NOT NULL,
  tool_name text NOT NULL,
  description text NOT NULL,
  parameters jsonb NOT NULL,
  target_subject text NOT NULL,
  after_execution text NOT NULL,
  options jsonb NOT NULL,
  signature text,
  PRIMARY KEY (project_id, tool_name)
);
CREATE TABLE IF NOT EXISTS claims (
  agent_turn_id text NOT NULL,
  tool_call_id text NOT NULL,
  tool_call_card_id text,
  context jsonb,
  worker_id text NOT NULL,
  state text NOT NULL,
  lease_until bigint NOT NULL,
  cancel_requested boolean NOT NULL DEFAULT false,
  result_card_id text,
  wakeup jsonb,
  woken boolean NOT NULL DEFAULT false,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  PRIMARY KEY (agent_turn_id, tool_call_id)
);
-- The sweeper's two queries, each on a partial index that holds only the rows it looks for: running
-- claims by lease, answered claims whose wakeup is not known sent, oldest first. An index of every
-- claim by state made each sweep read all answered claims (npm run bench:sweep, 300,000 of them:
-- 28 ms a sweep on SQLite, 20 ms on PostgreSQL).
CREATE INDEX IF NOT EXISTS claims_lease ON claims (lease_until) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS claims_unwoken ON claims (updated_at) WHERE state = 'answered' AND NOT woken;
DROP INDEX IF EXISTS claims_running;
-- Heartbeats renew claims by their key (the calls a worker runs): no index on worker_id to keep up
-- on every claim and answer. Dropped from stores made by earlier versions.
DROP INDEX IF EXISTS claims_worker;
CREATE TABLE IF NOT EXISTS inbox (
  id bigserial PRIMARY KEY,
  agent_id text NOT NULL,
  agent_turn_id text NOT NULL,
  tool_call_id text NOT NULL,
  kind text NOT NULL,
  payload jsonb NOT NULL,
  created_at bigint NOT NULL,
  UNIQUE (agent_turn_id, tool_call_id, kind)
);
CREATE INDEX IF NOT EXISTS inbox_agent ON inbox (agent_id, id);
CREATE TABLE IF NOT EXISTS approvals (
  id text PRIMARY KEY,
  agent_turn_id text NOT NULL,
  tool_call_id text NOT NULL,
  project_id text NOT NULL,
  tool_name text NOT NULL,
  summary jsonb NOT NULL,
  state text NOT NULL,
  decided_by text,
  reason text,
  created_at bigint NOT NULL,
  expires_at bigint NOT NULL,
  signature text,
  decided_at bigint
);
CREATE INDEX IF NOT EXISTS approvals_state ON approvals (state, created_at);
-- Stores made before signed UTP approvals and registrations (under the schema lock, like the rest).
ALTER TABLE approvals ADD COLUMN IF NOT EXISTS signature text;
ALTER TABLE tools ADD COLUMN IF NOT EXISTS signature text;
`;

const isUniqueViolation = (e: unknown): boolean => (e as { code?: string }).code === '23505';
/**
 * The answer's report replaces a row with its anchor and kind: only the answer writes a call's report
 * (once, while it owns the claim), so such a row was written by someone else with the store, and
 * failing on it left the call unanswered for ever (the sweeper's executor_lost failed on it too).
 * It takes a new id, so a reader that follows the inbox by id sees the real report. Used only after
 * a plain insert failed on that key: ON CONFLICT's speculative insertion costs every answer.
 */
const INBOX_TAKEOVER = `ON CONFLICT (agent_turn_id, tool_call_id, kind) DO UPDATE SET id = nextval(pg_get_serial_sequence('inbox', 'id')),
  agent_id = excluded.agent_id, payload = excluded.payload, created_at = excluded.created_at`;
const isInboxConflict = (e: unknown): boolean => isUniqueViolation(e) && (e as { table?: string }).table === 'inbox';
/** Statements of one kind under way at once before calls start to share them. */
const GROUP_IN_FLIGHT = { maxInFlight: 2 };
const anchorKey = (a: Anchor): string => `${a.agent_turn_id}\u0000${a.tool_call_id}`;

interface CardRow {
  card_id: string;
  type: string;
  agent_turn_id: string | null;
  tool_call_id: string | null;
  body: string;
}

interface ClaimInput {
  a: Anchor;
  cardId: string | null;
  workerId: string;
  leaseMs: number;
  context: Record<string, unknown>;
  readCardId: string | null;
}

/**
 * Whether a failed batch statement may have failed for some of its items only: a bad value (22), a
 * constraint (23), a deadlock or serialisation failure (40), or a value that could not even be
 * encoded (a JS TypeError/RangeError, e.g. JSON of a cyclic object). Not for connection failures,
 * timeouts, a server shutting down or out of resources: those fail every item alike.
 */
const itemsMayDiffer = (e: unknown): boolean =>
  e instanceof TypeError || e instanceof RangeError || /^(22|23|40)[0-9A-Z]{3}$/.test(String((e as { code?: unknown }).code ?? ''));

/**
 * Runs a batch of items, each to its own outcome: one alone runs `one`; several run `many` once over
 * the first item of each key, then the repeats one at a time after it (a key twice in one statement
 * would fight itself). If `many` fails in a way that may concern some items only (itemsMayDiffer),
 * its items are redone one at a time, so one bad item fails alone and a committed one never reports
 * another's failure.
 */
async function inBatches<T, R>(items: T[], key: (x: T) => string, one: (x: T) => Promise<R>, many: (xs: T[]) => Promise<R[]>): Promise<(R | ItemFailed)[]> {
  if (items.length === 1) return [await settleItem(one, items[0] as T)];
  const seen = new Set<string>();
  const first: number[] = [];
  const repeats: number[] = [];
  items.forEach((x, i) => {
    const k = key(x);
    if (seen.has(k)) repeats.push(i);
    else {
      seen.add(k);
      first.push(i);
    }
  });
  const out = new Array<R | ItemFailed>(items.length);
  try {
    const rs = await many(first.map((i) => items[i] as T));
    first.forEach((i, j) => (out[i] = rs[j] as R));
  } catch (e) {
    // The server is unreachable or failing: every item would fail the same way, one timeout after
    // another. The batch fails together, as the calls would have failed side by side.
    if (!itemsMayDiffer(e)) throw e;
    for (const i of first) out[i] = await settleItem(one, items[i] as T);
  }
  for (const i of repeats) out[i] = await settleItem(one, items[i] as T);
  return out;
}

/**
 * Splits Airlock's own parameters off a connection URL (pg would pass them to the server as unknown
 * options): `?schema=name` and `?query_timeout_ms=N`.
 */
export function splitSchema(url: string): { url: string; schema: string | undefined; queryTimeoutMs: string | undefined } {
  try {
    const u = new URL(url);
    const schema = u.searchParams.get('schema') ?? undefined;
    const timeout = u.searchParams.get('query_timeout_ms');
    u.searchParams.delete('schema');
    u.searchParams.delete('query_timeout_ms');
    return { url: u.toString(), schema, queryTimeoutMs: timeout ?? undefined };
  } catch {
    return { url, schema: undefined, queryTimeoutMs: undefined };
  }
}

/** How long a statement may go unanswered before its call fails (and its connection is dropped). */
const DEFAULT_QUERY_TIMEOUT_MS = 10_000;

/** The URL without its password, for messages. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return 'the given PostgreSQL URL';
  }
}

/** The sweeper's statements; each reads through its partial index (claims_lease, claims_unwoken). */
export const SWEEP_SQL = {
  // SKIP LOCKED: concurrent sweepers split the expired claims instead of queueing on them; the outer
  // WHERE re-checks the lease under the row lock.
  expired: `UPDATE claims SET worker_id = $1, lease_until = ${NOW} + $2, updated_at = ${NOW}
    WHERE (agent_turn_id, tool_call_id) IN (
      SELECT agent_turn_id, tool_call_id FROM claims WHERE state = 'running' AND lease_until < ${NOW} LIMIT $3 FOR UPDATE SKIP LOCKED)
    AND state = 'running' AND lease_until < ${NOW}
    RETURNING *`,
  unwoken: `SELECT * FROM claims WHERE state = 'answered' AND NOT woken AND updated_at < ${NOW} - $1 ORDER BY updated_at LIMIT $2`,
} as const;

export class PostgresStore implements Store {
  readonly kind = 'postgres' as const;
  readonly schema: string;
  private readonly url: string;
  private pool: pg.Pool | null = null;
  /**
   * Connections with synchronous_commit = off, for writes that need no WAL flush of their own (a
   * commit there is visible at once; it reaches disk with the next flushed commit, or the WAL writer's
   * next round, ≤ 3 × wal_writer_delay): the tool.call card, which the claim that reads it makes
   * durable (WAL is flushed in order, so the claim's flushed commit covers the card's earlier one),
   * and the woken flags, whose loss only means a wakeup published again.
   */
  private relaxedPool: pg.Pool | null = null;
  /** A connection of each pool held for the hot statements (see HeldClient); none in a pool of one. */
  private held: HeldClient | null = null;
  private heldRelaxed: HeldClient | null = null;
  private readonly poolSize: number;
  private readonly queryTimeoutMs: number;

  constructor(url: string, opts: { schema?: string; poolSize?: number; queryTimeoutMs?: number } = {}) {
    const split = splitSchema(url);
    this.url = split.url;
    this.schema = opts.schema ?? split.schema ?? 'airlock';
    if (!SCHEMA_NAME.test(this.schema)) throw new StoreUnavailableError(`PostgreSQL schema name "${this.schema.slice(0, 64)}" must match ${SCHEMA_NAME.source}`);
    this.poolSize = opts.poolSize ?? 16;
    const timeout = opts.queryTimeoutMs ?? split.queryTimeoutMs ?? DEFAULT_QUERY_TIMEOUT_MS;
    this.queryTimeoutMs = Number(timeout);
    if (!Number.isInteger(this.queryTimeoutMs) || this.queryTimeoutMs < 1) {
      throw new StoreUnavailableError(`PostgreSQL query_timeout_ms must be a whole number of milliseconds above 0, not "${String(timeout).slice(0, 32)}"`);
    }
  }

  private get p(): pg.Pool {
    if (!this.pool) throw new StoreUnavailableError('the PostgreSQL store is not open: call init() first');
    return this.pool;
  }

  private q(sql: string, args: unknown[] = []): Promise<pg.QueryResult<Row>> {
    return this.p.query<Row>(sql, args);
  }

  /**
   * A named prepared statement (the hot path of every call): each pooled connection parses and
   * plans it once, then only binds and executes it. The name is per store schema (search_path is
   * per connection and fixed, so a statement never runs against another schema).
   */
  private qp(name: string, sql: string, args: unknown[]): Promise<pg.QueryResult<Row>> {
    const config = { name: `airlock_${name}`, text: sql, values: args };
    return this.held?.query<Row>(config) ?? this.p.query<Row>(config);
  }

  /** qp on the relaxed pool (synchronous_commit = off): only for the writes named at relaxedPool. */
  private qr(name: string, sql: string, args: unknown[]): Promise<pg.QueryResult<Row>> {
    if (!this.relaxedPool) throw new StoreUnavailableError('the PostgreSQL store is not open: call init() first');
    const config = { name: `airlock_${name}`, text: sql, values: args };
    return this.heldRelaxed?.query<Row>(config) ?? this.relaxedPool.query<Row>(config);
  }

  async init(): Promise<void> {
    if (this.pool) return;
    const open = (max: number, extra: string) => {
      const p = new pg.Pool({
        connectionString: this.url,
        max,
        connectionTimeoutMillis: 3000,
        // A server that stops answering on an open connection (no reset, no error) fails the
        // statement here instead of holding its calls until TCP gives up; the pool then drops that
        // connection (a query error releases the client as broken).
        query_timeout: this.queryTimeoutMs,
        options: `-c search_path=${this.schema}${extra}`,
      });
      // An idle client's error (server restart) must not crash the process; the next query reports it.
      p.on('error', () => undefined);
      return p;
    };
    // A pool that holds a connection (HeldClient) has one more, so the statements that go through it
    // keep poolSize: taken out of poolSize, one statement blocked on a lock left a pool of 2 none for
    // the next (which failed after the connect timeout while the held connection sat idle).
    const pool = open(this.poolSize > 1 ? this.poolSize + 1 : this.poolSize, '');
    try {
      const c = await pool.connect();
      try {
        await c.query('BEGIN');
        // Several workers may start at once: CREATE ... IF NOT EXISTS is not race-free in PostgreSQL.
        await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`airlock-schema-${this.schema}`]);
        await c.query(`CREATE SCHEMA IF NOT EXISTS ${this.schema}`);
        await c.query(tables);
        await c.query('COMMIT');
      } catch (e) {
        await c.query('ROLLBACK').catch(() => undefined);
        throw e;
      } finally {
        c.release();
      }
    } catch (e) {
      await pool.end().catch(() => undefined);
      throw new StoreUnavailableError(
        `PostgreSQL at ${redactUrl(this.url)} is not usable: ${(e as Error).message}. Start it (e.g. \`service postgresql start\`) and check the URL, user and database.`,
      );
    }
    this.pool = pool;
    const relaxedSize = Math.max(1, Math.min(4, this.poolSize));
    this.relaxedPool = open(relaxedSize > 1 ? relaxedSize + 1 : relaxedSize, ' -c synchronous_commit=off');
    // Held out of a pool of one, a connection would leave the pool none for the other statements.
    if (this.poolSize > 1) this.held = new HeldClient(pool);
    if (relaxedSize > 1) this.heldRelaxed = new HeldClient(this.relaxedPool);
    this.held?.take();
    this.heldRelaxed?.take();
  }

  async close(): Promise<void> {
    await this.woken.settled();
    const p = this.pool;
    const r = this.relaxedPool;
    this.held?.release();
    this.heldRelaxed?.release();
    this.held = null;
    this.heldRelaxed = null;
    this.pool = null;
    this.relaxedPool = null;
    await Promise.all([p?.end(), r?.end()]);
  }

  /** Drops the whole schema (tests). */
  async dropSchema(): Promise<void> {
    await this.q(`DROP SCHEMA IF EXISTS ${this.schema} CASCADE`);
  }

  async now(): Promise<number> {
    const r = await this.q(`SELECT ${NOW} AS now`);
    return Number(r.rows[0]?.now);
  }

  // Group commit: a call goes to the server at once while fewer than GROUP_IN_FLIGHT statements of
  // its kind are under way; the calls that arrive meanwhile (many agents, many commands in one
  // fetch) then share one statement, one round trip and one commit. A lone call runs the
  // single-row statement, so a quiet store pays nothing for it.

  private readonly cardWrites = new GroupCommit<CardRow, boolean>((rows) =>
    inBatches(rows, (r) => r.card_id, (r) => this.putCardOne(r), async (rs) => {
      // Relaxed commit for tool.call cards (see relaxedPool): the claim that reads one makes it durable.
      await (rs.every((r) => r.type === 'tool.call') ? this.qr.bind(this) : this.qp.bind(this))(
        'put_cards',
        `INSERT INTO cards (card_id, type, agent_turn_id, tool_call_id, body, created_at)
         SELECT x.id, x.type, x.t, x.c, x.body, ${NOW} FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[]) AS x(id, type, t, c, body)`,
        [rs.map((r) => r.card_id), rs.map((r) => r.type), rs.map((r) => r.agent_turn_id), rs.map((r) => r.tool_call_id), rs.map((r) => r.body)],
      );
      return rs.map(() => true);
    }),
    GROUP_IN_FLIGHT,
  );

  // async: a card that cannot be serialised rejects, as a failed write does, instead of throwing.
  async putCard(card: { card_id: string; type: string; created_at: string; content: unknown; metadata?: unknown }, anchor?: Anchor): Promise<boolean> {
    return this.cardWrites.add({ card_id: card.card_id, type: card.type, agent_turn_id: anchor?.agent_turn_id ?? null, tool_call_id: anchor?.tool_call_id ?? null, body: JSON.stringify(card) });
  }

  private async putCardOne(r: CardRow): Promise<boolean> {
    try {
      await (r.type === 'tool.call' ? this.qr.bind(this) : this.qp.bind(this))('put_card', `INSERT INTO cards (card_id, type, agent_turn_id, tool_call_id, body, created_at) VALUES ($1, $2, $3, $4, $5, ${NOW})`, [
        r.card_id,
        r.type,
        r.agent_turn_id,
        r.tool_call_id,
        r.body,
      ]);
      return true;
    } catch (e) {
      if (isUniqueViolation(e)) return false;
      throw e;
    }
  }

  private readonly cardReads = new GroupCommit<string, unknown>((ids) =>
    inBatches(ids, (id) => id, async (id) => (await this.qp('get_card', 'SELECT body FROM cards WHERE card_id = $1', [id])).rows[0]?.body, async (xs) => {
      const r = await this.qp('get_cards', 'SELECT card_id, body FROM cards WHERE card_id = ANY($1::text[])', [xs]);
      const byId = new Map(r.rows.map((row) => [String(row.card_id), row.body as unknown]));
      return xs.map((id) => byId.get(id));
    }),
    GROUP_IN_FLIGHT,
  );

  getCard(cardId: string): Promise<unknown | undefined> {
    return this.cardReads.add(cardId);
  }

  async getResultCardFor(a: Anchor): Promise<unknown | undefined> {
    // The caller's read of every answer (utp/client.ts readAnswer): a prepared statement, like get_card.
    return (await this.qp('result_card_for', 'SELECT c.body FROM claims cl JOIN cards c ON c.card_id = cl.result_card_id WHERE cl.agent_turn_id = $1 AND cl.tool_call_id = $2', [a.agent_turn_id, a.tool_call_id])).rows[0]?.body;
  }

  async countResultCards(a: Anchor): Promise<number> {
    const r = await this.q("SELECT count(*) AS n FROM cards WHERE type = 'tool.result' AND agent_turn_id = $1 AND tool_call_id = $2", [a.agent_turn_id, a.tool_call_id]);
    return Number(r.rows[0]?.n);
  }

  async upsertTool(t: ToolRecord): Promise<void> {
    await this.q(
      `INSERT INTO tools (project_id, tool_name, description, parameters, target_subject, after_execution, options, signature) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
       ON CONFLICT (project_id, tool_name) DO UPDATE SET description = excluded.description, parameters = excluded.parameters,
         target_subject = excluded.target_subject, after_execution = excluded.after_execution, options = excluded.options, signature = excluded.signature`,
      [t.project_id, t.tool_name, t.description, JSON.stringify(t.parameters), t.target_subject, t.after_execution, JSON.stringify(t.options), t.signature ?? null],
    );
  }

  async getTool(projectId: string, toolName: string): Promise<ToolRecord | undefined> {
    const row = (await this.q('SELECT * FROM tools WHERE project_id = $1 AND tool_name = $2', [projectId, toolName])).rows[0];
    return row ? rowToTool(row) : undefined;
  }

  async listTools(projectId?: string): Promise<ToolRecord[]> {
    const r =
      projectId === undefined
        ? await this.q('SELECT * FROM tools ORDER BY project_id, tool_name')
        : await this.q('SELECT * FROM tools WHERE project_id = $1 ORDER BY tool_name', [projectId]);
    return r.rows.map(rowToTool);
  }

  async removeTool(projectId: string, toolName: string): Promise<boolean> {
    return ((await this.q('DELETE FROM tools WHERE project_id = $1 AND tool_name = $2', [projectId, toolName])).rowCount ?? 0) > 0;
  }

  private readonly claims = new GroupCommit<ClaimInput, { won: boolean; card: unknown }>((xs) =>
    inBatches(xs, (x) => anchorKey(x.a), (x) => this.claimOne(x), async (batch) => {
      // Inserted in anchor order: two batches that share anchors (a redelivery racing the first
      // delivery) take their key locks in the same order and cannot deadlock each other.
      const r = await this.qp(
        'claim_read_cards',
        `WITH x AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::text[], $6::bigint[], $7::text[]) AS x(t, c, card_id, context, worker_id, lease_ms, read_card_id)),
         ins AS (
           INSERT INTO claims (agent_turn_id, tool_call_id, tool_call_card_id, context, worker_id, state, lease_until, created_at, updated_at)
           SELECT t, c, card_id, context, worker_id, 'running', ${NOW} + lease_ms, ${NOW}, ${NOW} FROM x ORDER BY t, c
           ON CONFLICT DO NOTHING RETURNING agent_turn_id, tool_call_id)
         SELECT x.t, x.c, EXISTS (SELECT 1 FROM ins WHERE ins.agent_turn_id = x.t AND ins.tool_call_id = x.c) AS won,
                (SELECT body FROM cards WHERE card_id = x.read_card_id) AS card
         FROM x`,
        [
          batch.map((x) => x.a.agent_turn_id),
          batch.map((x) => x.a.tool_call_id),
          batch.map((x) => x.cardId),
          batch.map((x) => JSON.stringify(x.context)),
          batch.map((x) => x.workerId),
          batch.map((x) => x.leaseMs),
          batch.map((x) => x.readCardId),
        ],
      );
      const byAnchor = new Map(r.rows.map((row) => [anchorKey({ agent_turn_id: String(row.t), tool_call_id: String(row.c) }), row]));
      return batch.map((x) => {
        const row = byAnchor.get(anchorKey(x.a));
        return { won: row?.won === true, card: row?.card ?? undefined };
      });
    }),
    GROUP_IN_FLIGHT,
  );

  async claim(a: Anchor, cardId: string | null, workerId: string, leaseMs: number, context: Record<string, unknown>, readCardId?: string | null): Promise<ClaimOutcome & { card?: unknown }> {
    const { won, card } = await this.claims.add({ a, cardId, workerId, leaseMs, context, readCardId: readCardId ?? null });
    if (won) return { claimed: true, card };
    const existing = await this.getClaim(a);
    if (!existing) throw new Error('claim: conflicting row vanished (claims are never deleted)');
    return { claimed: false, existing, card };
  }

  private async claimOne(x: ClaimInput): Promise<{ won: boolean; card: unknown }> {
    // One statement, one round trip: the primary key decides (exactly one INSERT wins; the others
    // read the winner's row), and the optional card read comes from the statement's snapshot (the
    // caller committed the card before publishing the command). The won row is not sent back
    // (to_jsonb of it and its parse cost ~45 µs a call, scratch loop of 1,500 claims).
    const r = await this.qp(
      'claim_read_card',
      `WITH ins AS (
         INSERT INTO claims (agent_turn_id, tool_call_id, tool_call_card_id, context, worker_id, state, lease_until, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, 'running', ${NOW} + $6, ${NOW}, ${NOW}) ON CONFLICT DO NOTHING RETURNING 1)
       SELECT EXISTS (SELECT 1 FROM ins) AS won, (SELECT body FROM cards WHERE card_id = $7) AS card`,
      [x.a.agent_turn_id, x.a.tool_call_id, x.cardId, JSON.stringify(x.context), x.workerId, x.leaseMs, x.readCardId],
    );
    const row = r.rows[0];
    return { won: row?.won === true, card: row?.card ?? undefined };
  }

  async getClaim(a: Anchor): Promise<ClaimRecord | undefined> {
    const row = (await this.qp('get_claim', 'SELECT * FROM claims WHERE agent_turn_id = $1 AND tool_call_id = $2', [a.agent_turn_id, a.tool_call_id])).rows[0];
    return row ? rowToClaim(row) : undefined;
  }

  async heartbeat(workerId: string, leaseMs: number, running: Anchor[]): Promise<Anchor[]> {
    if (running.length === 0) return [];
    // SKIP LOCKED: a claim row locked by an answer under way (several rows, in its own order) is
    // renewed next time instead of waiting on it, so the two never deadlock.
    const r = await this.q(
      `WITH h AS (
         SELECT c.agent_turn_id, c.tool_call_id FROM claims c JOIN unnest($3::text[], $4::text[]) AS x(t, k) ON c.agent_turn_id = x.t AND c.tool_call_id = x.k
         WHERE c.worker_id = $1 AND c.state = 'running' FOR UPDATE OF c SKIP LOCKED)
       UPDATE claims SET lease_until = ${NOW} + $2, updated_at = ${NOW} FROM h
       WHERE claims.agent_turn_id = h.agent_turn_id AND claims.tool_call_id = h.tool_call_id AND claims.state = 'running'
       RETURNING claims.agent_turn_id, claims.tool_call_id, claims.cancel_requested`,
      [workerId, leaseMs, running.map((a) => a.agent_turn_id), running.map((a) => a.tool_call_id)],
    );
    return r.rows.filter((x) => x.cancel_requested === true).map((x) => ({ agent_turn_id: String(x.agent_turn_id), tool_call_id: String(x.tool_call_id) }));
  }

  async takeOverExpired(workerId: string, leaseMs: number, limit: number): Promise<ClaimRecord[]> {
    const r = await this.q(SWEEP_SQL.expired, [workerId, leaseMs, limit]);
    return r.rows.map(rowToClaim);
  }

  private readonly answers = new GroupCommit<AnswerInput, AnswerOutcome | 'not-owner'>((xs) =>
    inBatches(xs, (x) => anchorKey(x), (x) => this.answerOne(x), async (batch) => {
      // One statement for the batch: each call's claim update, card and report land together or
      // not at all (a unique violation aborts the statement, and each call is then answered alone).
      const r = await this.qp(
        'answers',
        `WITH x AS (SELECT * FROM unnest($1::text[], $2::jsonb[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $7::text[], $8::text[], $9::jsonb[])
                      AS x(card_id, wakeup, t, c, worker_id, body, agent_id, kind, payload)),
         u AS (
           UPDATE claims SET state = 'answered', result_card_id = x.card_id, wakeup = x.wakeup, updated_at = ${NOW}
           FROM x WHERE claims.agent_turn_id = x.t AND claims.tool_call_id = x.c AND claims.state = 'running' AND claims.worker_id = x.worker_id
           RETURNING x.*),
         cd AS (
           INSERT INTO cards (card_id, type, agent_turn_id, tool_call_id, body, created_at)
           SELECT card_id, 'tool.result', t, c, body, ${NOW} FROM u RETURNING 1),
         i AS (
           INSERT INTO inbox (agent_id, agent_turn_id, tool_call_id, kind, payload, created_at)
           SELECT agent_id, t, c, kind, payload, ${NOW} FROM u RETURNING 1)
         SELECT t, c FROM u`,
        [
          batch.map((x) => x.card.card_id),
          batch.map((x) => JSON.stringify(x.wakeup)),
          batch.map((x) => x.agent_turn_id),
          batch.map((x) => x.tool_call_id),
          batch.map((x) => x.worker_id),
          batch.map((x) => JSON.stringify(x.card)),
          batch.map((x) => x.report.agent_id),
          batch.map((x) => x.report.kind),
          batch.map((x) => JSON.stringify(x.report.payload)),
        ],
      );
      const landed = new Set(r.rows.map((row) => anchorKey({ agent_turn_id: String(row.t), tool_call_id: String(row.c) })));
      return batch.map((x): AnswerOutcome | 'not-owner' => (landed.has(anchorKey(x)) ? { ok: true } : 'not-owner'));
    }),
    GROUP_IN_FLIGHT,
  );

  async answer(a: AnswerInput): Promise<AnswerOutcome> {
    const outcome = await this.answers.add(a);
    return outcome === 'not-owner' ? { ok: false, reason: 'not-owner', existing: await this.getClaim(a) } : outcome;
  }

  private async answerOne(a: AnswerInput, takeover = false): Promise<AnswerOutcome | 'not-owner'> {
    // One statement = one implicit transaction and one round trip: the claim update, the card and
    // the report land together or not at all (a unique violation aborts the whole statement). The
    // inserts run to completion unread (PostgreSQL runs every data-modifying WITH once, read or not).
    let landed: boolean;
    try {
      const r = await this.qp(
        takeover ? 'answer_takeover' : 'answer',
        `WITH u AS (
           UPDATE claims SET state = 'answered', result_card_id = $1, wakeup = $2, updated_at = ${NOW}
           WHERE agent_turn_id = $3 AND tool_call_id = $4 AND state = 'running' AND worker_id = $5 RETURNING 1),
         c AS (
           INSERT INTO cards (card_id, type, agent_turn_id, tool_call_id, body, created_at)
           SELECT $1, 'tool.result', $3, $4, $6, ${NOW} WHERE EXISTS (SELECT 1 FROM u)),
         i AS (
           INSERT INTO inbox (agent_id, agent_turn_id, tool_call_id, kind, payload, created_at)
           SELECT $7, $3, $4, $8, $9, ${NOW} WHERE EXISTS (SELECT 1 FROM u) ${takeover ? INBOX_TAKEOVER : ''})
         SELECT count(*) AS u FROM u`,
        [a.card.card_id, JSON.stringify(a.wakeup), a.agent_turn_id, a.tool_call_id, a.worker_id, JSON.stringify(a.card), a.report.agent_id, a.report.kind, JSON.stringify(a.report.payload)],
      );
      landed = Number(r.rows[0]?.u) === 1;
    } catch (e) {
      // A report row for this anchor that the answer did not write: the answer takes its place.
      if (!takeover && isInboxConflict(e)) return this.answerOne(a, true);
      if (!isUniqueViolation(e)) throw e;
      return { ok: false, reason: 'duplicate', existing: await this.getClaim(a) };
    }
    return landed ? { ok: true } : 'not-owner';
  }

  /** One write for the flags of a WOKEN_FLUSH_MS batch (see Store.markWoken). */
  private readonly woken = new DelayedBatch<Anchor>((anchors) =>
    this.qr(
      'mark_woken',
      `UPDATE claims SET woken = true FROM unnest($1::text[], $2::text[]) AS x(t, c)
               WHERE claims.agent_turn_id = x.t AND claims.tool_call_id = x.c`,
      [anchors.map((x) => x.agent_turn_id), anchors.map((x) => x.tool_call_id)],
    ).then(() => undefined),
    WOKEN_FLUSH_MS,
  );

  markWoken(a: Anchor): Promise<void> {
    return this.woken.add(a);
  }

  async unwokenAnswers(olderThanMs: number, limit: number): Promise<ClaimRecord[]> {
    const r = await this.q(SWEEP_SQL.unwoken, [olderThanMs, limit]);
    return r.rows.map(rowToClaim);
  }

  async requestCancel(a: Anchor): Promise<ClaimRecord | undefined> {
    await this.q("UPDATE claims SET cancel_requested = true WHERE agent_turn_id = $1 AND tool_call_id = $2 AND state = 'running'", [a.agent_turn_id, a.tool_call_id]);
    return this.getClaim(a);
  }

  async listInbox(filter: { agent_id?: string; anchor?: Anchor; limit?: number } = {}): Promise<InboxReport[]> {
    const where: string[] = [];
    const args: unknown[] = [];
    if (filter.agent_id !== undefined) {
      args.push(filter.agent_id);
      where.push(`agent_id = $${args.length}`);
    }
    if (filter.anchor) {
      args.push(filter.anchor.agent_turn_id, filter.anchor.tool_call_id);
      where.push(`agent_turn_id = $${args.length - 1} AND tool_call_id = $${args.length}`);
    }
    args.push(filter.limit ?? 1000);
    const r = await this.q(`SELECT * FROM inbox ${where.length ? 'WHERE ' + where.join(' AND ') : ''} ORDER BY id LIMIT $${args.length}`, args);
    return r.rows.map(rowToInbox);
  }

  async createApproval(a: Omit<ApprovalRecord, 'state' | 'decided_by' | 'reason' | 'decided_at' | 'created_at' | 'signature'>): Promise<ApprovalRecord> {
    const r = await this.q(
      `INSERT INTO approvals (id, agent_turn_id, tool_call_id, project_id, tool_name, summary, state, created_at, expires_at)
       VALUES ($1, $2, $3, $4, $5, $6, 'pending', ${NOW}, $7) RETURNING *`,
      [a.id, a.agent_turn_id, a.tool_call_id, a.project_id, a.tool_name, JSON.stringify(a.summary), a.expires_at],
    );
    return rowToApproval(r.rows[0] as Row);
  }

  async getApproval(id: string): Promise<ApprovalRecord | undefined> {
    const row = (await this.q('SELECT * FROM approvals WHERE id = $1', [id])).rows[0];
    return row ? rowToApproval(row) : undefined;
  }

  async listApprovals(state?: ApprovalState): Promise<ApprovalRecord[]> {
    const r = state === undefined ? await this.q('SELECT * FROM approvals ORDER BY created_at') : await this.q('SELECT * FROM approvals WHERE state = $1 ORDER BY created_at', [state]);
    return r.rows.map(rowToApproval);
  }

  async decideApproval(id: string, state: Exclude<ApprovalState, 'pending'>, by: string | null, reason: string | null, signature: string | null = null): Promise<boolean> {
    const r = await this.q(`UPDATE approvals SET state = $2, decided_by = $3, reason = $4, signature = $5, decided_at = ${NOW} WHERE id = $1 AND state = 'pending'`, [id, state, by, reason, signature]);
    return r.rowCount === 1;
  }
}
