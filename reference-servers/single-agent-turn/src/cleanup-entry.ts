/**
 * One entry of an episode's cleanup registry (see docs/environment-server.md):
 * a session close that runs at most once successfully, now or in the final unwind.
 */

/**
 * A session close registered for the final unwind that can also be run earlier.
 *
 * ## Rules
 * - The entry stays active until its callback succeeds; {@link close} on an inactive entry does
 *   nothing, so a close that already succeeded is not repeated by the unwind.
 * - Concurrent closes are serialized: the second waits for the first, then sees whether it
 *   still has anything to do.
 * - Each run gets the per-call bound (`cleanup_timeout_seconds`, in ms); a failure or a timeout
 *   leaves the entry active for the unwind to retry.
 *
 * @example
 * const agent = new CleanupEntry("agent session", (timeoutMs) => closeAgent(timeoutMs), 30_000);
 * onCleanup(() => agent.close()); // the unwind retries unless it already succeeded
 * await agent.close(); // now
 */
export class CleanupEntry {
  readonly name: string;
  readonly #callback: (timeoutMs: number) => Promise<void>;
  readonly #timeoutMs: number;
  #active = true;
  #tail: Promise<void> = Promise.resolve();

  constructor(name: string, callback: (timeoutMs: number) => Promise<void>, timeoutMs: number) {
    this.name = name;
    this.#callback = callback;
    this.#timeoutMs = timeoutMs;
  }

  /** Whether the close has yet to succeed. */
  get active(): boolean {
    return this.#active;
  }

  /** Runs the close unless it already succeeded; rejects with its error when it fails. */
  close(): Promise<void> {
    const run = this.#tail.then(async () => {
      if (!this.#active) return;
      await this.#callback(this.#timeoutMs);
      this.#active = false;
    });
    this.#tail = run.catch(() => undefined);
    return run;
  }
}
