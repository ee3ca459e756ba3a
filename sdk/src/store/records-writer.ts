import { createHash, randomBytes, type Hash } from "node:crypto";
import { link, open, rename, unlink, type FileHandle } from "node:fs/promises";
import path from "node:path";
import { CheckpointStateError } from "../errors.js";
import { captureKey } from "../identity/episode-id.js";
import { failpoint } from "../util/failpoints.js";
import { Mutex } from "../util/mutex.js";
import { encodeJsonPieces } from "../json/json-value.js";
import { MANIFEST_SCHEMA_VERSION, type Manifest, type RecordBase } from "../wire/storage.js";
import { fsyncDir } from "./fs-sync.js";
import { sameManifest, serializeManifest } from "./manifest-json.js";
import {
  makeDirectories,
  readRegularFile,
  readRegularFileSync,
  refusePseudoPath,
} from "./safe-fs.js";
import {
  MANIFEST_FILE,
  participantDir,
  recordsFileName,
  type ParticipantLocation,
} from "./paths.js";

/** Buffers up to this many bytes before handing them to the file in one `writev`. */
const WRITE_BATCH_BYTES = 8 * 1024 * 1024;
/** A run of encoded lines this long is written from its own memory rather than copied. */
const DIRECT_RUN_BYTES = 16 * 1024;
/** Writes from their own memory in flight at once, at most. */
const MAX_DIRECT_IN_FLIGHT = 64;

/** What one commit writes. */
export interface WriteTarget extends ParticipantLocation {
  readonly checkpointId: string;
  /** Participant fields merged into the manifest (`manifestExtra`). */
  readonly manifestExtra?: Record<string, unknown>;
  /**
   * The host name recorded in the manifest as `host`, so a controller on another machine that
   * cannot see this directory can say which machine wrote it. A `host` among the extras wins.
   * @default none: no `host` field
   */
  readonly host?: string;
}

/**
 * Refuses, before anything is exported or written, a directory whose manifest already belongs
 * to another checkpoint: the write would fail at its very end anyway, and a write once started
 * ties its checkpoint ID to its directory, so refusing late would leave the
 * ID unable to commit anywhere else. A manifest of the same checkpoint is left to the writer,
 * which compares it whole (a retried commit finds its own manifest). A manifest that is not a
 * regular file (a FIFO, a directory, ...) is refused here, naming it, without being opened, and
 * so is a `checkpoint_dir` under `/proc`, `/sys` or `/dev`.
 */
export function refuseOccupiedDir(target: WriteTarget): void {
  refusePseudoPath(target.checkpointDir);
  const dir = participantDir(target);
  let text: string | null;
  try {
    text = readRegularFileSync(path.join(dir, MANIFEST_FILE));
  } catch (error) {
    if (error instanceof CheckpointStateError) throw error;
    return; // No manifest readable: the write finds out for itself.
  }
  if (text === null) return;
  let checkpointId: unknown = null;
  try {
    const parsed: unknown = JSON.parse(text);
    if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) {
      checkpointId = (parsed as { checkpoint_id?: unknown }).checkpoint_id ?? null;
    }
  } catch {
    // Not JSON: it is still not this checkpoint's manifest.
  }
  if (checkpointId === target.checkpointId) return;
  throw differentCommit(dir, checkpointId);
}

/** The refusal of a directory that holds the commit of checkpoint `holder` (or an unreadable one). */
function differentCommit(dir: string, holder: unknown): CheckpointStateError {
  return new CheckpointStateError(
    `${dir} already holds a different commit (manifest of checkpoint ` +
      `${JSON.stringify(holder)}); write each checkpoint to a fresh directory`,
  );
}

function ioError(dir: string, error: unknown): CheckpointStateError {
  const reason = error instanceof Error ? error.message : String(error);
  return new CheckpointStateError(`cannot write checkpoint state under ${dir}: ${reason}`, null, {
    cause: error,
  });
}

/**
 * The key of a record's stored line (UTF-8, with its newline), when something encoded it
 * already: the writer writes those bytes instead of encoding the record, straight from where
 * they are when lines lie next to each other in memory. The coordinator of a multi-worker
 * server receives its workers' records this way.
 */
export const ENCODED_LINE: unique symbol = Symbol("gym.records.encodedLine");

/** A record whose stored line is already encoded: its episode and the line's bytes. */
export interface EncodedRecord extends RecordBase {
  readonly [ENCODED_LINE]: Buffer;
}

