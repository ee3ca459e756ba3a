import type { EpisodeId } from "../identity/episode-id.js";
import { forEachConcurrently } from "../util/deadline.js";

/** At most this many per-rollout retires or deletions run at once. */
export const STOP_CONCURRENCY = 16;

/** The latest attempt named per rollout, so each rollout is stopped once. */
function latestPerRollout(episodes: readonly EpisodeId[]): EpisodeId[] {
  const latest = new Map<string, EpisodeId>();
  for (const e of episodes) {
    const current = latest.get(e.rollout_id);
    if (current === undefined || e.attempt > current.attempt) latest.set(e.rollout_id, e);
  }
  return [...latest.values()];
}

/**
 * Runs `stop` once per rollout named in `episodes`, at the latest attempt named (a stop covers
 * the earlier ones), at most {@link STOP_CONCURRENCY} at once. Rejects with the first failure.
 */
export async function stopEachRollout(
  episodes: readonly EpisodeId[],
  stop: (episode: EpisodeId) => Promise<void>,
): Promise<void> {
  await forEachConcurrently(latestPerRollout(episodes), STOP_CONCURRENCY, stop);
}
