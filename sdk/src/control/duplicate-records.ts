/**
 * Refusing a checkpoint that holds one thing twice. A committed checkpoint never does (each
 * participant exports one record per episode or session); a crafted or mixed-up one might, and
 * "the last record wins" would install state nobody committed.
 *
 * @module
 */
import { CheckpointError } from "../errors.js";

/**
 * Throws 409 `checkpoint_error` when two records share a key, naming the key and what it is.
 *
 * @example
 * refuseDuplicateRecords(records, (r) => r.session_id, "resources session");
 */
export function refuseDuplicateRecords<R>(
  records: readonly R[],
  keyOf: (record: R) => string,
  what: string,
): void {
  const seen = new Set<string>();
  for (const record of records) {
    const key = keyOf(record);
    if (seen.has(key)) {
      throw new CheckpointError(
        "checkpoint_error",
        `the checkpoint holds ${what} '${key}' twice; it was not written by one commit: restore a checkpoint as committed`,
      );
    }
    seen.add(key);
  }
}
