/**
 * Collects the items added during one turn of the event loop and flushes them together, once,
 * after the current I/O (so a synchronous store write never delays a socket write queued before
 * it). Every `add` of a turn resolves when that turn's flush has committed.
 */
export class TurnBatch<T> {
  private pending: { items: T[]; done: Promise<void> } | undefined;

  constructor(private readonly flush: (items: T[]) => void | Promise<void>) {}

  add(item: T): Promise<void> {
    if (this.pending) {
      this.pending.items.push(item);
      return this.pending.done;
    }
    const items = [item];
    const done = new Promise<void>((resolve, reject) =>
      setImmediate(() => {
        this.pending = undefined;
        // Through a promise: a flush that throws (e.g. the store closed meanwhile) rejects this
        // batch's callers instead of throwing inside the timer.
        Promise.resolve()
          .then(() => this.flush(items))
          .then(() => resolve(), reject);
      }),
    );
    this.pending = { items, done };
    return done;
  }

  /** Waits for the batch being collected, if any (a store's close() does). */
  async settled(): Promise<void> {
    await this.pending?.done.catch(() => undefined);
  }
}
