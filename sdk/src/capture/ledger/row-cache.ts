import { closeSync, constants, fstatSync, openSync, readSync, statSync } from "node:fs";
import { CorruptLedgerError } from "./errors.js";
import { decodeRowBytes, type LedgerRow } from "./row-codec.js";

/**
 * Opens without blocking: a FIFO put where a ledger belongs would otherwise wait for a writer
 * inside a synchronous read, stopping the whole event loop.
 */
const READ_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY;

/** What a read found: whether the ledger file exists, and its rows in file order. */
export interface LedgerRead {
  readonly exists: boolean;
  readonly rows: readonly LedgerRow[];
}

interface Entry {
  readonly ino: number;
  /** Bytes of the file already parsed into `rows` (complete lines only). */
  readonly size: number;
  readonly rows: readonly LedgerRow[];
}

function isMissing(error: unknown): boolean {
  return (error as NodeJS.ErrnoException).code === "ENOENT";
}

/**
 * Parsed rows of each ledger file read, keyed by capture key.
 *
 * Other processes may append to a shared ledger, so every read stats the file: a file that
 * grew is read from the cached offset on (only its new lines), a replaced or shrunk one again
 * from the start, a missing one drops its entry.
 */
export class RowCache {
  readonly #entries = new Map<string, Entry>();

  /** How many keys have cached rows. */
  get size(): number {
    return this.#entries.size;
  }

  /** Forgets the rows of `key`. */
  drop(key: string): void {
    this.#entries.delete(key);
  }

  /** Forgets every cached row. */
  clear(): void {
    this.#entries.clear();
  }

  /**
   * The cached rows of `key` as they are, without looking at the file, when the caller knows
   * nothing else changed it (see `WriterRegistry`); {@link read} when none are cached.
   */
  readUnchanged(key: string, file: string): LedgerRead {
    const cached = this.#entries.get(key);
    return cached === undefined ? this.read(key, file) : { exists: true, rows: cached.rows };
  }

  /**
   * The rows of ledger file `file` of capture key `key`. Synchronous: a stat, and a read of only
   * the bytes not parsed yet, cost less than two hops through the thread pool, and a commit's
   * export reads thousands of ledgers in a row (see `inSlices`).
   */
  read(key: string, file: string): LedgerRead {
    const found = statSync(file, { throwIfNoEntry: false });
    if (found === undefined) return this.#vanished(key);
    if (!found.isFile()) throw notRegularFile(key, file);
    const { size, ino } = found;
    const from = this.#unreadFrom(key, ino, size);
    if (from === size) return { exists: true, rows: this.#rowsOf(key) };
    return this.#parsed(key, ino, from, readRange(key, file, from, size));
  }

  #vanished(key: string): LedgerRead {
    this.#entries.delete(key);
    return { exists: false, rows: [] };
  }

  /** Where reading must start: the cached size if the entry is this file's prefix, else 0. */
  #unreadFrom(key: string, ino: number, size: number): number {
    const cached = this.#entries.get(key);
    return cached !== undefined && cached.ino === ino && cached.size <= size ? cached.size : 0;
  }

  #rowsOf(key: string): readonly LedgerRow[] {
    return this.#entries.get(key)?.rows ?? [];
  }

  /** Caches the rows of bytes read from offset `from` on (null: the file vanished). */
  #parsed(key: string, ino: number, from: number, bytes: Buffer | null): LedgerRead {
    if (bytes === null) return this.#vanished(key);
    const { rows, used } = decodeRowBytes(key, bytes);
    const before = from > 0 ? this.#rowsOf(key) : [];
    const entry = { ino, size: from + used, rows: from > 0 ? [...before, ...rows] : rows };
    this.#entries.set(key, entry);
    return { exists: true, rows: entry.rows };
  }

  /**
   * Records the rows of a ledger file this process just created as `size` bytes with inode
   * `ino`: the next read parses only what others appended since, if anything.
   */
  wrote(key: string, ino: number, size: number, rows: readonly LedgerRow[]): void {
    this.#entries.set(key, { ino, size, rows });
  }

  /**
   * Records a row this process appended as one line of `lineBytes` bytes, leaving the file
   * `sizeAfter` bytes long. When the file is not exactly the cached bytes plus that line (another
   * process appended too), the entry is dropped and the next read parses the file again.
   */
  appended(key: string, ino: number, sizeAfter: number, lineBytes: number, row: LedgerRow): void {
    const cached = this.#entries.get(key) ?? { ino, size: 0, rows: [] };
    if (cached.ino === ino && cached.size + lineBytes === sizeAfter) {
      this.#entries.set(key, { ino, size: sizeAfter, rows: [...cached.rows, row] });
    } else {
      this.#entries.delete(key);
    }
  }
}

/** The refusal of a ledger path that holds something other than a regular file. */
function notRegularFile(key: string, file: string): CorruptLedgerError {
  return new CorruptLedgerError(key, `${file} is not a regular file; remove it`);
}

/**
 * Bytes `[from, to)` of `file`, fewer when it shrank meanwhile; null when it vanished. The open
 * file is checked again: it may have been replaced since the caller's `stat`.
 */
function readRange(key: string, file: string, from: number, to: number): Buffer | null {
  let fd: number;
  try {
    fd = openSync(file, READ_FLAGS);
  } catch (error) {
    if (isMissing(error)) return null;
    throw error;
  }
  try {
    if (!fstatSync(fd).isFile()) throw notRegularFile(key, file);
    const buffer = Buffer.alloc(to - from);
    let filled = 0;
    while (filled < buffer.length) {
      const bytesRead = readSync(fd, buffer, filled, buffer.length - filled, from + filled);
      if (bytesRead === 0) break;
      filled += bytesRead;
    }
    return buffer.subarray(0, filled);
  } finally {
    closeSync(fd);
  }
}
