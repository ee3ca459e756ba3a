/**
 * Direct `/v1/responses` calls of an agent with session hooks: each is a restart for its
 * duration, by capture key (what a prepare reports) and by rollout (what a retire stops).
 *
 * @module
 */
import { EpisodeError } from "../../errors.js";
import { captureKey, type EpisodeId } from "../../identity/episode-id.js";
import { deferred, type Deferred } from "../../util/deferred.js";
import { indexAdd, indexDelete } from "../../util/multimap.js";

/** A direct `/v1/responses` call tracked as a restart for its duration. */
export interface DirectCall {
  /** Aborted by a retire of its attempt. */
  readonly signal: AbortSignal;
  /** Untracks the call; idempotent. */
  done(): void;
}

interface DirectEntry {
  readonly episode: EpisodeId;
  readonly key: string;
  readonly controller: AbortController;
  readonly ended: Deferred<void>;
  done: boolean;
}

/** The direct calls running, by capture key and by rollout. */
export class DirectCalls {
  readonly #byKey = new Map<string, Set<DirectEntry>>();
  readonly #byRollout = new Map<string, Set<DirectEntry>>();

  /** The capture keys with a direct call running: restarts. */
  keys(): IterableIterator<string> {
    return this.#byKey.keys();
  }

  /** Tracks a call of `episode` until its `done`. */
  track(episode: EpisodeId): DirectCall {
    const key = captureKey(episode);
    const entry: DirectEntry = {
      episode,
      key,
      controller: new AbortController(),
      ended: deferred<void>(),
      done: false,
    };
    indexAdd(this.#byKey, key, entry);
    indexAdd(this.#byRollout, episode.rollout_id, entry);
    return {
      signal: entry.controller.signal,
      done: () => {
        if (entry.done) return;
        entry.done = true;
        indexDelete(this.#byKey, key, entry);
        indexDelete(this.#byRollout, episode.rollout_id, entry);
        entry.ended.resolve();
      },
    };
  }

  /**
   * Aborts (once) the calls of `episode`'s attempt and the earlier ones of its rollout with
   * `stale_attempt`; returns when each ends.
   */
  stop(episode: EpisodeId): Promise<void>[] {
    const stopped = [...(this.#byRollout.get(episode.rollout_id) ?? [])].filter(
      (d) => d.episode.attempt <= episode.attempt,
    );
    for (const d of stopped) {
      if (!d.controller.signal.aborted) {
        d.controller.abort(EpisodeError.staleAttempt(d.key, episode.attempt));
      }
    }
    return stopped.map((d) => d.ended.promise);
  }
}
