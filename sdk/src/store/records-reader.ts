import { createHash } from "node:crypto";
import { stat } from "node:fs/promises";
import { hostname } from "node:os";
import path from "node:path";
import type { z } from "zod";
import { CheckpointStateError } from "../errors.js";
import { failpoint } from "../util/failpoints.js";
import { captureKey, episodeIdFromWire, type EpisodeId } from "../identity/episode-id.js";
import { decodeJsonLine } from "../json/json-line-decoder.js";
import { decodedAsStandardJson } from "../json/json-decode.js";
import { withDecodedPayloadsTrusted } from "../json/json-payload-schema.js";
import {
  MANIFEST_SCHEMA_VERSION,
  RECORDS_FILE_PATTERN,
  type Manifest,
  parseDecodedRecord,
  type RecordBase,
} from "../wire/storage.js";
import { MANIFEST_FILE, participantDir, type ParticipantLocation } from "./paths.js";
import { openRegularFile, readRegularFile } from "./safe-fs.js";

/** Reads the file in chunks this large: few syscalls, bounded memory. */
const READ_CHUNK_BYTES = 4 * 1024 * 1024;

/** What to read and which records to keep. */
export interface ReadRequest<R extends RecordBase> extends ParticipantLocation {
  /** Capture keys to keep (others are dropped unvalidated); null keeps every record. */
  readonly scope: ReadonlySet<string> | null;
  /** Validates a kept stored record into the participant's record. */
  readonly recordSchema: z.ZodType<R>;
}

/** A verified checkpoint: its manifest and the in-scope records, validated. */
export interface ReadResult<R> {
  readonly manifest: Manifest;
  readonly records: R[];
}

function corrupt(what: string, key: string | null = null, cause?: unknown): CheckpointStateError {
  return new CheckpointStateError(what, key, cause === undefined ? undefined : { cause });
}

/**
 * Reads and verifies one participant's checkpoint in one streaming pass (see docs/storage.md):
 * checks the manifest, hashes and counts every line of the records file, keeps and validates
 * only in-scope records, then compares digest and count. Every problem is a typed
 * `invalid_checkpoint_state`, naming the episode when a record is at fault, or the file when
 * the manifest or records file is not a regular file (never opened then: a FIFO would block).
 */
export async function readCheckpoint<R extends RecordBase>(
  request: ReadRequest<R>,
): Promise<ReadResult<R>> {
  return await readVerified(request, (line) => {
    const stored = decodeStored(line, request.scope);
    return stored === null
      ? null
      : validateStored(stored.value, stored.episode_id, request.recordSchema);
  });
}

/** A stored record read without its participant's schema: its episode, JSON value and line. */
export interface StoredRecord extends RecordBase {
  /** The decoded line (checked only for its `episode_id`). */
  readonly value: Record<string, unknown>;
  /** The line's bytes, without the newline. */
  readonly line: Buffer;
}

/**
 * {@link readCheckpoint} without validating the in-scope records: each is kept as its decoded
 * value and its line, for a process that hands the lines on to be validated elsewhere (the
 * coordinator of a multi-worker server; each worker validates its share).
 */
export async function readStoredCheckpoint(
  request: ParticipantLocation & { readonly scope: ReadonlySet<string> | null },
): Promise<ReadResult<StoredRecord>> {
  return await readVerified(request, (line) => {
    const stored = decodeStored(line, request.scope);
    // A copy: the line is a view of a read buffer that is reused.
    return stored === null ? null : { ...stored, line: Buffer.from(line) };
  });
}

/**
 * Decodes a stored line and checks its `episode_id` (nothing else).
 * @throws CheckpointStateError when it is not JSON or names no valid episode
 */
export function decodeStoredLine(line: Buffer): {
  episode_id: EpisodeId;
  value: Record<string, unknown>;
} {
  return decodeStored(line, null) as { episode_id: EpisodeId; value: Record<string, unknown> };
}

/**
 * Validates a stored record's decoded value (its `episode_id` already checked) against `schema`.
 * @throws CheckpointStateError naming the episode when it does not match
 */
export function validateStored<R extends RecordBase>(
  value: Record<string, unknown>,
  episode: EpisodeId,
  schema: z.ZodType<R>,
): R {
  const fast = parseDecodedRecord(schema, value, episode);
  if (fast !== null) return markedStandard(value, fast);
  const parsed = withDecodedPayloadsTrusted(() => schema.safeParse(value));
  if (!parsed.success) {
    const key = captureKey(episode);
    const issues = parsed.error.issues
      .map((issue) => `${issue.path.map(String).join(".") || "(record)"}: ${issue.message}`)
      .join("; ");
    throw corrupt(`checkpoint record of episode '${key}' is invalid: ${issues}`, key);
  }
  return markedStandard(value, parsed.data);
}