/**
 * Writes one participant's records and manifest for one checkpoint (see docs/storage.md).
 *
 * Records are encoded and streamed one at a time into a hidden temporary file while their
 * SHA-256 is computed. Then one round of fsyncs runs concurrently: the file, the directories
 * `<kind>`, `gym` and `checkpoint_dir`, and the manifest written to a hidden temporary of its
 * own. Once all succeeded, under the publication lock, the file is renamed to
 * `records-<sha256>.jsonl`, the manifest's temporary is hard-linked to `manifest.json` (which
 * fails if it exists), last, and the participant directory is fsynced. A directory with a
 * manifest never changes.
 *
 * ## Stopping
 * {@link stop} takes the publication lock: it waits only for a publication already under way,
 * and once it returns no manifest will appear for this writer. A write that meets the stop flag
 * fails with `invalid_checkpoint_state` and leaves no temporary file.
 */
export class RecordsWriter {
  readonly #target: WriteTarget;
  readonly #publication = new Mutex();
  #stopped = false;
  #bytesWritten = 0;

  constructor(target: WriteTarget) {
    this.#target = target;
  }

  /** Whether {@link stop} was called. */
  get stopped(): boolean {
    return this.#stopped;
  }

  /** Raises the stop flag; after this resolves no manifest can appear for this write. */
  async stop(): Promise<void> {
    await this.#publication.runExclusive(() => {
      this.#stopped = true;
    });
  }

  /** Writes every record, then publishes the manifest; returns the manifest now on disk. */
  async write(records: Iterable<RecordBase>): Promise<Manifest> {
    const dir = participantDir(this.#target);
    try {
      await makeDirectories(dir);
    } catch (error) {
      throw error instanceof CheckpointStateError ? error : ioError(dir, error);
    }
    const suffix = randomBytes(8).toString("hex");
    const tmpPath = path.join(dir, `.records.jsonl.${suffix}`);
    const manifestTmp = path.join(dir, `.manifest.json.${suffix}`);
    let published = false;
    try {
      const { handle, sha256, count } = await this.#writeRecords(tmpPath, records, dir);
      const syncing = syncAndClose(handle);
      const manifest: Manifest = {
        ...(this.#target.host === undefined ? {} : { host: this.#target.host }),
        ...(this.#target.manifestExtra ?? {}),
        schema_version: MANIFEST_SCHEMA_VERSION,
        kind: this.#target.kind,
        instance: this.#target.instance,
        checkpoint_id: this.#target.checkpointId,
        records_file: recordsFileName(sha256),
        records_sha256: sha256,
        record_count: count,
      };
      let manifestText: string;
      try {
        // Serialized before anything is published: extras that are not JSON fail here, with
        // nothing renamed into the directory.
        manifestText = manifestTextOf(manifest);
      } catch (error) {
        await syncing.catch(() => undefined);
        throw error;
      }
      // Every fsync publication needs, at once: the file system can commit them together
      // (ext4 joins concurrent fsyncs into one journal commit), where one after another each
      // waited its own. The manifest's temporary is no manifest until it is linked.
      await allOrFirstFailure(dir, [
        syncing,
        ...this.#parents(dir).map(async (parent, index) => {
          if (index === 0) failpoint("commit.dirs.fsync");
          await fsyncDir(parent);
        }),
        writeDurably(manifestTmp, manifestText),
      ]);
      const outcome = await this.#publish(dir, tmpPath, manifestTmp, manifest);
      published = true;
      return outcome;
    } finally {
      if (!published) {
        await unlink(tmpPath).catch(() => undefined);
        await unlink(manifestTmp).catch(() => undefined);
      }
    }
  }

  /** Writes and hashes every record into a new file, left open (unsynced) for the caller. */
  async #writeRecords(
    tmpPath: string,
    records: Iterable<RecordBase>,
    dir: string,
  ): Promise<{ handle: FileHandle; sha256: string; count: number }> {
    let handle: FileHandle;
    try {
      handle = await open(tmpPath, "wx");
    } catch (error) {
      throw ioError(dir, error);
    }
    const hash = createHash("sha256");
    const lines = new LineBatcher(handle, hash);
    let count = 0;
    try {
      for (const record of records) {
        this.#checkNotStopped();
        const encoded = (record as Partial<EncodedRecord>)[ENCODED_LINE];
        if (encoded !== undefined) await lines.addBytes(encoded);
        else await lines.add(encodeRecordPieces(record));
        count += 1;
      }
      await lines.finish();
      failpoint("commit.records.written");
    } catch (error) {
      await lines.settle();
      await handle.close().catch(() => undefined);
      if (error instanceof CheckpointStateError) throw error;
      throw ioError(dir, error);
    }
    this.#bytesWritten = lines.position;
    return { handle, sha256: hash.digest("hex"), count };
  }

  /** Bytes of the records file the last write produced (0 before one finished). */
  get bytesWritten(): number {
    return this.#bytesWritten;
  }

  #checkNotStopped(): void {
    if (this.#stopped) {
      throw new CheckpointStateError(
        `checkpoint '${this.#target.checkpointId}' was resumed before its write finished`,
      );
    }
  }

  /** `<kind>`, `gym` and `<checkpoint_dir>`: the entries a crash must not lose. */
  #parents(dir: string): string[] {
    const top = path.resolve(this.#target.checkpointDir);
    const parents: string[] = [];
    for (let current = path.dirname(path.resolve(dir)); ; current = path.dirname(current)) {
      parents.push(current);
      if (current === top || current === path.dirname(current)) return parents;
    }
  }

  async #publish(
    dir: string,
    tmpPath: string,
    manifestTmp: string,
    manifest: Manifest,
  ): Promise<Manifest> {
    return await this.#publication.runExclusive(async () => {
      this.#checkNotStopped();
      const recordsPath = path.join(dir, manifest.records_file);
      const manifestPath = path.join(dir, MANIFEST_FILE);
      let created: boolean;
      try {
        failpoint("commit.rename");
        await rename(tmpPath, recordsPath);
        failpoint("commit.link");
        created = await linkExclusively(manifestTmp, manifestPath);
      } catch (error) {
        throw ioError(dir, error);
      }
      if (created) {
        try {
          failpoint("commit.published");
          await fsyncDir(dir);
        } catch (error) {
          throw ioError(dir, error);
        }
        return manifest;
      }
      const existing = await readExistingManifest(manifestPath, dir).catch(async (error) => {
        // No manifest at all in its place (e.g. a FIFO): nothing published names our file.
        // An I/O error may hide a manifest that does, so the file stays then.
        if (error instanceof CheckpointStateError) {
          await unlink(recordsPath).catch(() => undefined);
        }
        throw error;
      });
      if (existing !== null && isSameManifest(existing, manifest)) return existing as Manifest;
      if (existing?.records_file !== manifest.records_file) {
        await unlink(recordsPath).catch(() => undefined);
      }
      throw differentCommit(dir, existing?.checkpoint_id ?? null);
    });
  }
}

