/**
 * A FIFO async mutex. Callers run one at a time in arrival order; `runExclusive` releases the
 * lock even when the callback throws.
 */
export class Mutex {
  #tail: Promise<void> = Promise.resolve();
  #held = false;

  /** Whether some caller holds the lock now. */
  get locked(): boolean {
    return this.#held;
  }

  /** Runs `fn` once every earlier caller has finished, and returns its result. */
  async runExclusive<T>(fn: () => T | Promise<T>): Promise<T> {
    let release!: () => void;
    const next = new Promise<void>((resolve) => {
      release = resolve;
    });
    const previous = this.#tail;
    this.#tail = previous.then(() => next);
    await previous;
    this.#held = true;
    try {
      return await fn();
    } finally {
      this.#held = false;
      release();
    }
  }
}
