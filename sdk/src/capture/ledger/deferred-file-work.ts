/**
 * File work a restore leaves for later, per capture key, that the ledger runs before any other
 * operation on that key and in the background after admission reopens (see
 * `CaptureLedger.importRecords`).
 *
 * Why: a restore of thousands of episodes would otherwise write and delete a file for each of
 * them inside the restore, on the checkpoint's critical path. The checkpoint is the durable copy
 * of those rows (an import never fsyncs ledger files, and a crash before they are written is
 * followed by another restore), so the files can follow the restore as long as nothing can
 * observe the difference: every ledger operation on a key settles its work first, under the
 * key's lock.
 */

/** One key's deferred file work. */
export interface FileWork {
  /** The file operations (a ledger write, the deletion of a fenced ledger); may run twice. */
  readonly run: () => void;
  /** Whether the work creates a file whose directory entry needs an fsync before a write to it is acknowledged. */
  readonly creates: boolean;
}

/** The deferred work of every key, and which keys' new files still need a directory fsync. */
export class DeferredFileWork {
  readonly #work = new Map<string, FileWork>();
  /** Keys whose file settled work created, and whose directory entry no fsync has covered yet. */
  readonly #unsynced = new Set<string>();

  /** How many keys have work waiting. */
  get size(): number {
    return this.#work.size;
  }

  /** The keys with work waiting, in the order it was deferred. */
  keys(): string[] {
    return [...this.#work.keys()];
  }

  /** The work waiting for `key`, if any. */
  get(key: string): FileWork | undefined {
    return this.#work.get(key);
  }

  /** Leaves `work` for `key`; work already waiting for the key runs first. */
  defer(key: string, work: FileWork): void {
    const earlier = this.#work.get(key);
    this.#work.set(
      key,
      earlier === undefined
        ? work
        : {
            run: () => {
              earlier.run();
              work.run();
            },
            creates: earlier.creates || work.creates,
          },
    );
  }

  /**
   * `key`'s work has run; it is dropped, and a file it created awaits a directory fsync. Work
   * that failed is not marked done: it stays waiting, and the next operation tries again.
   */
  done(key: string): void {
    const work = this.#work.get(key);
    if (work === undefined) return;
    this.#work.delete(key);
    if (work.creates) this.#unsynced.add(key);
  }

  /** Whether `key`'s file was created by settled work that no directory fsync has covered; clears it. */
  takeUnsynced(key: string): boolean {
    return this.#unsynced.delete(key);
  }

  /** A directory fsync covered the files settled work created for `keys`. */
  synced(keys: Iterable<string>): void {
    for (const key of keys) this.#unsynced.delete(key);
  }
}
