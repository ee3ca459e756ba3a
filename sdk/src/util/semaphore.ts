import { fireAt } from "./deadline.js";
import { deferred, type Deferred } from "./deferred.js";

/** A counting semaphore with FIFO waiters, a bounded wait and abortable acquisition. */
export class Semaphore {
  #free: number;
  readonly #waiters: Deferred<boolean>[] = [];

  constructor(readonly size: number) {
    this.#free = size;
  }

  /** Slots free now. */
  get free(): number {
    return this.#free;
  }

  /** Callers waiting for a slot. */
  get waiting(): number {
    return this.#waiters.length;
  }

  /**
   * Takes a slot, waiting at most `timeoutMs` (null: no bound). Resolves true with a slot
   * (release it with {@link release}), false on timeout; rejects with the signal's reason.
   */
  async acquire(timeoutMs: number | null, signal?: AbortSignal): Promise<boolean> {
    signal?.throwIfAborted();
    if (this.#free > 0 && this.#waiters.length === 0) {
      this.#free -= 1;
      return true;
    }
    const waiter = deferred<boolean>();
    this.#waiters.push(waiter);
    const leave = (): void => {
      const at = this.#waiters.indexOf(waiter);
      if (at >= 0) this.#waiters.splice(at, 1);
    };
    // Kept alive, as before: a waiter gives up on time even in a process with nothing else left.
    const cancel =
      timeoutMs === null
        ? null
        : fireAt(
            Date.now() + timeoutMs,
            () => {
              leave();
              waiter.resolve(false);
            },
            true,
          );
    const onAbort = (): void => {
      leave();
      waiter.reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      return await waiter.promise;
    } finally {
      cancel?.();
      signal?.removeEventListener("abort", onAbort);
    }
  }

  /** Gives a slot back: to the longest waiter, else to the pool. */
  release(): void {
    const next = this.#waiters.shift();
    if (next !== undefined) next.resolve(true);
    else this.#free += 1;
  }
}
