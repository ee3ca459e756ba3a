/**
 * Restore fence lists: the fences of a restore's source attempts, written as one durable file
 * (`<ledger dir>/restore-fences/<name>.keys`, one capture key per line) instead of a fence file
 * per key, which the ledger creates afterwards (see `CaptureLedger.importRecords`).
 *
 * Why: a restore of thousands of episodes fences every source attempt, and a fence must be
 * durable before the restore returns. Thousands of hard links cost ~100 ms of CPU inside the
 * restore; one list costs a write and two fsyncs. A list is removed once the per-key fences it
 * stands for exist and a directory fsync covers them; a process that finds a list at its first
 * use of the directory (its writer crashed first) creates those fences before anything else.
 *
 * @module
 */
import { randomBytes } from "node:crypto";
import { mkdir, readdir, rmdir, unlink } from "node:fs/promises";
import path from "node:path";
import { fsyncDir } from "../../store/fs-sync.js";
import { writeFileDurably } from "../../store/durable-file.js";
import { readRegularFile, isCode } from "../../store/safe-fs.js";
import { CorruptLedgerError, InvalidLedgerKeyError } from "./errors.js";
import { ledgerEpisode } from "./files.js";

/** The subdirectory of a ledger directory that holds fence lists. */
export const FENCE_LIST_DIR = "restore-fences";

const LIST_SUFFIX = ".keys";

/** One fence list on disk: its file name and the capture keys it fences. */
export interface FenceList {
  readonly name: string;
  readonly keys: readonly string[];
}

/**
 * Writes `keys` (valid capture keys) as a new fence list, durably: once this resolves, the list
 * survives a crash, whole. Creates the list directory if needed (the caller fsyncs `ledgerDir`
 * afterwards, which makes a new list directory's entry durable). Returns the list's name.
 */
export async function writeFenceList(ledgerDir: string, keys: readonly string[]): Promise<string> {
  const dir = path.join(ledgerDir, FENCE_LIST_DIR);
  const name = `${Date.now()}-${process.pid}-${randomBytes(4).toString("hex")}${LIST_SUFFIX}`;
  const text = keys.length === 0 ? "" : `${keys.join("\n")}\n`;
  for (let attempt = 1; ; attempt++) {
    try {
      await mkdir(dir);
    } catch (error) {
      if (!isCode(error, "EEXIST")) throw error;
    }
    try {
      await writeFileDurably(path.join(dir, name), text);
      return name;
    } catch (error) {
      // The directory was removed meanwhile (a settle that found it empty): make it again.
      if (!isCode(error, "ENOENT") || attempt >= 3) throw error;
    }
  }
}

/**
 * Every fence list in `ledgerDir`, oldest name first (none when there is no list directory).
 * Temporary files a crashed write left are ignored.
 *
 * @throws {@link CorruptLedgerError} when a list names an invalid key (the file was changed by
 * something other than the ledger; remove it).
 */
export async function readFenceLists(ledgerDir: string): Promise<FenceList[]> {
  const dir = path.join(ledgerDir, FENCE_LIST_DIR);
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (error) {
    if (isCode(error, "ENOENT")) return [];
    throw error;
  }
  const lists: FenceList[] = [];
  for (const name of names.filter((n) => n.endsWith(LIST_SUFFIX) && !n.startsWith(".")).sort()) {
    const text = await readRegularFile(path.join(dir, name));
    const keys = text.split("\n").filter((line) => line !== "");
    for (const key of keys) {
      try {
        ledgerEpisode(key);
      } catch (error) {
        if (!(error instanceof InvalidLedgerKeyError)) throw error;
        // The directory's state is bad, not the caller's request: never a key refusal (400).
        throw new CorruptLedgerError(
          key,
          `fence list ${path.join(dir, name)} names an invalid key (${error.reason}); remove the list`,
          { cause: error },
        );
      }
    }
    lists.push({ name, keys });
  }
  return lists;
}

/**
 * Removes the fence lists `names` (missing ones are fine) and fsyncs their directory, so no
 * list comes back after a crash to fence a key deleted since; then removes the directory when
 * it is empty (should that not survive a crash, an empty directory is harmless).
 */
export async function removeFenceLists(ledgerDir: string, names: readonly string[]): Promise<void> {
  if (names.length === 0) return;
  const dir = path.join(ledgerDir, FENCE_LIST_DIR);
  for (const name of names) {
    await unlink(path.join(dir, name)).catch((error: unknown) => {
      if (!isCode(error, "ENOENT")) throw error;
    });
  }
  try {
    await fsyncDir(dir);
  } catch (error) {
    // Removed by another settle that removed these lists too: nothing left to make durable.
    if (isCode(error, "ENOENT")) return;
    throw error;
  }
  await rmdir(dir).catch((error: unknown) => {
    // Another list (another process's import) is still there, or another process removed it.
    if (!isCode(error, "ENOTEMPTY") && !isCode(error, "EEXIST") && !isCode(error, "ENOENT")) {
      throw error;
    }
  });
}
