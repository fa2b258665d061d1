/**
 * Collects the items added during `delayMs` and flushes them together, once, after the current I/O
 * (so a synchronous store write never delays a socket write queued before it). Every `add`
 * resolves when its batch's flush has committed.
 */
export class DelayedBatch<T> {
  private pending: { items: T[]; done: Promise<void> } | undefined;
  /** Settles when every batch so far has been written (one may still be writing when the next collects). */
  private last: Promise<void> = Promise.resolve();

  constructor(
    private readonly flush: (items: T[]) => void | Promise<void>,
    private readonly delayMs: number,
  ) {}

  add(item: T): Promise<void> {
    if (this.pending) {
      this.pending.items.push(item);
      return this.pending.done;
    }
    const items = [item];
    const done = new Promise<void>((resolve, reject) =>
      setTimeout(() => {
        this.pending = undefined;
        // Through a promise: a flush that throws (e.g. the store closed meanwhile) rejects this
        // batch's callers instead of throwing inside the timer.
        Promise.resolve()
          .then(() => this.flush(items))
          .then(() => resolve(), reject);
      }, this.delayMs),
    );
    this.pending = { items, done };
    const previous = this.last;
    this.last = done.then(
      () => previous,
      () => previous,
    );
    return done;
  }

  /** Waits for the batch being collected or written, if any (a store's close() does). */
  async settled(): Promise<void> {
    await this.last;
  }
}

/** A flush's result for one item that failed on its own: only that item's caller is rejected. */
export class ItemFailed {
  constructor(readonly error: unknown) {}
}

/** Runs `f` for one item and turns a throw into that item's ItemFailed. */
export async function settleItem<T, R>(f: (x: T) => Promise<R> | R, x: T): Promise<R | ItemFailed> {
  try {
    return await f(x);
  } catch (e) {
    return new ItemFailed(e);
  }
}

/**
 * Group commit without added latency: an item goes to the store at once while fewer than
 * `maxInFlight` flushes are under way; items that arrive meanwhile wait and go together in the
 * next flush. A lone call never waits, and under load the statements (and commits) per call fall.
 * `holdTurn` keeps a synchronous flush (SQLite) counted as under way until the event loop's next
 * turn, so the rest of the turn's items are gathered instead of each running alone. The flush
 * returns one result per item (an ItemFailed rejects that item alone); a flush that throws
 * rejects its whole batch.
 */
export class GroupCommit<T, R> {
  private queue: { item: T; resolve: (r: R) => void; reject: (e: unknown) => void }[] = [];
  private inFlight = 0;

  constructor(
    private readonly flush: (items: T[]) => Promise<(R | ItemFailed)[]> | (R | ItemFailed)[],
    private readonly opts: { maxInFlight: number; holdTurn?: boolean },
  ) {}

  add(item: T): Promise<R> {
    const p = new Promise<R>((resolve, reject) => this.queue.push({ item, resolve, reject }));
    this.pump();
    return p;
  }

  private pump(): void {
    while (this.inFlight < this.opts.maxInFlight && this.queue.length > 0) {
      const batch = this.queue;
      this.queue = [];
      this.inFlight++;
      const done = () => {
        this.inFlight--;
        this.pump();
      };
      let out: Promise<(R | ItemFailed)[]>;
      try {
        out = Promise.resolve(this.flush(batch.map((x) => x.item)));
      } catch (e) {
        out = Promise.reject(e);
      }
      out
        .then(
          (rs) =>
            batch.forEach((x, i) => {
              const r = rs[i];
              if (r instanceof ItemFailed) x.reject(r.error);
              else x.resolve(r as R);
            }),
          (e) => batch.forEach((x) => x.reject(e)),
        )
        .finally(() => (this.opts.holdTurn ? setImmediate(done) : done()));
    }
  }
}
