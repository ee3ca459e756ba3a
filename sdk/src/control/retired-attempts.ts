import { EpisodeError } from "../errors.js";
import { captureKey, type EpisodeId } from "../identity/episode-id.js";

/**
 * The retired marks of one participant: per rollout, the highest retired attempt. A request
 * from an attempt at or below its rollout's mark is refused with `stale_attempt`.
 */
export class RetiredAttempts {
  readonly #marks = new Map<string, number>();

  /** Number of rollouts marked (reported as `retired_rollouts`). */
  get size(): number {
    return this.#marks.size;
  }

  /** Whether `e` is at or below its rollout's mark. */
  isRetired(e: EpisodeId): boolean {
    const mark = this.#marks.get(e.rollout_id);
    return mark !== undefined && e.attempt <= mark;
  }

  /** The highest retired attempt of a rollout, or undefined when it has no mark. */
  markOf(rolloutId: string): number | undefined {
    return this.#marks.get(rolloutId);
  }

  /** Throws `stale_attempt` when `e` is retired. */
  check(e: EpisodeId): void {
    const mark = this.#marks.get(e.rollout_id);
    if (mark !== undefined && e.attempt <= mark) {
      throw EpisodeError.staleAttempt(captureKey(e), mark);
    }
  }

  /** Raises each rollout's mark to at least the given attempt; marks never go down. */
  mark(episodes: Iterable<EpisodeId>): void {
    for (const e of episodes) {
      const current = this.#marks.get(e.rollout_id);
      if (current === undefined || e.attempt > current) this.#marks.set(e.rollout_id, e.attempt);
    }
  }

  /** Drops the marks of these rollouts (unknown ones ignored). */
  forget(rolloutIds: Iterable<string>): void {
    for (const id of rolloutIds) this.#marks.delete(id);
  }

  /** A snapshot of every mark, for a worker joining later. */
  marks(): Map<string, number> {
    return new Map(this.#marks);
  }

  /** Merges marks taken elsewhere (max per rollout). */
  update(marks: Iterable<[string, number]>): void {
    for (const [rolloutId, attempt] of marks) {
      const current = this.#marks.get(rolloutId);
      if (current === undefined || attempt > current) this.#marks.set(rolloutId, attempt);
    }
  }
}
