/** A held key's waiters, first come first served (a key is in the map only while held). */
interface Entry {
  readonly waiters: (() => void)[];
}

/**
 * One FIFO lock per string key, created on demand and forgotten when idle so the map holds only
 * keys in use. Several keys are taken in sorted order, so two multi-key holders never wait on
 * each other in a cycle.
 *
 * A free key is taken at once, without a promise: a restore or commit locks thousands of keys
 * no one else holds, and a turn of the event loop per key cost more than the work they guard.
 */
export class KeyedMutex {
  readonly #entries = new Map<string, Entry>();

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
    const entry = this.#entries.get(key);
    if (entry === undefined) {
      this.#entries.set(key, { waiters: [] });
      return null;
    }
    return new Promise<void>((resolve) => entry.waiters.push(resolve));
  }

  /** Hands `key` to its next waiter, or forgets it. */
  #release(key: string): void {
    const entry = this.#entries.get(key) as Entry;
    const next = entry.waiters.shift();
    if (next !== undefined) next();
    else this.#entries.delete(key);
  }
}
