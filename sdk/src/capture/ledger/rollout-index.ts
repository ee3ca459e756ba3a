import type { EpisodeId } from "../../identity/episode-id.js";
import { parseCaptureFileName, type CaptureFile } from "./files.js";

/**
 * The capture files of one directory listing, grouped by the rollout their key names.
 *
 * Why: a restore clears later attempts of thousands of rollouts; scanning the listing once per
 * rollout is quadratic (minutes for 16k rollouts over 96k files), one index is linear. Keys are
 * parsed, not prefix-matched, so look-alikes stay apart: `r1-a2` is rollout `r1` and `r-a1x-a3`
 * rollout `r-a1x`, neither of them rollout `r`.
 */
export class RolloutIndex {
  readonly #byRollout = new Map<string, CaptureFile[]>();

  constructor(names: Iterable<string>) {
    for (const name of names) {
      const file = parseCaptureFileName(name);
      if (file === null) continue;
      const files = this.#byRollout.get(file.episode.rollout_id);
      if (files === undefined) this.#byRollout.set(file.episode.rollout_id, [file]);
      else files.push(file);
    }
  }

  /** The files of `episode`'s rollout at its attempt or a later one. */
  fromAttempt(episode: EpisodeId): CaptureFile[] {
    const files = this.#byRollout.get(episode.rollout_id) ?? [];
    return files.filter((file) => file.episode.attempt >= episode.attempt);
  }
}
