import { Mutex } from "../../util/mutex.js";

/**
 * One FIFO {@link Mutex} per string key, created on demand and forgotten when idle so the map
 * holds only keys in use. Several keys are taken in sorted order, so two multi-key holders
 * never wait on each other in a cycle.
 */
export class KeyedMutex {
  readonly #entries = new Map<string, { mutex: Mutex; users: number }>();

  /** How many keys have a holder or a waiter now. */
  get size(): number {
    return this.#entries.size;
  }

  /** Runs `fn` while holding every key of `keys` (repeats ignored). */
  async run<T>(keys: Iterable<string>, fn: () => Promise<T>): Promise<T> {
    const sorted = [...new Set(keys)].sort();
    const step = async (index: number): Promise<T> => {
      const key = sorted[index];
      if (key === undefined) return await fn();
      return await this.#runOne(key, () => step(index + 1));
    };
    return await step(0);
  }

  async #runOne<T>(key: string, fn: () => Promise<T>): Promise<T> {
    let entry = this.#entries.get(key);
    if (entry === undefined) {
      entry = { mutex: new Mutex(), users: 0 };
      this.#entries.set(key, entry);
    }
    entry.users += 1;
    try {
      return await entry.mutex.runExclusive(fn);
    } finally {
      entry.users -= 1;
      if (entry.users === 0) this.#entries.delete(key);
    }
  }
}
