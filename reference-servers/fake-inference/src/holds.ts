/**
 * Test holds: stop matching calls part-way through their generation until the test releases
 * them, so a checkpoint can find calls in flight (and cut them).
 *
 * @module
 */
import { z } from "zod";

/**
 * The body of `POST /_ctl/hold`: hold every call whose global index (0-based, in arrival order)
 * is at least `after_calls`, or every call whose index within its own rollout is at least
 * `after_calls_per_rollout` (calls without a rollout count as one rollout).
 */
export const HoldRequestSchema = z
  .union([
    z.strictObject({ after_calls: z.int().min(0) }),
    z.strictObject({ after_calls_per_rollout: z.int().min(0) }),
  ])
  .meta({ id: "FakeInferenceHold" });
/** Which calls a hold stops. */
export type HoldRequest = z.infer<typeof HoldRequestSchema>;

/** Where a call stands when it arrives. */
export interface CallPosition {
  /** Its global index. */
  readonly index: number;
  /** Its index among its rollout's calls. */
  readonly ordinal: number;
}

/**
 * The hold rule and its release event.
 *
 * Rules:
 * - A call is matched against the rule when it arrives and keeps the event it got, so a release
 *   frees it even if it blocks later; a call that arrives after the release is not held.
 * - A hold placed while one is active replaces the rule and keeps the same release event: one
 *   release frees the calls of both.
 */
export class HoldGate {
  #rule: HoldRequest | null = null;
  #release: { readonly event: Promise<void>; readonly fire: () => void } | null = null;
  #blocked = 0;
  readonly #watchers = new Set<{ readonly count: number; readonly resolve: () => void }>();

  /** Places (or replaces) the hold rule. */
  place(rule: HoldRequest): void {
    this.#rule = rule;
    if (this.#release === null) {
      let fire!: () => void;
      const event = new Promise<void>((resolve) => (fire = resolve));
      this.#release = { event, fire };
    }
  }

  /** Lifts the hold and frees every held call; answers how many were blocked. */
  release(): number {
    const blocked = this.#blocked;
    this.#release?.fire();
    this.#release = null;
    this.#rule = null;
    return blocked;
  }

  /** The release event a call arriving now must wait for part-way, or null when it is not held. */
  eventFor(position: CallPosition): Promise<void> | null {
    const rule = this.#rule;
    if (rule === null || this.#release === null) return null;
    const held =
      "after_calls" in rule
        ? position.index >= rule.after_calls
        : position.ordinal >= rule.after_calls_per_rollout;
    return held ? this.#release.event : null;
  }

  /** How many calls are blocked right now. */
  get blocked(): number {
    return this.#blocked;
  }

  /** Resolves once at least `count` calls are blocked at the same time. */
  whenBlocked(count: number): Promise<void> {
    if (this.#blocked >= count) return Promise.resolve();
    return new Promise((resolve) => this.#watchers.add({ count, resolve }));
  }

  /** Blocks until `event` fires; rejects with the signal's reason when it aborts first. */
  async block(event: Promise<void>, signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    let onAbort!: () => void;
    const aborted = new Promise<never>((_resolve, reject) => {
      onAbort = () => reject(signal.reason as Error);
      signal.addEventListener("abort", onAbort, { once: true });
    });
    this.#blocked += 1;
    for (const watcher of this.#watchers) {
      if (this.#blocked >= watcher.count) {
        this.#watchers.delete(watcher);
        watcher.resolve();
      }
    }
    try {
      await Promise.race([event, aborted]);
    } finally {
      this.#blocked -= 1;
      signal.removeEventListener("abort", onAbort);
    }
  }
}
