import {
  closeSync,
  fstatSync,
  linkSync,
  openSync,
  statSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { setImmediate as nextTurn } from "node:timers/promises";
import { isCode } from "../../store/safe-fs.js";

/** When a slice of synchronous file operations hands the event loop a turn. */
export interface SliceBudget {
  /** Operations per slice. */
  readonly ops: number;
  /** Milliseconds per slice (an operation may read or write a whole ledger). */
  readonly ms: number;
  /** The clock, in milliseconds. */
  readonly now: () => number;
}

/** 128 operations or 10 ms, whichever comes first. */
const SLICE: SliceBudget = { ops: 128, ms: 10, now: () => performance.now() };

/**
 * Runs a synchronous file operation on every item, in order, handing the event loop a turn
 * whenever a slice has run 128 operations or 10 ms; returns the results in item order. The
 * first failure is thrown at once and the later items are left alone.
 *
 * Why synchronous: a batch's operations all change one directory, which the kernel serializes
 * anyway. Through the thread pool each costs a hop and a promise, and the pool's threads
 * contend on the directory's lock: on the 2-core VM, 6,000 fences, unlinks and ledger writes
 * took ~5x the CPU time that way. The slices keep the server answering meanwhile.
 */
export async function inSlices<T, R>(
  items: readonly T[],
  op: (item: T) => R,
  budget: SliceBudget = SLICE,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let sliceStart = budget.now();
  let sliceOps = 0;
  for (let i = 0; i < items.length; i++) {
    if (sliceOps >= budget.ops || budget.now() - sliceStart >= budget.ms) {
      await nextTurn();
      sliceStart = budget.now();
      sliceOps = 0;
    }
    results[i] = op(items[i] as T);
    sliceOps += 1;
  }
  return results;
}

/** Creates an empty file unless it exists; whether this call created it. */
function createEmptySync(file: string): boolean {
  try {
    closeSync(openSync(file, "wx"));
    return true;
  } catch (error) {
    if (isCode(error, "EEXIST")) return false;
    throw error;
  }
}

/**
 * Creates the empty files of one batch (fences), each but the first as a hard link to the first.
 *
 * Why: a fence is only ever tested for existence, so fences that share one empty inode cannot
 * be told apart from separate ones, and a link skips allocating an inode: on the VM's ext4,
 * 6,000 links took 50-80 ms where 6,000 new files took 0.5-2.2 s.
 *
 * Whenever a link cannot be made (the first file, a file system without hard links, an inode at
 * its link limit, a link source deleted meanwhile), the file is created on its own and becomes
 * the source of the next links.
 */
export class EmptyFileBatch {
  #source: string | null = null;

  /** Creates `file`, empty, unless it exists; whether this call created it. */
  create(file: string): boolean {
    if (this.#source !== null) {
      try {
        linkSync(this.#source, file);
        return true;
      } catch (error) {
        if (isCode(error, "EEXIST")) return false;
        this.#source = null;
      }
    }
    const created = createEmptySync(file);
    if (created) this.#source = file;
    return created;
  }
}

/** Removes a file; whether it existed. */
export function unlinkIfPresentSync(file: string): boolean {
  try {
    unlinkSync(file);
    return true;
  } catch (error) {
    if (isCode(error, "ENOENT")) return false;
    throw error;
  }
}

/** Whether a file exists (other errors are thrown). */
export function fileExistsSync(file: string): boolean {
  return statSync(file, { throwIfNoEntry: false }) !== undefined;
}

/**
 * Creates `file` with `text` as its content unless it exists (not fsynced); whether this call
 * created it. An existing file is left as it is. A write that fails part-way removes the file it
 * created, so a retry does not find a torn file and take it for done.
 */
export function createFileSync(file: string, text: string): boolean {
  return createFileInodeSync(file, text) !== null;
}

/**
 * {@link createFileSync} that returns the inode of the file it created (null: it existed), so
 * the caller can remember what it wrote without a `stat` of its own.
 */
export function createFileInodeSync(file: string, text: string): number | null {
  let fd: number;
  try {
    fd = openSync(file, "wx");
  } catch (error) {
    if (isCode(error, "EEXIST")) return null;
    throw error;
  }
  let ino: number;
  try {
    writeFileSync(fd, text);
    ({ ino } = fstatSync(fd));
  } catch (error) {
    closeSync(fd);
    unlinkIfPresentSync(file);
    throw error;
  }
  closeSync(fd);
  return ino;
}
