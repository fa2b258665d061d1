/**
 * Collects the items added during one turn of the event loop (or, with `delayMs`, during that long)
 * and flushes them together, once, after the current I/O (so a synchronous store write never
 * delays a socket write queued before it). Every `add` resolves when its batch's flush has
 * committed, with the flush's result for its item (the flush returns one result per item, in
 * order; or nothing for `void`).
 */
export class TurnBatch<T, R = void> {
  private pending: { items: T[]; done: Promise<R[] | void> } | undefined;

  constructor(
    private readonly flush: (items: T[]) => Promise<R[] | void> | R[] | void,
    private readonly delayMs = 0,
  ) {}

  add(item: T): Promise<R> {
    let p = this.pending;
    if (!p) {
      const items: T[] = [];
      const done = new Promise<R[] | void>((resolve, reject) => {
        const run = () => {
          this.pending = undefined;
          // Through a promise: a flush that throws (e.g. the store closed meanwhile) rejects this
          // batch's callers instead of throwing inside the timer.
          Promise.resolve()
            .then(() => this.flush(items))
            .then(resolve, reject);
        };
        if (this.delayMs > 0) setTimeout(run, this.delayMs);
        else setImmediate(run);
      });
      p = this.pending = { items, done };
    }
    const index = p.items.push(item) - 1;
    return p.done.then((results) => (results ? results[index] : undefined) as R);
  }

  /** Waits for the batch being collected, if any (a store's close() does). */
  async settled(): Promise<void> {
    await this.pending?.done.catch(() => undefined);
  }
}
