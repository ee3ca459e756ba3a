/**
 * One FIFO lock per string key, created on demand and forgotten when idle so the map holds only
 * keys in use. Several keys are taken in sorted order, so two multi-key holders never wait on
 * each other in a cycle.
 *
 * A free key is taken at once, without a promise: a restore or commit locks thousands of keys
 * no one else holds, and a turn of the event loop per key cost more than the work they guard.
 */
export class KeyedMutex {
  /**
   * Each held key's waiters, first come first served; null while it has none (no array per key
   * for the thousands a batch takes). A key is in the map only while held.
   */
  readonly #entries = new Map<string, (() => void)[] | null>();

  /** How many keys have a holder or a waiter now. */
  get size(): number {
    return this.#entries.size;
  }

  /** Runs `fn` while holding every key of `keys` (repeats ignored). */
  async run<T>(keys: Iterable<string>, fn: () => Promise<T>): Promise<T> {
    const sorted = [...new Set(keys)].sort();
    let taken = 0;
    try {
      for (; taken < sorted.length; taken++) {
        const wait = this.#acquire(sorted[taken] as string);
        if (wait !== null) await wait;
      }
      return await fn();
    } finally {
      for (let i = 0; i < taken; i++) this.#release(sorted[i] as string);
    }
  }

  /** Takes `key` now (null), or returns the promise of its turn, which then holds it. */
  #acquire(key: string): Promise<void> | null {
    const waiters = this.#entries.get(key);
    if (waiters === undefined) {
      this.#entries.set(key, null);
      return null;
    }
    return new Promise<void>((resolve) => {
      if (waiters === null) this.#entries.set(key, [resolve]);
      else waiters.push(resolve);
    });
  }

  /** Hands `key` to its next waiter, or forgets it. */
  #release(key: string): void {
    const next = this.#entries.get(key)?.shift();
    if (next !== undefined) next();
    else this.#entries.delete(key);
  }
}
