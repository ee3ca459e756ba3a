import {
  closeSync,
  ftruncateSync,
  linkSync,
  openSync,
  renameSync,
  statSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { setImmediate as nextTurn } from "node:timers/promises";

/** Synchronous file operations run between two turns of the event loop. */
const OPS_PER_SLICE = 128;

/**
 * Runs a synchronous file operation on every item, in order, handing the event loop a turn
 * after every {@link OPS_PER_SLICE} items; returns the results in item order. The first
 * failure is thrown at once and the later items are left alone.
 *
 * Why synchronous: a batch's operations all change one directory, which the kernel serializes
 * anyway. Through the thread pool each costs a hop and a promise, and the pool's threads
 * contend on the directory's lock: on the 2-core VM, 6,000 fences, unlinks and ledger writes
 * took ~5x the CPU time that way. The slices keep the server answering meanwhile.
 */
export async function inSlices<T, R>(items: readonly T[], op: (item: T) => R): Promise<R[]> {
  const results = new Array<R>(items.length);
  for (let i = 0; i < items.length; i++) {
    if (i > 0 && i % OPS_PER_SLICE === 0) await nextTurn();
    results[i] = op(items[i] as T);
  }
  return results;
}

function isCode(error: unknown, code: string): boolean {
  return (error as NodeJS.ErrnoException).code === code;
}

/** Creates an empty file unless it exists; whether this call created it. */
export function createEmptySync(file: string): boolean {
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

/** Renames `from` to `to` (replacing it); false when `from` does not exist. */
export function renameIfPresentSync(from: string, to: string): boolean {
  try {
    renameSync(from, to);
    return true;
  } catch (error) {
    if (isCode(error, "ENOENT")) return false;
    throw error;
  }
}

/** Whether a file exists (other errors are thrown). */
export function existsSync(file: string): boolean {
  return statSync(file, { throwIfNoEntry: false }) !== undefined;
}

/**
 * Writes `text` over an existing file from its start and cuts the file to its length (not
 * fsynced). Why not `O_TRUNC`: ext4 flushes a file truncated to zero when it is closed (its
 * `auto_da_alloc` guard against lost rewrites), which made closing cost more than the rest.
 */
export function overwriteFileSync(file: string, text: string): void {
  const fd = openSync(file, "r+");
  try {
    const bytes = Buffer.from(text, "utf8");
    for (let written = 0; written < bytes.length;) {
      written += writeSync(fd, bytes, written, bytes.length - written, written);
    }
    ftruncateSync(fd, bytes.length);
  } finally {
    closeSync(fd);
  }
}

/** Writes `text` as the whole content of `file`, creating or truncating it (not fsynced). */
export function replaceFileSync(file: string, text: string): void {
  writeFileSync(file, text, { flag: "w" });
}
