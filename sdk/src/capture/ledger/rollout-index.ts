import { captureKey, episodeId, type EpisodeId } from "../../identity/episode-id.js";
import {
  parseCaptureFileName,
  parseDigestFileName,
  rolloutDigestStem,
  type CaptureFile,
  type DigestCaptureFile,
} from "./files.js";

/**
 * The capture files of one directory listing, grouped by the rollout their key names.
 *
 * Why: a restore clears later attempts of thousands of rollouts; scanning the listing once per
 * rollout is quadratic (minutes for 16k rollouts over 96k files), one index is linear. Keys are
 * parsed, not prefix-matched, so look-alikes stay apart: `r1-a2` is rollout `r1` and `r-a1x-a3`
 * rollout `r-a1x`, neither of them rollout `r`. Files with digest names (keys too long for a
 * plain name) are grouped by their rollout's digest and found through it.
 */
export class RolloutIndex {
  readonly #byRollout = new Map<string, CaptureFile[]>();
  readonly #byDigest = new Map<string, DigestCaptureFile[]>();

  constructor(names: Iterable<string>) {
    for (const name of names) {
      const file = parseCaptureFileName(name);
      if (file !== null) {
        push(this.#byRollout, file.episode.rollout_id, file);
        continue;
      }
      const hashed = parseDigestFileName(name);
      if (hashed !== null) push(this.#byDigest, hashed.stem, hashed);
    }
  }

  /** The files of `episode`'s rollout at its attempt or a later one. */
  fromAttempt(episode: EpisodeId): CaptureFile[] {
    const plain = this.#byRollout.get(episode.rollout_id) ?? [];
    const files = plain.filter((file) => file.episode.attempt >= episode.attempt);
    if (this.#byDigest.size === 0) return files;
    for (const hashed of this.#byDigest.get(rolloutDigestStem(episode.rollout_id)) ?? []) {
      if (hashed.attempt < episode.attempt) continue;
      const owner = episodeId(episode.rollout_id, hashed.attempt);
      files.push({ name: hashed.name, key: captureKey(owner), episode: owner, kind: hashed.kind });
    }
    return files;
  }

  /** The attempts of `rolloutId` that have at least one file, each once. */
  attemptsOf(rolloutId: string): number[] {
    const attempts = new Set((this.#byRollout.get(rolloutId) ?? []).map((f) => f.episode.attempt));
    if (this.#byDigest.size > 0) {
      for (const hashed of this.#byDigest.get(rolloutDigestStem(rolloutId)) ?? []) {
        attempts.add(hashed.attempt);
      }
    }
    return [...attempts];
  }
}

function push<T>(map: Map<string, T[]>, key: string, value: T): void {
  const list = map.get(key);
  if (list === undefined) map.set(key, [value]);
  else list.push(value);
}