/** Records read from lines that were standard JSON (see {@link readAsStandardJson}). */
const standardRecords = new WeakSet<object>();

/** `record`, remembered as standard JSON when the line it was read from was. */
function markedStandard<R extends object>(value: object, record: R): R {
  if (decodedAsStandardJson(value)) standardRecords.add(record);
  return record;
}

/**
 * Whether `record` was read by {@link validateStored} from a line decoded natively: nothing in
 * it is a bigint or a non-finite number (see `decodedAsStandardJson`), so a consumer that needs
 * standard JSON (the capture ledger's import) need not walk its values again.
 */
export function readAsStandardJson(record: object): boolean {
  return standardRecords.has(record);
}

/** Reads and verifies the checkpoint, keeping what `keep` makes of each line (null: dropped). */
async function readVerified<T>(
  location: ParticipantLocation,
  select: (line: Buffer) => T | null,
): Promise<ReadResult<T>> {
  const dir = participantDir(location);
  const manifest = await readManifest(dir, location);
  const recordsPath = path.join(dir, manifest.records_file);
  const hash = createHash("sha256");
  const records: T[] = [];
  let count = 0;
  const keep = (line: Buffer): void => {
    count += 1;
    const record = select(line);
    if (record !== null) records.push(record);
  };
  try {
    await forEachLine(recordsPath, (chunk) => hash.update(chunk), keep);
    failpoint("restore.validate");
  } catch (error) {
    if (error instanceof CheckpointStateError) throw error;
    const reason = error instanceof Error ? error.message : String(error);
    throw corrupt(
      `cannot read checkpoint state ${recordsPath}: ${reason}${writtenElsewhere(error, manifest)}`,
      null,
      error,
    );
  }
  const digest = hash.digest("hex");
  if (digest !== manifest.records_sha256) {
    throw corrupt(`${recordsPath} does not match its manifest digest`);
  }
  if (count !== manifest.record_count) {
    throw corrupt(
      `${recordsPath}: the manifest expects ${manifest.record_count} records, found ${count}`,
    );
  }
  return { manifest, records };
}

/**
 * Streams a file through two reused chunk buffers (the next read runs while this chunk is
 * parsed), handing every chunk to `onChunk` and every line (without its newline, a last
 * unterminated line included) to `onLine`.
 *
 * Why reused buffers: fresh memory per chunk costs page faults that dominate the read.
 */
async function forEachLine(
  file: string,
  onChunk: (chunk: Buffer) => void,
  onLine: (line: Buffer) => void,
): Promise<void> {
  const handle = await openRegularFile(file);
  let reading: Promise<{ bytesRead: number }> | null = null;
  try {
    const buffers = [
      Buffer.allocUnsafeSlow(READ_CHUNK_BYTES),
      Buffer.allocUnsafeSlow(READ_CHUNK_BYTES),
    ];
    let current = 0;
    reading = handle.read(buffers[0] as Buffer, 0, READ_CHUNK_BYTES, null);
    let pending: Buffer[] = [];
    for (;;) {
      const { bytesRead } = await reading;
      if (bytesRead === 0) break;
      const chunk = (buffers[current] as Buffer).subarray(0, bytesRead);
      current = 1 - current;
      reading = handle.read(buffers[current] as Buffer, 0, READ_CHUNK_BYTES, null);
      onChunk(chunk);
      let start = 0;
      for (let nl = chunk.indexOf(10, start); nl >= 0; nl = chunk.indexOf(10, start)) {
        const piece = chunk.subarray(start, nl);
        if (pending.length > 0) {
          pending.push(piece);
          onLine(Buffer.concat(pending));
          pending = [];
        } else {
          onLine(piece);
        }
        start = nl + 1;
      }
      // The chunk's buffer is reused two reads from now: keep a copy of an unfinished line.
      if (start < chunk.length) pending.push(Buffer.from(chunk.subarray(start)));
    }
    if (pending.length > 0) onLine(Buffer.concat(pending));
  } finally {
    // A line that failed validation leaves the next read in flight: let it end before closing.
    await reading?.catch(() => undefined);
    await handle.close();
  }
}

/**
 * Decodes a stored line and checks its `episode_id`; null when scoped out.
 * @throws CheckpointStateError when it is not JSON or names no valid episode
 */
