/**
 * The agent session participant's seeds in progress: counted by session key and attempt (each
 * blocks a prepare until it leaves), indexed by rollout so a retire waits only for its own.
 *
 * @module
 */
import { captureKey, type EpisodeId } from "../../identity/episode-id.js";
import { deferred } from "../../util/deferred.js";
import { indexAdd, indexDelete } from "../../util/multimap.js";

/** A seed in progress: register the session, then leave (in a `finally`). */
export interface SeedTicket {
  /**
   * Registers the seeded session with the participant (allowed while admission is closed).
   * @throws EpisodeError `stale_attempt` when the attempt was retired while the seed built it,
   * or the key belongs to another attempt.
   */
  register(): void;
  /** Ends the seed; idempotent. */
  leave(): void;
}

class SeedEntry {
  count = 0;
  readonly captureKey: string;
  constructor(readonly episode: EpisodeId) {
    this.captureKey = captureKey(episode);
  }
}

/** Seeds in progress, by session key and attempt and by rollout. */
export class SeedsInProgress {
  readonly #seeds = new Map<string, SeedEntry>();
  readonly #byRollout = new Map<string, Set<SeedEntry>>();
  /** Resolved (and replaced) whenever a seed leaves. */
  #left = deferred<void>();

  /** Number of sessions with a seed in progress. */
  get size(): number {
    return this.#seeds.size;
  }

  /** The capture keys of the seeds in progress (one per session, repeated across sessions). */
  *captureKeys(): IterableIterator<string> {
    for (const seed of this.#seeds.values()) yield seed.captureKey;
  }

  /**
   * Counts a seed of `key` for `episode`; returns its leave, which uncounts it the first time
   * it is called (returning true) and does nothing after (returning false).
   */
  enter(key: string, episode: EpisodeId): () => boolean {
    const id = `${key}\u0000${captureKey(episode)}`;
    let seed = this.#seeds.get(id);
    if (seed === undefined) {
      seed = new SeedEntry(episode);
      this.#seeds.set(id, seed);
      indexAdd(this.#byRollout, episode.rollout_id, seed);
    }
    seed.count += 1;
    const entry = seed;
    let left = false;
    return () => {
      if (left) return false;
      left = true;
      entry.count -= 1;
      if (entry.count === 0) {
        this.#seeds.delete(id);
        indexDelete(this.#byRollout, episode.rollout_id, entry);
      }
      const changed = this.#left;
      this.#left = deferred<void>();
      changed.resolve();
      return true;
    };
  }

  /** Whether a seed of `episode`'s attempt or an earlier one of its rollout is in progress. */
  holds(episode: EpisodeId): boolean {
    const seeds = this.#byRollout.get(episode.rollout_id);
    return seeds !== undefined && [...seeds].some((s) => s.episode.attempt <= episode.attempt);
  }

  /** Resolves the next time a seed leaves. */
  get nextLeave(): Promise<void> {
    return this.#left.promise;
  }
}