/** Waits for every step; then throws the first failure, as `invalid_checkpoint_state`. */
async function allOrFirstFailure(dir: string, steps: Promise<unknown>[]): Promise<void> {
  const outcomes = await Promise.allSettled(steps);
  const failed = outcomes.find((outcome) => outcome.status === "rejected");
  if (failed === undefined) return;
  const reason: unknown = (failed as PromiseRejectedResult).reason;
  throw reason instanceof CheckpointStateError ? reason : ioError(dir, reason);
}

/** fsyncs and closes a file; closes it also when the fsync fails. */
async function syncAndClose(handle: FileHandle): Promise<void> {
  try {
    failpoint("commit.records.fsync");
    await handle.sync();
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/** The stored line of one record, refusing a value that cannot be written as JSON by episode. */
export function encodeRecordLine(record: RecordBase): string {
  return encodeRecordPieces(record).join("") + "\n";
}

/** Bytes per buffer of {@link encodeRecordLines}. */
const ENCODE_CHUNK_BYTES = 1024 * 1024;

/**
 * The stored lines of `records`, one after another, as buffers of about 1 MiB (a line may span
 * two): each piece is encoded straight into place, with no string per line or per block and
 * no copy afterwards.
 */
export function encodeRecordLines(records: Iterable<RecordBase>): Buffer[] {
  const chunks: Buffer[] = [];
  let chunk = Buffer.allocUnsafeSlow(ENCODE_CHUNK_BYTES);
  let offset = 0;
  const room = (bytes: number): void => {
    if (offset + bytes <= chunk.length) return;
    if (offset > 0) chunks.push(chunk.subarray(0, offset));
    chunk = Buffer.allocUnsafeSlow(Math.max(ENCODE_CHUNK_BYTES, bytes));
    offset = 0;
  };
  const put = (piece: string): void => {
    // A UTF-16 code unit takes at most 3 UTF-8 bytes: the bound avoids measuring the piece.
    room(piece.length * 3);
    offset += chunk.write(piece, offset, "utf8");
  };
  for (const record of records) {
    try {
      encodeJsonPieces(record, put);
    } catch (error) {
      throw notWritable(record, error);
    }
    room(1);
    chunk[offset++] = 0x0a;
  }
  if (offset > 0) chunks.push(chunk.subarray(0, offset));
  return chunks;
}

/** A record's stored JSON (without the newline) in pieces, refusing what cannot be written. */
function encodeRecordPieces(record: RecordBase): string[] {
  const pieces: string[] = [];
  try {
    encodeJsonPieces(record, (piece) => pieces.push(piece));
  } catch (error) {
    throw notWritable(record, error);
  }
  return pieces;
}

/**
 * A record that cannot be written, named by its episode. Not only NotJsonError: a getter or
 * proxy trap that throws while the record is walked also makes it unwritable.
 */
function notWritable(record: RecordBase, error: unknown): CheckpointStateError {
  const key = safeKey(record);
  const reason = error instanceof Error ? error.message : String(error);
  return new CheckpointStateError(
    `checkpoint record of episode '${key}' is not JSON: ${reason}`,
    key,
    {
      cause: error,
    },
  );
}

/** The manifest's text; extras that standard JSON cannot hold fail the commit (422). */
function manifestTextOf(manifest: Manifest): string {
  try {
    return serializeManifest(manifest);
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new CheckpointStateError(
      `the manifest of checkpoint '${String(manifest.checkpoint_id)}' is not JSON (check manifestExtra): ${reason}`,
      null,
      { cause: error },
    );
  }
}

/**
 * Encodes lines into two reused batch buffers and writes one while the other fills.
 *
 * Why: `Buffer.from(string)` allocates fresh memory per line, and touching fresh pages costs more
 * than the UTF-8 encoding itself (on a VM, ~300 MB/s against >5 GB/s for `buf.write` into memory
 * already mapped). A line longer than a batch gets a buffer of its own.
 */
class LineBatcher {
  readonly #handle: FileHandle;
  readonly #hash: Hash;
  readonly #buffers = [
    Buffer.allocUnsafeSlow(WRITE_BATCH_BYTES),
    Buffer.allocUnsafeSlow(WRITE_BATCH_BYTES),
  ];
  /** The write in flight from each buffer; a buffer is refilled only once its write ended. */
  readonly #inFlight: Promise<void>[] = [Promise.resolve(), Promise.resolve()];
  #current = 0;
  #offset = 0;
  /** Where the next write lands: writes carry their position, as several may be in flight. */
  #position = 0;
  /** Encoded lines adjacent in memory, not written yet: their memory and byte range. */
  #run: { readonly memory: ArrayBufferLike; readonly start: number; end: number } | null = null;
  /** Writes of bytes from where they are, in flight. */
  readonly #direct: Promise<void>[] = [];

  constructor(handle: FileHandle, hash: Hash) {
    this.#handle = handle;
    this.#hash = hash;
  }

  /** Appends one line: its pieces, then a newline. */
  async add(pieces: readonly string[]): Promise<void> {
    await this.#endRun();
    for (const piece of pieces) {
      // A UTF-16 code unit takes at most 3 UTF-8 bytes: the bound avoids measuring the piece.
      const bound = piece.length * 3;
      if (this.#offset + bound > WRITE_BATCH_BYTES) await this.#flush();
      if (bound > WRITE_BATCH_BYTES) {
        await this.#writeOwn(Buffer.from(piece, "utf8"));
        continue;
      }
      this.#offset += (this.#buffers[this.#current] as Buffer).write(piece, this.#offset, "utf8");
    }
    if (this.#offset + 1 > WRITE_BATCH_BYTES) await this.#flush();
    (this.#buffers[this.#current] as Buffer)[this.#offset] = 0x0a;
    this.#offset += 1;
  }

  /**
   * Appends one line already encoded, with its newline. Lines adjacent in memory join a run,
   * written from where it is (no copy) once it ends; a short run is copied into the batch.
   */
  async addBytes(line: Buffer): Promise<void> {
    const run = this.#run;
    if (run !== null && line.buffer === run.memory && line.byteOffset === run.end) {
      run.end += line.length;
      return;
    }
    await this.#endRun();
    this.#run = { memory: line.buffer, start: line.byteOffset, end: line.byteOffset + line.length };
  }

  /** Writes the current run of adjacent lines: in place when long, else into the batch. */
  async #endRun(): Promise<void> {
    const run = this.#run;
    if (run === null) return;
    this.#run = null;
    const bytes = Buffer.from(run.memory, run.start, run.end - run.start);
    if (bytes.length >= DIRECT_RUN_BYTES) {
      await this.#writeOwn(bytes);
      return;
    }
    if (this.#offset + bytes.length > WRITE_BATCH_BYTES) await this.#flush();
    this.#offset += bytes.copy(this.#buffers[this.#current] as Buffer, this.#offset);
  }

  /**
   * Bytes that go out from where they are (a piece larger than a batch, a long run), in order:
   * after what is batched before them, which is flushed first.
   */
  async #writeOwn(own: Buffer): Promise<void> {
    await this.#flush();
    this.#hash.update(own);
    const write = writeFully(this.#handle, own, this.#claim(own.length));
    this.#direct.push(write);
    // Surface a failure at the next own write rather than only at the end.
    write.catch(() => undefined);
    if (this.#direct.length >= MAX_DIRECT_IN_FLIGHT) await this.#direct.shift();
  }

  /** Writes what is buffered and waits for every write. */
  async finish(): Promise<void> {
    await this.#endRun();
    await this.#flush();
    await this.settle();
    // Every write has ended: any failure fails the file, the last batch's included.
    for (const write of [...this.#inFlight, ...this.#direct.splice(0)]) await write;
  }

  /** Waits for the writes in flight, ignoring their failures (the caller is failing already). */
  async settle(): Promise<void> {
    await Promise.all(
      [...this.#inFlight, ...this.#direct].map((write) => write.catch(() => undefined)),
    );
  }

  async #flush(): Promise<void> {
    if (this.#offset === 0) return;
    const filled = (this.#buffers[this.#current] as Buffer).subarray(0, this.#offset);
    this.#hash.update(filled);
    this.#inFlight[this.#current] = writeFully(this.#handle, filled, this.#claim(filled.length));
    await this.#switch();
  }

  /** Bytes handed to the file so far. */
  get position(): number {
    return this.#position;
  }

  #claim(length: number): number {
    const position = this.#position;
    this.#position += length;
    return position;
  }

  async #switch(): Promise<void> {
    this.#current = 1 - this.#current;
    this.#offset = 0;
    // Surface a failed write now rather than after the whole file was encoded.
    await this.#inFlight[this.#current];
  }
}

/** Writes every byte of `buffers`: `writev` may write fewer bytes than asked without failing. */
async function writeFully(handle: FileHandle, buffer: Buffer, position: number): Promise<void> {
  const { bytesWritten } = await handle.writev([buffer], position);
  let written = bytesWritten;
  while (written < buffer.length) {
    const { bytesWritten: n } = await handle.write(
      buffer,
      written,
      buffer.length - written,
      position + written,
    );
    if (n <= 0) throw new Error("the file accepted no more bytes");
    written += n;
  }
}

function safeKey(record: RecordBase): string {
  try {
    return captureKey(record.episode_id);
  } catch {
    return "<unknown>";
  }
}

/** Creates the manifest's temporary `file` (new) holding `content`, fsynced. */
async function writeDurably(file: string, content: string): Promise<void> {
  failpoint("commit.manifest.temp");
  const handle = await open(file, "wx");
  try {
    await handle.writeFile(content, "utf8");
    await handle.sync();
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/**
 * Publishes the fsynced temporary `tmp` as `target` only if `target` is absent (a hard link
 * fails when it exists), then removes the temporary; whether it published.
 */
async function linkExclusively(tmp: string, target: string): Promise<boolean> {
  try {
    await link(tmp, target);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw error;
  } finally {
    await unlink(tmp).catch(() => undefined);
  }
}

/** Field-by-field equality; a foreign manifest too deep to compare is simply different. */
function isSameManifest(existing: Record<string, unknown>, ours: Manifest): boolean {
  try {
    return sameManifest(existing, ours);
  } catch {
    return false;
  }
}

async function readExistingManifest(
  manifestPath: string,
  dir: string,
): Promise<Record<string, unknown> | null> {
  try {
    const parsed: unknown = JSON.parse(await readRegularFile(manifestPath));
    return parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)
      ? (parsed as Record<string, unknown>)
      : null;
  } catch (error) {
    if (error instanceof SyntaxError) return null;
    if (error instanceof CheckpointStateError) throw error;
    throw ioError(dir, error);
  }
}