function decodeStored(
  line: Buffer,
  scope: ReadonlySet<string> | null,
): { episode_id: EpisodeId; value: Record<string, unknown> } | null {
  let value: unknown;
  try {
    value = decodeJsonLine(line);
  } catch (error) {
    throw corrupt(`the checkpoint holds a record that is not JSON: ${(error as Error).message}`);
  }
  const episode =
    value !== null && typeof value === "object" && !Array.isArray(value)
      ? episodeIdFromWire((value as { episode_id?: unknown }).episode_id)
      : null;
  if (episode === null) throw corrupt("checkpoint record has no valid episode_id");
  if (scope !== null && !scope.has(captureKey(episode))) return null;
  return { episode_id: episode, value: value as Record<string, unknown> };
}

/** The advice for a shared file system, in every refusal that suggests a node-local disk. */
const SHARED_FS_ADVICE =
  "the checkpoint directory must be on a file system every machine shares (NFS, Lustre, " +
  "CephFS), not a node-local disk";

/**
 * Why a participant directory may be missing on this machine: the machine named, and whether
 * the directory exists at all, for the refusal of a restore with no manifest.
 */
async function missingHere(dir: string): Promise<string> {
  let exists = false;
  try {
    exists = (await stat(dir)).isDirectory();
  } catch {
    // Missing, or a component is not a directory: either way not there.
  }
  const what = exists ? "(the directory holds no manifest)" : `(${dir} is not there)`;
  return (
    `on this machine (${hostname()}) ${what}: check checkpoint_dir; if this checkpoint was ` +
    `written on another machine, ${SHARED_FS_ADVICE}`
  );
}

/** For a records file missing here whose manifest another host wrote: that host, and advice. */
function writtenElsewhere(error: unknown, manifest: Manifest): string {
  const code = (error as NodeJS.ErrnoException | null)?.code;
  const writer = (manifest as { host?: unknown }).host;
  if (code !== "ENOENT" || typeof writer !== "string" || writer === hostname()) return "";
  return ` (its manifest was written on host ${writer}, this is ${hostname()}: ${SHARED_FS_ADVICE})`;
}

/**
 * A manifest value in a detail. `String()` would throw on a parsed object such as
 * `{"toString": 1}`, turning a corrupt manifest into an untyped error.
 */
function shown(value: unknown): string {
  return typeof value === "string" ? value : (JSON.stringify(value) ?? "nothing");
}

async function readManifest(dir: string, location: ParticipantLocation): Promise<Manifest> {
  const manifestPath = path.join(dir, MANIFEST_FILE);
  let text: string;
  try {
    failpoint("restore.read");
    text = await readRegularFile(manifestPath);
  } catch (error) {
    if (error instanceof CheckpointStateError) throw error;
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT" || code === "ENOTDIR") {
      throw corrupt(`missing manifest ${manifestPath} ${await missingHere(dir)}`, null, error);
    }
    throw corrupt(`cannot read checkpoint state ${manifestPath}: ${(error as Error).message}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw corrupt(`${manifestPath} is not JSON`, null, error);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw corrupt(`${manifestPath} is not a manifest`);
  }
  const m = value as Record<string, unknown>;
  if (m.schema_version !== MANIFEST_SCHEMA_VERSION) {
    throw corrupt(
      `${manifestPath} has an unsupported schema ${JSON.stringify(m.schema_version ?? null)} (expected ${MANIFEST_SCHEMA_VERSION})`,
    );
  }
  if (m.kind !== location.kind || m.instance !== location.instance) {
    throw corrupt(
      `${manifestPath} belongs to ${shown(m.kind)}/${shown(m.instance)}, not ${location.kind}/${location.instance}`,
    );
  }
  if (typeof m.checkpoint_id !== "string") throw corrupt(`${manifestPath} names no checkpoint`);
  if (typeof m.records_file !== "string" || !RECORDS_FILE_PATTERN.test(m.records_file)) {
    throw corrupt(`${manifestPath} names no records file inside its directory`);
  }
  if (typeof m.records_sha256 !== "string" || !/^[0-9a-f]{64}$/.test(m.records_sha256)) {
    throw corrupt(`${manifestPath} has no valid records_sha256`);
  }
  if (
    typeof m.record_count !== "number" ||
    !Number.isSafeInteger(m.record_count) ||
    m.record_count < 0
  ) {
    throw corrupt(`${manifestPath} has no valid record_count`);
  }
  return m as Manifest;
}
