import { open, readdir, stat } from "node:fs/promises";
import path from "node:path";
import type { Logger } from "pino";
import type { EpisodeId } from "../../identity/episode-id.js";
import { fsyncDir } from "../../store/fs-sync.js";
import { makeDirectories, isCode } from "../../store/safe-fs.js";
import { InvalidLedgerRowError, LedgerConflictError, RolloutRetiredError } from "./errors.js";
import {
  LEDGER_FILE_KINDS,
  captureFileName,
  ledgerEpisode,
  ledgerKeyBatch,
  type CaptureFileKind,
} from "./files.js";
import { DeferredSettling } from "./deferred-settling.js";
import { readFenceLists, removeFenceLists, writeFenceList } from "./fence-lists.js";
import { FENCE_WINDOW, attemptKeysThrough } from "./fence-window.js";
import { planImport, type ImportPlan, type LedgerImport } from "./import-plan.js";
import { KeyedMutex } from "../../util/keyed-mutex.js";
import { failpoint } from "../../util/failpoints.js";
import { Mutex } from "../../util/mutex.js";
import { manifestFromRows, type LedgerManifest, type RowCallRecord } from "./manifest.js";
import {
  EmptyFileBatch,
  fileExistsSync,
  inSlices,
  createFileInodeSync,
  unlinkIfPresentSync,
} from "./file-batch.js";
import { RolloutIndex } from "./rollout-index.js";
import { RowCache } from "./row-cache.js";
import { RegistryUnavailableError, WriterRegistry } from "./writer-registry.js";
import { decodeRowLine, encodeRowLine, type LedgerRow, type LedgerRowInput } from "./row-codec.js";
import { stampRows } from "./stamp.js";

/** Options of a {@link CaptureLedger}. */
export interface CaptureLedgerOptions {
  /** Where discarded late rows are reported (warn level). @default no logging */
  readonly logger?: Pick<Logger, "warn"> | null;
  /**
   * Runs before any operation on `keys`, outside the locks: a worker of a multi-worker model
   * server asks its coordinator here to write the files a restore deferred for them.
   */
  readonly beforeUse?: ((keys: readonly string[]) => Promise<void>) | null;
  /**
   * Whether the first operation writes the fences of the fence lists it finds (see
   * {@link CaptureLedger.importRecords}). A worker of a multi-worker model server says no: the
   * lists it could find are its coordinator's, which settles them (a worker asks for a key's
   * files before it uses the key), and writing thousands of fences on a worker's first call
   * would only repeat that work. @default true
   */
  readonly recoverFenceLists?: boolean;
}

/** What a retire or delete batch did: keys whose ledger it removed, and the others. */
export interface LedgerRemoval {
  /** Keys whose ledger file existed and was removed, in batch order. */
  readonly removed: readonly string[];
  /** The other keys of the batch (a fence-only key is absent), in batch order. */
  readonly absent: readonly string[];
}

/**
 * What a write did: `appended` a row, found the `unchanged` identical row already there, or
 * `discarded` it because the attempt is retired.
 */
export type RecordOutcome = "appended" | "unchanged" | "discarded";

/** What an import batch did. */
export interface LedgerImportResult {
  /** The target keys, in batch order. */
  readonly imported: readonly string[];
  /** Names of the files dead executions left that the import removed, sorted. */
  readonly cleared: readonly string[];
  /** The retire of the source attempts `0..N` of every target. */
  readonly retired: LedgerRemoval;
}

