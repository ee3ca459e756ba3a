/**
 * Which capture keys a retire fences for an episode: attempts `0..N` of its rollout, bounded by
 * a window of the latest attempts so that a huge attempt number cannot make a retire create
 * (or list) that many files.
 */
import { attemptOf, captureKey, type EpisodeId } from "../../identity/episode-id.js";
import type { RolloutIndex } from "./rollout-index.js";

/**
 * How many of a rollout's latest attempts a retire fences whether or not they left files.
 *
 * Why: an attempt number is any safe integer, and fencing every attempt `0..N` of a retire
 * naming attempt 10^8 would create 10^8 files (and exhaust memory listing them first). A
 * rollout is restored once per attempt, so real retires stay far inside the window and fence
 * exactly `0..N`. Past it, an older attempt that left no file gets no fence; a late call of it
 * is still refused by every process's retired marks, which cover every attempt up to `N`.
 */
export const FENCE_WINDOW = 1024;

/**
 * The capture keys to fence for episodes: attempts `0..e.attempt` of each, or, for an attempt
 * past {@link FENCE_WINDOW}, the window's attempts and the earlier ones with files in `index`
 * (required then).
 */
export function attemptKeysThrough(
  episodes: Iterable<EpisodeId>,
  index: RolloutIndex | null = null,
): string[] {
  const keys: string[] = [];
  for (const episode of episodes) {
    const windowStart = Math.max(0, episode.attempt - FENCE_WINDOW + 1);
    if (windowStart > 0) {
      if (index === null) throw new Error("a listing is needed past the fence window");
      const below = index.attemptsOf(episode.rollout_id).filter((a) => a < windowStart);
      for (const attempt of below.sort((a, b) => a - b)) {
        keys.push(captureKey(attemptOf(episode, attempt)));
      }
    }
    for (let attempt = windowStart; attempt <= episode.attempt; attempt++) {
      keys.push(captureKey(attemptOf(episode, attempt)));
    }
  }
  return keys;
}
