/**
 * Refusing a checkpoint that holds one thing twice. A committed checkpoint never does (each
 * participant exports one record per episode or session); a crafted or mixed-up one might, and
 * "the last record wins" would install state nobody committed. It is a corrupt checkpoint, so
 * the refusal is 422 `invalid_checkpoint_state`, like any other record a restore cannot take.
 *
 * @module
 */
import { CheckpointStateError } from "../errors.js";

/**
 * Throws 422 `invalid_checkpoint_state` when two records share a key, naming the key, what it
 * is and, given `episodeOf`, the episode (or both episodes) holding it.
 *
 * @example
 * refuseDuplicateRecords(records, (r) => r.session_id, "resources session", (r) => r.episode_id);
 */
export function refuseDuplicateRecords<R>(
  records: readonly R[],
  keyOf: (record: R) => string,
  what: string,
  episodeOf?: (record: R) => string,
): void {
  const seen = new Map<string, R>();
  for (const record of records) {
    const key = keyOf(record);
    const first = seen.get(key);
    if (first === undefined) {
      seen.set(key, record);
      continue;
    }
    let where = "";
    let episode = key;
    if (episodeOf !== undefined) {
      const [one, other] = [episodeOf(first), episodeOf(record)];
      where = one === other ? ` (episode '${one}')` : ` (episodes '${one}' and '${other}')`;
      episode = one;
    }
    throw new CheckpointStateError(
      `the checkpoint holds ${what} '${key}' twice${where}; it was not written by one commit: ` +
        "restore a checkpoint as committed",
      episode,
    );
  }
}
