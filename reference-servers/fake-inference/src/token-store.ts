/**
 * The backend's durable token store: one JSON file per staged record under a directory, written
 * atomically and synced before a stage returns, so staged tokens outlive every other server of the
 * deployment (and this one). Staging keys are opaque: a key maps to a file name by URI encoding,
 * or, when that name would be too long for the file system (a long rollout ID), by its SHA-256.
 * A generation-cut round stages its prefixes as one batch file (`*.batch.json`, an object from
 * key to record) with one fsync, like a real engine's group commit.
 *
 * @module
 */
import { createHash } from "node:crypto";
import { mkdir, open, readFile, readdir, rename } from "node:fs/promises";
import path from "node:path";
import {
  StagedCallRecordSchema,
  stagingKey,
  type StageResult,
  type StagedCallRecord,
  type StagingSink,
} from "./sdk-capture.js";

/** A staged record the store does not hold, or holds corrupt. */
export class TokenStoreError extends Error {
  override name = "TokenStoreError";
  constructor(
    message: string,
    readonly key: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** The longest file name most file systems allow, in bytes (ext4, XFS, Btrfs, tmpfs). */
const MAX_FILE_NAME_BYTES = 255;

/**
 * The file a staging key is stored in: `<URI-encoded key>.json`, or `~<sha256 hex>.json` when
 * that name would be too long (`~` is never the start of an encoded key, and names that fit keep
 * their form, so stores written before read as they did).
 */
export function stagedFilePath(dir: string, key: string): string {
  const plain = `${encodeURIComponent(key)}.json`;
  // URI encoding leaves only ASCII: a character is a byte.
  if (plain.length <= MAX_FILE_NAME_BYTES) return path.join(dir, plain);
  return path.join(dir, `~${createHash("sha256").update(key, "utf8").digest("hex")}.json`);
}

/** Name suffix of a batch file (one cut round's prefixes). */
const BATCH_SUFFIX = ".batch.json";

/**
 * Staged records on disk. As a {@link StagingSink} it stages a completed call under its default
 * key `<capture key>/<model_call_id>`; {@link put} stages under any key (a generation cut's).
 * Records read back are validated (digests recomputed) and cached; the store is the only writer.
 */
export class TokenStore implements StagingSink {
  readonly #cache = new Map<string, StagedCallRecord>();
  /** Batch files already read into the cache (or written by this process). */
  readonly #batchesRead = new Set<string>();
  #ready: Promise<unknown> | null = null;
  /** The one scan of batch files on disk: only this store writes them, so once suffices. */
  #batchScan: Promise<void> | null = null;
  #sequence = 0;

  constructor(readonly dir: string) {}

  /** Stages a completed call under its default staging key. */
  async stage(record: StagedCallRecord): Promise<StageResult> {
    const key = stagingKey(record.rollout_id, record.model_call_id);
    await this.put(key, record);
    return { schema_version: 2, ok: true, staging_key: key, error: null };
  }

  /** Writes `record` under `key`, durably: the file and its directory entry are synced. */
  async put(key: string, record: StagedCallRecord): Promise<void> {
    await this.#writeDurably(stagedFilePath(this.dir, key), JSON.stringify(record));
    this.#cache.set(key, record);
  }

  /** Writes every `[key, record]` durably as one batch file: one fsync for all of them. */
  async putMany(entries: readonly (readonly [string, StagedCallRecord])[]): Promise<void> {
    if (entries.length === 0) return;
    const name = `${process.pid}-${Date.now()}-${(this.#sequence += 1)}${BATCH_SUFFIX}`;
    this.#batchesRead.add(name);
    const text = JSON.stringify(Object.fromEntries(entries));
    await this.#writeDurably(path.join(this.dir, name), text);
    for (const [key, record] of entries) this.#cache.set(key, record);
  }

  /** Writes `text` to `file` atomically: temporary file, fsync, rename, fsync the directory. */
  async #writeDurably(file: string, text: string): Promise<void> {
    this.#ready ??= mkdir(this.dir, { recursive: true });
    await this.#ready;
    // A short name of its own: the final name may already be as long as a name can be.
    const temporary = path.join(this.dir, `.${process.pid}-${(this.#sequence += 1)}.tmp`);
    const handle = await open(temporary, "w");
    try {
      await handle.writeFile(text);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temporary, file);
    // The rename is durable only once the directory is synced.
    const dir = await open(this.dir, "r");
    try {
      await dir.sync();
    } finally {
      await dir.close();
    }
  }

  /** Reads batch files on disk into the cache (a restarted backend finds earlier rounds). */
  async #readBatches(): Promise<void> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch {
      return;
    }
    for (const name of names) {
      if (!name.endsWith(BATCH_SUFFIX) || this.#batchesRead.has(name)) continue;
      this.#batchesRead.add(name);
      const batch = safeJson(await readFile(path.join(this.dir, name), "utf8"));
      if (batch === null || typeof batch !== "object") continue;
      for (const [key, value] of Object.entries(batch)) {
        const parsed = StagedCallRecordSchema.safeParse(value);
        if (parsed.success && !this.#cache.has(key)) this.#cache.set(key, parsed.data);
      }
    }
  }

  /** The record staged under `key`. Throws {@link TokenStoreError} when missing or corrupt. */
  async get(key: string): Promise<StagedCallRecord> {
    const cached = this.#cache.get(key);
    if (cached !== undefined) return cached;
    let text: string;
    try {
      text = await readFile(stagedFilePath(this.dir, key), "utf8");
    } catch (error) {
      this.#batchScan ??= this.#readBatches();
      await this.#batchScan;
      const batched = this.#cache.get(key);
      if (batched !== undefined) return batched;
      throw new TokenStoreError(`no staged record under '${key}'`, key, { cause: error });
    }
    const parsed = StagedCallRecordSchema.safeParse(safeJson(text));
    if (!parsed.success) {
      throw new TokenStoreError(`the record staged under '${key}' is corrupt`, key, {
        cause: parsed.error,
      });
    }
    this.#cache.set(key, parsed.data);
    return parsed.data;
  }

  /** The token IDs a staging chain names: its records' `token_ids_delta`, concatenated. */
  async prefixOf(chain: readonly string[]): Promise<number[]> {
    const records = await Promise.all(chain.map((key) => this.get(key)));
    return records.flatMap((record) => record.token_ids_delta);
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}
