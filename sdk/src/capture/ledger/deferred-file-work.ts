/**
 * File work a restore leaves for later, one synchronous operation per capture key, that the
 * ledger runs before any other operation on that key and in the background after admission
 * reopens (see `CaptureLedger.importRecords`).
 *
 * Why: a restore of thousands of episodes would otherwise create a ledger file and delete the
 * source attempt's ledger for each of them inside the restore, on the checkpoint's critical path.
 * The checkpoint is the durable copy of those rows (an import never fsyncs ledger files, and a
 * crash before they are written is followed by another restore), so the files can follow the
 * restore as long as nothing can observe the difference: every ledger operation on a key settles
 * its work first, under the key's lock.
 */
export class DeferredFileWork {
  readonly #work = new Map<string, () => void>();
  /** Keys whose file a settle created, and whose directory entry no fsync has covered yet. */
  readonly #unsynced = new Set<string>();

  /** How many keys have work waiting. */
  get size(): number {
    return this.#work.size;
  }

  /** The keys with work waiting, in the order it was deferred. */
  keys(): string[] {
    return [...this.#work.keys()];
  }

  /**
   * Leaves `op` to run before the next operation on `key`; `creates`: it creates a file, whose
   * directory entry then needs an fsync before a write to it is acknowledged. Work already
   * waiting for `key` runs first.
   */
  defer(key: string, op: () => void, creates: boolean): void {
    const earlier = this.#work.get(key);
    this.#work.set(
      key,
      earlier === undefined
        ? () => this.#run(key, op, creates)
        : () => {
            earlier();
            this.#run(key, op, creates);
          },
    );
  }

  /**
   * Runs the work waiting for `key`, if any. A failure is thrown and the work stays waiting, so
   * the next operation on the key tries again.
   */
  settle(key: string): void {
    const op = this.#work.get(key);
    if (op === undefined) return;
    op();
    this.#work.delete(key);
  }

  /** Whether `key`'s file was created by a settle that no directory fsync has covered; clears it. */
  takeUnsynced(key: string): boolean {
    return this.#unsynced.delete(key);
  }

  /** A directory fsync covered the files settles created for `keys`. */
  synced(keys: Iterable<string>): void {
    for (const key of keys) this.#unsynced.delete(key);
  }

  #run(key: string, op: () => void, creates: boolean): void {
    op();
    if (creates) this.#unsynced.add(key);
  }
}
