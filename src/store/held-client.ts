import type pg from 'pg';

/** pg's Client has ref() and unref() (pg 8; the pool's allowExitOnIdle uses them); @types/pg leaves them out. */
type Held = pg.PoolClient & { ref(): void; unref(): void };

/**
 * One connection of a pool kept checked out, for statements that find it idle. pg's pool takes an
 * idle client on the next tick and arms a checkout timer for each statement; a call makes four
 * statements in a row, and on a 2-core VM skipping that took about 0.1 ms off a UTP call's p50 (lower
 * in 9 of 10 pairs of bench:utp's timeline, alternated; docs/benchmarks.md). It also writes the
 * statement before query() returns. While it is busy (calls at once), a statement goes through the
 * pool as before.
 *
 * A connection that failed in any way (a statement's error, a timeout, the server gone) is given back
 * to the pool as broken, which closes it, and another is taken in the background: after a timeout its
 * state is unknown, and the pool does the same with every client whose statement failed.
 */
export class HeldClient {
  private client: Held | null = null;
  private busy = false;
  private taking = false;
  private closed = false;
  /** When the held connection last finished a statement (or was taken): performance.now(). */
  private usedAt = 0;
  /**
   * The pool closes a connection idle this long (pg-pool's idleTimeoutMillis, 10 s; 0: never): the held
   * one is not used after as long either, but closed and replaced. A connection quiet for minutes may be
   * gone without a word (a NAT or firewall forgot it, a failover moved the server): through the pool,
   * the next statement would open a new connection; on it, it would wait out query_timeout_ms and fail.
   */
  private readonly idleMs: number;

  constructor(private readonly pool: pg.Pool) {
    this.idleMs = pool.options.idleTimeoutMillis || Infinity;
  }

  /** The statement on the held connection, or undefined when there is none idle (use the pool). */
  query<R extends pg.QueryResultRow>(config: pg.QueryConfig): Promise<pg.QueryResult<R>> | undefined {
    let c = this.client;
    // Closed under it with the event not yet handled (a socket destroyed in this very tick): the pool's
    // own next-tick checkout would have seen it go, so this does not use it either.
    if (c?.connection.stream.destroyed) {
      this.drop(c, new Error('the held PostgreSQL connection was closed'));
      c = null;
    }
    if (c && !this.busy && performance.now() - this.usedAt >= this.idleMs) {
      this.drop(c, new Error('the held PostgreSQL connection was idle too long'));
      c = null;
    }
    if (!c || this.busy) {
      if (!c) this.take();
      return undefined;
    }
    this.busy = true;
    c.ref();
    return c.query<R>(config).then(
      (r) => {
        this.busy = false;
        this.usedAt = performance.now();
        c.unref();
        if (this.closed && this.client === c) this.release();
        return r;
      },
      (e: unknown) => {
        this.busy = false;
        c.unref();
        this.drop(c, e);
        throw e;
      },
    );
  }

  /** Gives the connection back, after its statement if one is under way (the pool's end waits for every client out). */
  release(): void {
    this.closed = true;
    if (this.busy) return;
    const c = this.client;
    this.client = null;
    c?.ref(); // back in the pool, as the pool keeps its own
    c?.release();
  }

  /** Takes a connection out of the pool for the next statements (again after one failed). */
  take(): void {
    if (this.taking || this.closed) return;
    this.taking = true;
    this.pool.connect().then(
      (taken) => {
        const c = taken as Held;
        this.taking = false;
        if (this.closed) return c.release();
        // Out of the pool, nobody else listens: a connection that breaks while idle here (a server
        // restart) must not crash the process; the next statement goes through the pool.
        c.on('error', (e) => this.drop(c, e));
        // Idle, it keeps no process alive (the pool's idle connections close after 10 s; this one
        // would never): referenced only while a statement is on it.
        c.unref();
        this.client = c;
        this.usedAt = performance.now();
      },
      () => {
        // The server is unreachable: the statements report it through the pool; tried again at the next one.
        this.taking = false;
      },
    );
  }

  /** Gives it back as broken: the pool closes it (left unreferenced, so closing one that is gone keeps no process alive). */
  private drop(c: Held, e: unknown): void {
    if (this.client !== c) return;
    this.client = null;
    c.release(e instanceof Error ? e : new Error(String(e)));
  }
}
