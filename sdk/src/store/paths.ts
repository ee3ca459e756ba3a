import path from "node:path";
import { SAFE_ID_PATTERN } from "../identity/episode-id.js";
import { CheckpointStateError } from "../errors.js";

/** Where one participant's state lives inside a checkpoint directory. */
export interface ParticipantLocation {
  readonly checkpointDir: string;
  readonly kind: string;
  readonly instance: string;
}

/** `<checkpoint_dir>/gym/<kind>/<instance>`, after checking both names are safe path components. */
export function participantDir(location: ParticipantLocation): string {
  for (const [what, name] of [
    ["kind", location.kind],
    ["instance", location.instance],
  ] as const) {
    // `test` would coerce a non-string (e.g. `undefined` passes as "undefined").
    if (typeof name !== "string" || !SAFE_ID_PATTERN.test(name)) {
      throw new CheckpointStateError(
        `participant ${what} ${JSON.stringify(name)} is not a safe path component`,
      );
    }
  }
  return path.join(location.checkpointDir, "gym", location.kind, location.instance);
}

/** The manifest's file name. */
export const MANIFEST_FILE = "manifest.json";

/** The records file name for a digest. */
export function recordsFileName(sha256Hex: string): string {
  return `records-${sha256Hex}.jsonl`;
}
