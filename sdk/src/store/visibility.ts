/**
 * What this machine sees of a participant's committed state. A controller asks after a commit
 * (participants on other machines wrote it) and before a restore: a checkpoint directory on a
 * disk of each node rather than on a shared file system shows here as state that is missing,
 * or as another commit's.
 */
import { stat } from "node:fs/promises";
import path from "node:path";
import { CheckpointStateError } from "../errors.js";
import type { Manifest } from "../wire/storage.js";
import { MANIFEST_FILE, participantDir, type ParticipantLocation } from "./paths.js";
import { isCode, readRegularFile } from "./safe-fs.js";

/** Where a participant's state is, and what is wrong with it here (null: nothing). */
export interface StateHere {
  /** `<checkpoint_dir>/gym/<kind>/<instance>`. */
  readonly path: string;
  /** What this machine finds instead of the state, e.g. "it is not there"; null when whole. */
  readonly problem: string | null;
  /** The manifest read here, when one could be read. */
  readonly manifest: Record<string, unknown> | null;
}

/**
 * Looks for a participant's manifest and records file at `location` from this machine. With
 * `expected` (the manifest a commit reply carried) the manifest found must be that one. Only
 * names and sizes are checked, never the records' digest: the participant verifies the whole
 * file when it restores.
 *
 * @throws CheckpointStateError when `kind` or `instance` is not a safe path component
 */
export async function stateHere(
  location: ParticipantLocation,
  expected: Manifest | null,
): Promise<StateHere> {
  const dir = participantDir(location);
  const missing = (problem: string): StateHere => ({ path: dir, problem, manifest: null });
  let text: string;
  try {
    text = await readRegularFile(path.join(dir, MANIFEST_FILE));
  } catch (error) {
    if (isCode(error, "ENOENT", "ENOTDIR")) {
      return missing(
        (await isDirectory(dir)) ? `its directory holds no ${MANIFEST_FILE}` : "it is not there",
      );
    }
    if (error instanceof CheckpointStateError)
      return missing(`its ${MANIFEST_FILE} is not a regular file`);
    return missing(`its ${MANIFEST_FILE} cannot be read (${reasonOf(error)})`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    // Seen whole on the writer's machine (it was fsynced before it was linked): cut short here.
    return missing(`its ${MANIFEST_FILE} is not whole (not JSON)`);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return missing(`its ${MANIFEST_FILE} is not a manifest`);
  }
  const manifest = value as Record<string, unknown>;
  const found = (problem: string | null): StateHere => ({ path: dir, problem, manifest });
  if (expected !== null) {
    const differs = (["checkpoint_id", "records_file", "records_sha256"] as const).some(
      (field) => manifest[field] !== expected[field],
    );
    if (differs) {
      return found(
        `its ${MANIFEST_FILE} is another commit's (checkpoint ${JSON.stringify(manifest.checkpoint_id ?? null)})`,
      );
    }
  }
  const recordsFile = manifest.records_file;
  if (typeof recordsFile !== "string" || path.basename(recordsFile) !== recordsFile) {
    return found(`its ${MANIFEST_FILE} names no records file`);
  }
  try {
    const records = await stat(path.join(dir, recordsFile));
    if (!records.isFile()) return found(`its records file ${recordsFile} is not a regular file`);
    const count = manifest.record_count;
    // A record takes at least one byte (its newline): an empty file is not this commit's yet.
    if (typeof count === "number" && count > 0 && records.size === 0) {
      return found(`its records file ${recordsFile} is empty`);
    }
  } catch (error) {
    if (isCode(error, "ENOENT", "ENOTDIR")) {
      return found(`its manifest is there but not its records file ${recordsFile}`);
    }
    return found(`its records file ${recordsFile} cannot be read (${reasonOf(error)})`);
  }
  return found(null);
}

async function isDirectory(dir: string): Promise<boolean> {
  try {
    return (await stat(dir)).isDirectory();
  } catch {
    return false;
  }
}

function reasonOf(error: unknown): string {
  const code = (error as NodeJS.ErrnoException | null)?.code;
  if (typeof code === "string") return code;
  return error instanceof Error ? error.message : String(error);
}
