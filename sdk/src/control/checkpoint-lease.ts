import type { Logger } from "pino";
import { recordEvent } from "../telemetry/metrics.js";
import { nowTs, sleep } from "../util/deadline.js";
import type { Mutex } from "../util/mutex.js";

/** Deadline (seconds from now) a lease expiry gives itself to reopen, and its retry interval. */
export const LEASE_REOPEN_SECONDS = 30;

/** What a {@link CheckpointLease} needs of the control plane it watches over. */
export interface CheckpointLeaseOptions {
  /** Seconds past a call's deadline the lease lasts (`lease_grace_seconds`). */
  readonly graceSeconds: number;
  /** The control plane's transition lock: an expiry resumes under it. */
  readonly lock: Mutex;
  /** Where an expiry, and a reopen that failed, are logged. */
  readonly log: Logger;
  /** The participant kind, an attribute of the `lease_expired` event. */
  readonly kind: string;
  /** The active checkpoint's ID, or null: a lease watches the checkpoint active when renewed. */
  readonly activeCheckpoint: () => string | null;
  /**
   * Resumes checkpoint `id` on the participant's own (called under `lock`), by `deadlineTs`;
   * a throw is logged and retried every {@link LEASE_REOPEN_SECONDS}.
   */
  readonly resume: (id: string, deadlineTs: number) => Promise<void>;
}

/**
 * The lease of the active checkpoint: when it expires, and the watcher that resumes the
 * checkpoint on its own once it has (a controller that went quiet must not leave admission
 * closed for good). Renewals only ever extend it.
 */
export class CheckpointLease {
  readonly #options: CheckpointLeaseOptions;
  #expiresAt: number | null = null;
  #watcher: AbortController | null = null;
  #closed = false;

  constructor(options: CheckpointLeaseOptions) {
    this.#options = options;
  }

  /** When the lease expires (Unix seconds), or null when no lease is held. */
  get expiresAt(): number | null {
    return this.#expiresAt;
  }

  /**
   * Extends the lease to `deadlineTs + graceSeconds` (never shrinks it), and starts watching
   * the active checkpoint when nothing watches yet.
   */
  renew(deadlineTs: number): void {
    this.#expiresAt = Math.max(this.#expiresAt ?? 0, deadlineTs + this.#options.graceSeconds);
    const id = this.#options.activeCheckpoint();
    if (this.#watcher === null && id !== null && !this.#closed) {
      const watcher = new AbortController();
      this.#watcher = watcher;
      this.#watch(id, watcher).catch(() => undefined);
    }
  }

  /** Drops the lease and stops its watcher (the checkpoint ended). */
  clear(): void {
    this.#expiresAt = null;
    this.#stopWatcher();
  }

  /** Stops the watcher for good (server shutdown); the lease's value is left as it is. */
  close(): void {
    this.#closed = true;
    this.#stopWatcher();
  }

  #stopWatcher(): void {
    this.#watcher?.abort();
    this.#watcher = null;
  }

  async #watch(id: string, watcher: AbortController): Promise<void> {
    const { lock, log, kind, activeCheckpoint, resume } = this.#options;
    const { signal } = watcher;
    try {
      while (!signal.aborted) {
        const expiresAt = this.#expiresAt;
        if (expiresAt === null || activeCheckpoint() !== id) return;
        const wait = expiresAt * 1000 - Date.now();
        if (wait > 0) {
          await sleep(wait, signal).catch(() => undefined);
          continue;
        }
        try {
          const finished = await lock.runExclusive(async () => {
            if (activeCheckpoint() !== id || this.#expiresAt === null) return true;
            if (this.#expiresAt * 1000 > Date.now()) return false; // renewed meanwhile
            log.warn({ checkpointId: id }, "lease expired: resuming on our own");
            recordEvent("lease_expired", { kind });
            await resume(id, nowTs() + LEASE_REOPEN_SECONDS);
            return true;
          });
          if (finished) return;
        } catch (error) {
          log.error(
            { err: error, checkpointId: id },
            `lease expiry could not reopen; retrying in ${LEASE_REOPEN_SECONDS} s`,
          );
          await sleep(LEASE_REOPEN_SECONDS * 1000, signal).catch(() => undefined);
        }
      }
    } finally {
      if (this.#watcher === watcher) this.#watcher = null;
    }
  }
}
