/**
 * When the file work a restore deferred runs, and what its durability costs: on a key's next
 * operation (its lock held), or in batches of keys in the background, each batch followed by
 * one directory fsync; and the fence lists an import wrote, removed once every fence they stand
 * for is a durable file. The {@link CaptureLedger} owns one and hands it the work to defer.
 */
import type { Logger } from "pino";
import { fsyncDir } from "../../store/fs-sync.js";
import type { KeyedMutex } from "../../util/keyed-mutex.js";
import { DeferredFileWork, type FileWork } from "./deferred-file-work.js";
import { inSlices } from "./file-batch.js";
import { removeFenceLists } from "./fence-lists.js";

/** Keys per batch of {@link DeferredSettling.settleAll}: one directory fsync each. */
const SETTLE_BATCH_KEYS = 1024;

/** The deferred file work of one ledger directory, and the fence lists still needed. */
export class DeferredSettling {
  readonly #dir: string;
  readonly #locks: KeyedMutex;
  readonly #logger: Pick<Logger, "warn"> | null;
  readonly #work = new DeferredFileWork();
  #settling: Promise<void> | null = null;
  /** The fence lists this instance's imports wrote and still needs, with the keys each fences. */
  readonly #fenceLists = new Map<string, readonly string[]>();
  /** Whether deferred work ran on use (fence files among it) since the last directory fsync began. */
  #settledSinceSync = false;

  /** Settling for the ledger in `dir`, taking the ledger's per-key `locks` for each batch. */
  constructor(dir: string, locks: KeyedMutex, logger: Pick<Logger, "warn"> | null) {
    this.#dir = dir;
    this.#locks = locks;
    this.#logger = logger;
  }

  /** How many keys have work waiting. */
  get size(): number {
    return this.#work.size;
  }

  /** The keys with work waiting, in the order it was deferred. */
  keys(): string[] {
    return this.#work.keys();
  }

  /** Leaves `work` for `key` (see {@link DeferredFileWork.defer}). */
  defer(key: string, work: FileWork): void {
    this.#work.defer(key, work);
  }

  /** Whether `key`'s file was created by settled work that no directory fsync has covered; clears it. */
  takeUnsynced(key: string): boolean {
    return this.#work.takeUnsynced(key);
  }

  /** Records fence list `name`, which fences `keys`, as needed until their fence files are durable. */
  addFenceList(name: string, keys: readonly string[]): void {
    this.#fenceLists.set(name, keys);
  }

  /** Whether a fence list this instance still needs names one of `keys`. */
  listed(keys: readonly string[]): boolean {
    if (this.#fenceLists.size === 0) return false;
    const wanted = new Set(keys);
    for (const listed of this.#fenceLists.values()) {
      if (listed.some((key) => wanted.has(key))) return true;
    }
    return false;
  }

  /**
   * Runs the deferred work of `keys` (their locks held): every first part, one directory fsync
   * when some work has a second part, then the second parts. A failure is thrown and leaves the
   * work that did not finish waiting.
   */
  async settle(keys: readonly string[]): Promise<void> {
    if (this.#work.size === 0) return;
    if (keys.some((key) => this.#work.get(key) !== undefined)) this.#settledSinceSync = true;
    const { failure } = await this.#settleEach(keys);
    if (failure !== null) throw failure;
  }

  /**
   * Starts {@link settleAll} unless nothing waits or it is running already; resolves when it
   * ends. A failure is logged (warn), not thrown, and the work that failed waits for its key's
   * next operation.
   */
  inBackground(): Promise<void> {
    if (this.#settling !== null) return this.#settling;
    if (this.#work.size === 0) return Promise.resolve();
    this.#settling = this.settleAll()
      .catch((error: unknown) => {
        this.#logger?.warn(
          { err: error, dir: this.#dir },
          "could not write the ledgers a restore deferred; each is written on its key's next use",
        );
      })
      .finally(() => {
        this.#settling = null;
      });
    return this.#settling;
  }

  /**
   * Runs every piece of deferred work, a batch of keys at a time under their locks, fsyncing the
   * directory after each batch, then removes the fence lists that are no longer needed. A key
   * whose work fails is left waiting and the others still settle; then the call rejects with
   * the first failure.
   */
  async settleAll(): Promise<void> {
    // A key whose work fails is tried once per call, and the keys after it still settle (one
    // bad file must not leave thousands of ledgers unwritten); work deferred meanwhile joins in.
    const failed = new Set<string>();
    let firstFailure: unknown = null;
    for (;;) {
      const keys = this.#work
        .keys()
        .filter((key) => !failed.has(key))
        .slice(0, SETTLE_BATCH_KEYS);
      if (keys.length === 0) break;
      await this.#locks.run(keys, async () => {
        const outcome = await this.#settleEach(keys);
        // The writes and deletions are durable: appends to these ledgers need no fsync of it.
        this.#settledSinceSync = false;
        await fsyncDir(this.#dir);
        this.#work.synced(keys);
        for (const key of outcome.failed) failed.add(key);
        firstFailure ??= outcome.failure;
      });
    }
    if (firstFailure !== null) throw firstFailure;
    await this.#dropSettledFenceLists();
  }

  /**
   * Removes the fence lists whose every key has its fence file, once a directory fsync made
   * those fences durable (keys settled one by one, on use, were not fsynced yet).
   */
  async #dropSettledFenceLists(): Promise<void> {
    const settled = [...this.#fenceLists].filter(([, keys]) =>
      keys.every((key) => this.#work.get(key) === undefined),
    );
    if (settled.length === 0) return;
    // Claimed before any await: a settle running beside this one (the background one and an
    // import's) leaves them to this one.
    for (const [name] of settled) this.#fenceLists.delete(name);
    try {
      if (this.#settledSinceSync) {
        this.#settledSinceSync = false;
        await fsyncDir(this.#dir);
      }
      await removeFenceLists(
        this.#dir,
        settled.map(([name]) => name),
      );
    } catch (error) {
      for (const [name, keys] of settled) this.#fenceLists.set(name, keys);
      throw error;
    }
  }

  /**
   * Runs the deferred work of each of `keys` (their locks held), each on its own: a key whose
   * work throws stays waiting and the others are done. Returns the keys that failed and the
   * first failure (null when none did).
   */
  async #settleEach(keys: readonly string[]): Promise<{ failed: string[]; failure: unknown }> {
    const failed: string[] = [];
    let failure: unknown = null;
    if (this.#work.size === 0) return { failed, failure };
    const settling: string[] = [];
    for (const key of keys) if (this.#work.get(key) !== undefined) settling.push(key);
    await inSlices(settling, (key) => {
      try {
        (this.#work.get(key) as FileWork).run();
        this.#work.done(key);
      } catch (error) {
        failed.push(key);
        failure ??= error;
      }
    });
    return { failed, failure };
  }
}
