/**
 * A one-shot timer that can be suspended and resumed, keeping the remaining time: the clock of
 * an episode deadline, which stops while the episode is parked for a checkpoint.
 *
 * @module
 */

/** setTimeout's largest delay; longer waits are re-armed. */
const MAX_TIMER_MS = 2_147_483_647;

/** Where a {@link PausableTimer} is: counting down, stopped with time left, or done. */
export type PausableTimerState = "running" | "suspended" | "fired" | "disposed";

/**
 * Calls `onFire` once, after `ms` milliseconds of running (not suspended) time.
 *
 * ## Rules
 * - It starts `suspended`; {@link resume} starts the countdown.
 * - {@link suspend} and {@link resume} are idempotent; the remaining time is kept across them.
 * - After it fired or was disposed, every call is a no-op and never throws.
 * - Its Node timer is unref'd, so it never keeps a process alive, and at most one is armed.
 *
 * @example
 * const timer = new PausableTimer(5_000, () => controller.abort());
 * timer.resume(); // counting
 * timer.suspend(); // stopped; remainingMs kept
 * timer.dispose(); // cleared for good
 */
export class PausableTimer {
  #remainingMs: number;
  #armedAt = 0;
  #timer: NodeJS.Timeout | null = null;
  #state: PausableTimerState = "suspended";
  readonly #onFire: () => void;

  /**
   * @param ms - Running time until `onFire`, in milliseconds (≤ 0 fires on the first resume,
   * from a timer, never synchronously).
   * @param onFire - Called once when the time is used up.
   */
  constructor(ms: number, onFire: () => void) {
    this.#remainingMs = Math.max(0, ms);
    this.#onFire = onFire;
  }

  /** Where the timer is. */
  get state(): PausableTimerState {
    return this.#state;
  }

  /** Running time left, in milliseconds (0 once fired or disposed). */
  get remainingMs(): number {
    if (this.#state === "running") {
      return Math.max(0, this.#remainingMs - (Date.now() - this.#armedAt));
    }
    return this.#state === "suspended" ? this.#remainingMs : 0;
  }

  /** Stops the countdown, keeping the remaining time. */
  suspend(): void {
    if (this.#state !== "running") return;
    this.#remainingMs = this.remainingMs;
    this.#clear();
    this.#state = "suspended";
  }

  /** Continues the countdown from the remaining time. */
  resume(): void {
    if (this.#state !== "suspended") return;
    this.#state = "running";
    this.#arm();
  }

  /** Clears the timer for good; `onFire` will not be called. */
  dispose(): void {
    if (this.#state === "fired" || this.#state === "disposed") return;
    this.#clear();
    this.#state = "disposed";
  }

  #arm(): void {
    this.#armedAt = Date.now();
    this.#timer = setTimeout(() => this.#tick(), Math.min(this.#remainingMs, MAX_TIMER_MS));
    this.#timer.unref?.();
  }

  #tick(): void {
    this.#timer = null;
    const left = this.remainingMs;
    if (left > 0) {
      // Woken early (the delay was capped, or the clock is coarse): wait for the rest.
      this.#remainingMs = left;
      this.#arm();
      return;
    }
    this.#state = "fired";
    this.#remainingMs = 0;
    this.#onFire();
  }

  #clear(): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
  }
}
