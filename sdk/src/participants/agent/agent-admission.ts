/**
 * The admission cycle of an agent with session hooks: open, or closed by a checkpoint until it
 * reopens, with the restarts earlier prepare stages reported carried while it is closed.
 *
 * @module
 */
import { deferred, type Deferred } from "../../util/deferred.js";

/** Whether agent admission is open, what reopens it, and the restarts carried meanwhile. */
export class AgentAdmission {
  #accepting = true;
  #opened: Deferred<void> | null = null;
  /** Capture keys earlier prepare stages reported as restarts, until admission reopens. */
  #carried: ReadonlySet<string> = new Set();

  /** Whether admission is open (no checkpoint). */
  get accepting(): boolean {
    return this.#accepting;
  }

  /**
   * Resolves when admission next reopens; null while no checkpoint holds it. A waiter loops
   * on it in its own synchronous run, so what it does next happens while admission is open.
   */
  get reopened(): Promise<void> | null {
    return this.#opened?.promise ?? null;
  }

  /** Whether an earlier prepare stage reported the episode of capture key `key` as a restart. */
  carries(key: string): boolean {
    return this.#carried.has(key);
  }

  /** Closes admission; `restarts` (when given) replaces the carried restarts. */
  close(restarts: readonly string[] | undefined): void {
    this.#accepting = false;
    this.#opened ??= deferred<void>();
    if (restarts !== undefined) this.#carried = new Set(restarts);
  }

  /**
   * Reopens admission and drops the carried restarts; returns what resumes the waiters, for the
   * caller to call once it has woken its parked sessions.
   */
  open(): () => void {
    this.#accepting = true;
    this.#carried = new Set();
    const opened = this.#opened;
    this.#opened = null;
    return () => opened?.resolve();
  }
}
