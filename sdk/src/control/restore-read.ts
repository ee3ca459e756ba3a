import { stat } from "node:fs/promises";
import path from "node:path";
import type { z } from "zod";
import { CheckpointError } from "../errors.js";
import { participantDir, type ParticipantLocation } from "../store/paths.js";
import {
  readCheckpoint,
  readStoredCheckpoint,
  type ReadResult,
  type StoredRecord,
} from "../store/records-reader.js";
import { awaitUntil } from "../util/deadline.js";
import type { RecordBase } from "../wire/storage.js";

/** Where a restore reads: the participant's files in the checkpoint, and the capture keys kept. */
export interface RestoreLocation extends ParticipantLocation {
  readonly scope: ReadonlySet<string>;
}

/**
 * Reads and verifies the participant's share of a checkpoint for a restore, waiting until
 * `deadlineTs`: the in-scope records validated with `recordSchema`, or as stored when it is null
 * (a participant spanning processes, whose processes validate their own share).
 * @throws CheckpointError `deadline_exceeded` when the read is still running at the deadline
 * (it then ends unobserved); the read's own typed errors.
 */
export async function readForRestore<R extends RecordBase>(
  location: RestoreLocation,
  recordSchema: z.ZodType<R> | null,
  deadlineTs: number,
): Promise<ReadResult<R | StoredRecord>> {
  const reading: Promise<ReadResult<R | StoredRecord>> =
    recordSchema === null
      ? readStoredCheckpoint(location)
      : readCheckpoint({ ...location, recordSchema });
  reading.catch(() => undefined);
  const read = await awaitUntil(reading, deadlineTs);
  if (!read.done) throw CheckpointError.deadline("reading the checkpoint");
  return read.value;
}

/** The size of a restored records file (0 when it cannot be read: only a figure). */
export async function recordsFileBytes(
  location: ParticipantLocation,
  recordsFile: string,
): Promise<number> {
  try {
    return (await stat(path.join(participantDir(location), recordsFile))).size;
  } catch {
    return 0;
  }
}