/**
 * The file capture ledger of a policy model server: per capture key, the rows of its committed
 * and failed calls, and the files that retire, delete, restore and started markers leave
 * (see docs/policy-model.md).
 *
 * ## Files
 * In `dir`, per capture key `<k>`: `<k>.lineage.jsonl` (the rows), `<k>.lineage.retired` (the
 * fence of a retired attempt), `<k>.lineage.started` (a call of the attempt reached a server);
 * an import also clears `<k>.tokens.jsonl` and `<k>.tokens.incomplete`. Every key is validated
 * before a file name is built from it; an invalid key throws `InvalidLedgerKeyError`
 * (for a batch: before anything changes).
 *
 * ## Durability
 * A row is appended, flushed and fsynced; creating a ledger fsyncs the directory. A retire
 * writes its fences, fsyncs the directory once, then deletes; a delete fsyncs the directory
 * once per non-empty batch. An import writes its fences as one fence list (the file and its
 * directory fsynced), fsyncs the directory once, and defers its ledgers, fence files and
 * deletions ({@link importRecords}); settling them fsyncs the directory per batch of keys, and
 * a list is removed once every fence it stands for is a durable file. No imported ledger file
 * is fsynced: the checkpoint is the durable copy and importing again gives the same ledgers.
 * Started markers are never fsynced.
 *
 * ## Concurrency
 * Operations on one key are serialized by an in-process lock per key; batches take their keys
 * in sorted order. Processes sharing the directory see each other's rows (reads notice
 * appended bytes) and fences, but nothing locks across processes.
 *
 * @example
 * const ledger = new CaptureLedger("/var/capture");
 * await ledger.recordFailure("task-3-a1", "call-7", "worker_capture_failed");
 * const { failures } = await ledger.manifest("task-3-a1"); // one, reason "worker_capture_failed"
 * await ledger.retire(["task-3", "task-3-a1"]); // { removed: ["task-3-a1"], absent: ["task-3"] }
 */
export class CaptureLedger {
  readonly #dir: string;
  readonly #logger: Pick<Logger, "warn"> | null;
  readonly #beforeUse: ((keys: readonly string[]) => Promise<void>) | null;
  readonly #locks = new KeyedMutex();
  readonly #cache = new RowCache();
  readonly #writers: WriterRegistry;
  /** Set when the writer registry cannot exist (see {@link #beforeChange}). */
  #unregistrable = false;
  /** The file work imports deferred, and the fence lists they wrote. */
  readonly #deferred: DeferredSettling;
  #dirReady: Promise<void> | null = null;
  readonly #importing = new Mutex();
  /** The fence lists other executions left, turned into fences before the first operation. */
  #recovered: Promise<void> | null = null;

  /** A ledger over `dir`, created on the first write if missing. */
  constructor(dir: string, options: CaptureLedgerOptions = {}) {
    this.#dir = dir;
    this.#writers = new WriterRegistry(dir);
    this.#logger = options.logger ?? null;
    this.#beforeUse = options.beforeUse ?? null;
    this.#deferred = new DeferredSettling(dir, this.#locks, this.#logger);
    if (options.recoverFenceLists === false) this.#recovered = Promise.resolve();
  }

  /** The ledger directory. */
  get dir(): string {
    return this.#dir;
  }

  /** How many keys have cached rows (retire, delete and import drop theirs). */
  get cachedKeyCount(): number {
    return this.#cache.size;
  }

  /**
   * Records a call's row under `key`. Rows are write-once per `model_call_id`: the identical
   * row again is `unchanged`, a different one throws {@link LedgerConflictError} and leaves the
   * ledger as it was. A row that would create the ledger of a retired key is `discarded` with
   * a warning naming its staging key; the fence is looked at only then.
   */
  async record(key: string, row: LedgerRowInput): Promise<RecordOutcome> {
    ledgerEpisode(key);
    const line = encodeRowLine(key, row);
    return await this.#run([key], async () => {
      const { exists, rows } = this.#read(key);
      const existing = rows.find((stored) => stored.model_call_id === row.model_call_id);
      if (existing !== undefined) {
        if (encodeRowLine(key, existing) === line) return "unchanged";
        throw new LedgerConflictError(key, row.model_call_id);
      }
      const stagingKey = typeof row.staging_key === "string" ? row.staging_key : null;
      return await this.#append(key, exists, line, {
        model_call_id: row.model_call_id,
        staging_key: stagingKey,
      });
    });
  }

  /**
   * Records that a call failed: the row `{model_call_id, failure_reason}`, appended unless the
   * identical row is there already. Discarded like {@link record} on a retired key.
   */
  async recordFailure(key: string, modelCallId: string, reason: string): Promise<RecordOutcome> {
    ledgerEpisode(key);
    if (typeof reason !== "string" || reason.length === 0) {
      throw new InvalidLedgerRowError(key, "a failure row needs a non-empty reason");
    }
    const line = encodeRowLine(key, { model_call_id: modelCallId, failure_reason: reason });
    return await this.#run([key], async () => {
      const { exists, rows } = this.#read(key);
      if (rows.some((stored) => encodeRowLine(key, stored) === line)) return "unchanged";
      return await this.#append(key, exists, line, { model_call_id: modelCallId });
    });
  }

  /**
   * The rows of `key` in file order; none when it has no ledger. Fences are not consulted: a
   * fenced key's rows are gone, except after a retire that crashed before deleting them.
   */
  async rows(key: string): Promise<LedgerRow[]> {
    ledgerEpisode(key);
    return await this.#run([key], async () => [...this.#read(key).rows]);
  }

  /** Whether `key` has any row; throws {@link RolloutRetiredError} when it is retired. */
  async hasRows(key: string): Promise<boolean> {
    ledgerEpisode(key);
    return await this.#run([key], async () => {
      await this.#refuseRetired(key);
      return this.#read(key).rows.length > 0;
    });
  }

  /**
   * The manifest of `key`, records built by `toRecord` (default
   * `callRecordFromRow`); throws {@link RolloutRetiredError} when `key` is retired, since
   * an empty manifest would read as an attempt that made no calls.
   */
  async manifest(key: string): Promise<LedgerManifest<RowCallRecord>>;
  async manifest<R>(key: string, toRecord: (row: LedgerRow) => R): Promise<LedgerManifest<R>>;
  async manifest<R>(key: string, toRecord?: (row: LedgerRow) => R): Promise<LedgerManifest<R>> {
    ledgerEpisode(key);
    return await this.#run([key], async () => {
      await this.#refuseRetired(key);
      const { rows } = this.#read(key);
      return toRecord === undefined
        ? (manifestFromRows(key, rows) as LedgerManifest<R>)
        : manifestFromRows(key, rows, toRecord);
    });
  }

  /**
   * The rows a commit exports for `key`: every row except those of the calls in
   * `undelivered`, whose responses the client has not received.
   */
  async exportRows(key: string, undelivered: ReadonlySet<string>): Promise<LedgerRow[]> {
    const rows = await this.rows(key);
    return rows.filter((row) => !undelivered.has(row.model_call_id));
  }

  /**
   * {@link exportRows} of each of `keys`, in order: a commit exports thousands of ledgers, read
   * as one batch (every key locked, synchronous reads in slices) rather than one by one.
   */
  async exportRowsOf(
    keys: readonly string[],
    undelivered: ReadonlySet<string>,
  ): Promise<LedgerRow[][]> {
    for (const key of keys) ledgerEpisode(key);
    return await this.#run(keys, () => {
      // Alone in the writer registry, every cached ledger is as this instance left it: no stat
      // per ledger (thousands at a commit) to look for other processes' appends.
      const cache = this.#cache;
      const read = this.#writers.othersMayWrite()
        ? (key: string) => cache.read(key, this.#path(key, "ledger"))
        : (key: string) => cache.readUnchanged(key, this.#path(key, "ledger"));
      return inSlices(keys, (key) =>
        read(key).rows.filter((row) => !undelivered.has(row.model_call_id)),
      );
    });
  }

  /**
   * Retires the ledgers of `keys`: writes each key's fence (also for keys that
   * never recorded), fsyncs the directory once, then deletes each ledger and started marker.
   * Afterwards {@link hasRows} and {@link manifest} throw {@link RolloutRetiredError} and late
   * writes are discarded. A key whose fence a concurrent {@link delete} removed in between has
   * been reused: its new ledger is kept.
   *
   * ## Rules
   * - The batch is validated whole first; repeats count once.
   * - Retiring again writes nothing but still fsyncs the directory, so a fence an overlapping
   *   retire wrote is durable before this one reports success; the same fsync makes durable a
   *   fence a crashed retire left, before its ledger goes.
   */
  async retire(keys: readonly string[]): Promise<LedgerRemoval> {
    const batch = ledgerKeyBatch(keys);
    if (batch.length === 0) return { removed: [], absent: [] };
    await this.#run(batch, async () => {
      await this.#ensureDir();
      await this.#beforeChange();
      const fences = new EmptyFileBatch();
      await inSlices(batch, (key) => fences.create(this.#path(key, "fence")));
    });
    await fsyncDir(this.#dir);
    const removedFlags = await this.#run(batch, async () =>
      inSlices(batch, (key) => this.#deleteFenced(key)),
    );
    return partition(batch, removedFlags);
  }

  /**
   * Deletes every ledger file of `keys` — ledger, fence and started marker — so each key is
   * unused again (an empty manifest, writes allowed), and fsyncs the directory once. A key
   * whose ledger existed is `removed`, the others (fence-only ones too) `absent`.
   */
  async delete(keys: readonly string[]): Promise<LedgerRemoval> {
    const batch = ledgerKeyBatch(keys);
    if (batch.length === 0) return { removed: [], absent: [] };
    // A fence list naming a deleted key would fence it again after a crash: the lists naming
    // these keys are finished (every fence written, the lists removed) first.
    if (this.#deferred.listed(batch)) await this.settleDeferred();
    const removedFlags = await this.#run(batch, async () => {
      await this.#beforeChange();
      const flags = await inSlices(batch, (key) => this.#deleteFiles(key));
      // Even when nothing was found: an overlapping delete may not have synced its removals.
      await fsyncDir(this.#dir);
      return flags;
    });
    return partition(batch, removedFlags);
  }

  /**
   * Retires, in one batch, the ledgers of attempts `0..e.attempt` of every episode. Past
   * {@link FENCE_WINDOW} attempts, only the window's and those with files are fenced
   * ({@link attemptKeysThrough}).
   */
  async retireLedgers(episodes: Iterable<EpisodeId>): Promise<LedgerRemoval> {
    const list = [...episodes];
    let index: RolloutIndex | null = null;
    if (list.some((e) => e.attempt >= FENCE_WINDOW)) {
      // The listing must hold what earlier imports deferred, or an old attempt's ledger written
      // after it would escape its fence.
      await this.#recoverFenceLists();
      await this.settleDeferred();
      index = new RolloutIndex(await this.#listing());
    }
    return await this.retire(attemptKeysThrough(list, index));
  }

  /** The directory's names; none before the first write. */
  async #listing(): Promise<string[]> {
    try {
      return await readdir(this.#dir);
    } catch (error) {
      if (isCode(error, "ENOENT")) return [];
      throw error;
    }
  }

  /**
   * Installs a restore's ledgers in one batch.
   *
   * ## Steps
   * 1. Validates the whole batch: valid keys, each target a later attempt of its source's
   *    rollout, one target per rollout, rows that are JSON objects naming their call. Runs the
   *    file work an earlier import deferred, so the listing below is the whole truth.
   * 2. Lists the directory once and, for each target `<rollout>-a<T>`, removes what dead
   *    executions left for attempts `T, T+1, …` of that rollout only: ledgers, fences, started
   *    markers and token files. A fence left there would discard the restored rows later.
   * 3. Fences attempts `0..N` of every source (the retire's first half; targets are not
   *    retired) by writing their keys as one fence list (`restore-fences/<name>.keys`), and
   *    fsyncs the directory once: the clearing and the fences are durable when the import
   *    returns.
   * 4. Defers the rest: each source's fence file, writing each target's ledger as exactly its
   *    rows, stamped ({@link stampRows}; no file for a target without rows), and deleting the
   *    fenced source ledgers and their started markers. Every operation on a key runs its
   *    deferred work first, so none can tell; {@link settleDeferred} runs the rest in the
   *    background, then removes the list.
   *
   * Imports run one at a time, each after the work earlier ones deferred.
   *
   * ## Why deferred
   * A restore of 8,000 episodes would otherwise create 8,000 files and delete 8,000 more inside
   * the restore. The checkpoint is the durable copy of the rows (ledger files of an import are
   * never fsynced), and a crash before they are written is followed by another restore. The
   * fences must be durable before the import returns, but need not be files yet: one list is a
   * write and two fsyncs where 8,000 hard links cost ~100 ms of CPU. Any instance reads the
   * lists it finds at its first operation and writes their fences then, so a process started
   * after a crash sees the source attempts retired; a worker of the same server asks its
   * coordinator to settle a key before using it (`beforeUse`). A process of another server
   * sharing the directory, already running, sees the fence files once they are settled.
   */
  async importRecords(targets: readonly LedgerImport[]): Promise<LedgerImportResult> {
    const plans = planImport(targets);
    if (plans.length === 0) {
      return { imported: [], cleared: [], retired: { removed: [], absent: [] } };
    }
    return await this.#importing.runExclusive(() => this.#importPlans(plans));
  }

  async #importPlans(plans: readonly ImportPlan[]): Promise<LedgerImportResult> {
    await this.#ensureDir();
    await this.#beforeChange();
    await this.#recoverFenceLists();
    await this.settleDeferred();
    const listing = await readdir(this.#dir);
    const index = new RolloutIndex(listing);
    const listed = new Set(listing);
    const doomed = plans.flatMap((plan) => index.fromAttempt(plan.target));
    // Built from EpisodeIds: valid keys, only repeats to drop.
    const sources = [
      ...new Set(
        attemptKeysThrough(
          plans.map((plan) => plan.source),
          index,
        ),
      ),
    ];
    const lockKeys = [
      ...doomed.map((file) => file.key),
      ...plans.map((plan) => plan.targetKey),
      ...sources,
    ];
    await this.#run(lockKeys, async () => {
      for (const key of lockKeys) this.#cache.drop(key);
      failpoint("ledger.import.clear");
      await inSlices(doomed, (file) => unlinkIfPresentSync(path.join(this.#dir, file.name)));
      failpoint("ledger.import.fence");
      if (sources.length > 0) {
        const list = await writeFenceList(this.#dir, sources);
        // From here on the sources are fenced, even should the import fail: each key's fence
        // file is owed (links to one inode, as a retire makes them) until the list goes.
        const fences = new EmptyFileBatch();
        for (const key of sources) {
          this.#deferred.defer(key, {
            run: () => fences.create(this.#path(key, "fence")),
            creates: false,
          });
        }
        this.#deferred.addFenceList(list, sources);
      }
      // The clearing and the fence list (a new list directory's entry too) are durable before
      // the import returns.
      failpoint("ledger.import.fsync");
      await fsyncDir(this.#dir);
      for (const plan of plans) {
        if (plan.rows.length === 0) continue;
        const file = this.#path(plan.targetKey, "ledger");
        const { targetKey, rows, sourceKey } = plan;
        this.#deferred.defer(targetKey, {
          // Exclusively: another server sharing the directory that restored the same target may
          // have written it first, and appended its replacement's rows since. Stamped only here:
          // the copies are made when the file is, not inside the restore.
          run: () => this.#writeImported(targetKey, file, stampRows(rows, sourceKey)),
          creates: true,
        });
      }
      // The list makes the fences durable: the deletions they allow need no fsync first.
      for (const key of sources) {
        this.#deferred.defer(key, { run: () => this.#deleteFenced(key), creates: false });
      }
    });
    const existed = sources.map((key) => listed.has(captureFileName(key, "ledger")));
    return {
      imported: plans.map((plan) => plan.targetKey),
      cleared: doomed.map((file) => file.name).sort(),
      retired: partition(sources, existed),
    };
  }

  /**
   * Marks `key` started: creates `<k>.lineage.started` exclusively before the first
   * call of the attempt proceeds. Returns whether this call created it; a retired key is never
   * marked. Not fsynced: other servers only need to see it, and after a crash the next step is
   * a restore, which removes it.
   */
  async markStarted(key: string): Promise<boolean> {
    ledgerEpisode(key);
    return await this.#run([key], async () => {
      if (await this.#exists(key, "fence")) return false;
      await this.#ensureDir();
      try {
        const handle = await open(this.#path(key, "started"), "wx");
        await handle.close();
        return true;
      } catch (error) {
        if (isCode(error, "EEXIST")) return false;
        throw error;
      }
    });
  }

  /** Whether a server marked `key` started. */
  async isStarted(key: string): Promise<boolean> {
    ledgerEpisode(key);
    return await this.#run([key], async () => await this.#exists(key, "started"));
  }

  /**
   * Runs the file work an import deferred for `keys` now (the coordinator of a multi-worker
   * model server does, when a worker is about to use them).
   */
  async settleKeys(keys: readonly string[]): Promise<void> {
    for (const key of keys) ledgerEpisode(key);
    await this.#run(keys, async () => undefined);
  }

  /** How many keys still have file work an import deferred. */
  get deferredKeyCount(): number {
    return this.#deferred.size;
  }

  /** The keys that still have file work an import deferred (targets and fenced sources). */
  deferredKeys(): string[] {
    return this.#deferred.keys();
  }

  /**
   * Starts {@link settleDeferred} unless nothing waits or it is running already; resolves when
   * it ends. A failure is logged (warn), not thrown, and the work that failed waits for its
   * key's next operation.
   */
  settleInBackground(): Promise<void> {
    return this.#deferred.inBackground();
  }

  /**
   * Runs every piece of file work an import deferred (target ledgers to write, source ledgers
   * and started markers to delete), a batch of keys at a time under their locks, fsyncing the
   * directory after each batch. The policy participant starts it when admission reopens; any
   * operation on a key runs that key's work first anyway. A key whose work fails is left
   * waiting and the others still settle; then the call rejects with the first failure.
   */
  async settleDeferred(): Promise<void> {
    await this.#deferred.settleAll();
  }

  /**
   * Turns the fence lists another execution left (it crashed before removing them, or is a
   * process sharing the directory) into fence files, deleting the fenced ledgers as an import's
   * deferred work would; fsyncs; removes the lists. Once per instance, before its first
   * operation: no fence a list stands for is ever missed. Idempotent, so two processes
   * recovering the same list, or recovering a list its writer still settles, agree.
   */
  async #recoverFenceLists(): Promise<void> {
    this.#recovered ??= (async () => {
      const lists = await readFenceLists(this.#dir);
      if (lists.length === 0) return;
      await this.#beforeChange();
      const fences = new EmptyFileBatch();
      for (const list of lists) {
        await inSlices(list.keys, (key) => {
          fences.create(this.#path(key, "fence"));
          this.#deleteFenced(key);
        });
      }
      await fsyncDir(this.#dir);
      await removeFenceLists(
        this.#dir,
        lists.map((list) => list.name),
      );
    })();
    try {
      await this.#recovered;
    } catch (error) {
      this.#recovered = null;
      throw error;
    }
  }

  /**
   * Deletes the ledger files of a restored attempt no server started, leaving no
   * fence, since the controller may still run the attempt; returns false and changes nothing
   * when a started marker exists.
   */
  async deleteUnstarted(key: string): Promise<boolean> {
    ledgerEpisode(key);
    return await this.#run([key], async () => {
      if (await this.#exists(key, "started")) return false;
      await this.#beforeChange();
      this.#deleteFiles(key);
      await fsyncDir(this.#dir);
      return true;
    });
  }

  /**
   * Runs `fn` holding the locks of `keys`, once the file work a restore deferred for them has
   * run: every operation sees the files as if that work had run inside the restore.
   */
  async #run<T>(keys: Iterable<string>, fn: () => Promise<T>): Promise<T> {
    const unique = [...new Set(keys)];
    await this.#recoverFenceLists();
    await this.#beforeUse?.(unique);
    return await this.#locks.run(unique, async () => {
      await this.#deferred.settle(unique);
      return await fn();
    });
  }

  /**
   * Creates the ledger file of an imported target as exactly `rows`, unless it exists, and
   * caches what it wrote: the first read after a restore (often the next commit's export of
   * every restored episode) then reads and parses none of these files again.
   */
  #writeImported(key: string, file: string, rows: readonly LedgerRowInput[]): void {
    const lines = rows.map((row) => encodeRowLine(key, row));
    const text = lines.join("");
    const ino = createFileInodeSync(file, text);
    if (ino === null) return;
    const parsed = lines.map((line) => decodeRowLine(key, line.slice(0, -1)));
    this.#cache.wrote(key, ino, Buffer.byteLength(text), parsed);
  }

  async #append(
    key: string,
    exists: boolean,
    line: string,
    late: { model_call_id: string; staging_key?: string | null },
  ): Promise<RecordOutcome> {
    if (!exists) {
      if (await this.#exists(key, "fence")) {
        this.#logger?.warn(
          { capture_key: key, ...late },
          `discarded a late ledger row of retired attempt '${key}'` +
            (late.staging_key
              ? `; its staged tokens (${late.staging_key}) are in no manifest`
              : ""),
        );
        return "discarded";
      }
      await this.#ensureDir();
    }
    await this.#beforeChange();
    let ino: number;
    let size: number;
    try {
      const handle = await open(this.#path(key, "ledger"), "a");
      try {
        // One write on a file opened for appending: rows appended by other processes sharing
        // the directory (the workers of one model server) never interleave with it.
        const bytes = Buffer.from(line, "utf8");
        const { bytesWritten } = await handle.write(bytes, 0, bytes.length);
        if (bytesWritten !== bytes.length) {
          throw new Error(
            `short write to the ledger of '${key}' (${bytesWritten} of ${bytes.length} bytes)`,
          );
        }
        await handle.sync();
        ({ ino, size } = await handle.stat());
      } finally {
        await handle.close();
      }
    } catch (error) {
      this.#cache.drop(key);
      throw error;
    }
    // A ledger a deferred import write created is new to the directory too.
    if (this.#deferred.takeUnsynced(key) || !exists) await fsyncDir(this.#dir);
    this.#cache.appended(
      key,
      ino,
      size,
      Buffer.byteLength(line),
      decodeRowLine(key, line.slice(0, -1)),
    );
    return "appended";
  }

  #read(key: string): { exists: boolean; rows: readonly LedgerRow[] } {
    return this.#cache.read(key, this.#path(key, "ledger"));
  }

  async #refuseRetired(key: string): Promise<void> {
    if (await this.#exists(key, "fence")) throw new RolloutRetiredError(key);
  }

  /**
   * The second half of a retire: deletes the ledger and started marker of fenced `key`; whether
   * its ledger existed. A key whose fence is gone was deleted meanwhile, maybe by another process
   * sharing the directory, and may have been written anew: it is left alone.
   */
  #deleteFenced(key: string): boolean {
    this.#cache.drop(key);
    if (!fileExistsSync(this.#path(key, "fence"))) return false;
    const removed = unlinkIfPresentSync(this.#path(key, "ledger"));
    unlinkIfPresentSync(this.#path(key, "started"));
    return removed;
  }

  /** Removes every ledger file of `key`; whether its ledger existed. */
  #deleteFiles(key: string): boolean {
    this.#cache.drop(key);
    const [ledger] = LEDGER_FILE_KINDS.map((kind) => unlinkIfPresentSync(this.#path(key, kind)));
    return ledger === true;
  }

  async #exists(key: string, kind: CaptureFileKind): Promise<boolean> {
    try {
      await stat(this.#path(key, kind));
      return true;
    } catch (error) {
      if (isCode(error, "ENOENT")) return false;
      throw error;
    }
  }

  #path(key: string, kind: CaptureFileKind): string {
    return path.join(this.#dir, captureFileName(key, kind));
  }

  /**
   * Registers this instance as a writer of the directory before its first change (see
   * `WriterRegistry`), dropping every cached row when that removed a dead writer's entry, since
   * that writer may have changed them. Nothing to do while the directory does not exist. A
   * registration that fails fails the change: changing the directory unregistered could hide
   * the change from another ledger that believes it is alone. Only a registry that cannot exist
   * (`writers` is not a directory), which no ledger then trusts, lets changes go ahead, with a
   * warning.
   */
  async #beforeChange(): Promise<void> {
    if (this.#writers.registered || this.#unregistrable) return;
    try {
      await this.#writers.register(() => this.#cache.clear());
    } catch (error) {
      if (!(error instanceof RegistryUnavailableError)) throw error;
      this.#unregistrable = true;
      this.#logger?.warn(
        { err: error, dir: this.#dir },
        "cannot register in the capture ledger's writer registry; every export stats each ledger",
      );
    }
  }

  /**
   * Creates the directory once per instance, before the first write: one level at a time and
   * never on a pseudo file system, where a recursive `mkdir` can retry for ever.
   */
  async #ensureDir(): Promise<void> {
    this.#dirReady ??= makeDirectories(this.#dir);
    try {
      await this.#dirReady;
    } catch (error) {
      this.#dirReady = null;
      throw error;
    }
  }
}

/** Splits a batch by per-key flags into removed and absent keys, keeping batch order. */
function partition(batch: readonly string[], removed: readonly boolean[]): LedgerRemoval {
  return {
    removed: batch.filter((_, i) => removed[i] === true),
    absent: batch.filter((_, i) => removed[i] !== true),
  };
}
