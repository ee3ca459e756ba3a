/**
 * An append-only JSON Lines file shared by the collector's dispatch log and its output: every
 * line is one JSON value. Appends are group-committed: the lines queued while one write runs go
 * out in the next single write, followed by one `fdatasync`, so a thousand rows in flight cost a
 * handful of syncs, not a thousand.
 */
import { createReadStream } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import { deferred, type Deferred } from "../util/deferred.js";

/** A journal line that is not JSON (not a torn last line: those are dropped). */
export class JournalCorruptError extends Error {
  override readonly name = "JournalCorruptError";
  constructor(
    readonly file: string,
    readonly line: number,
    detail: string,
  ) {
    super(
      `${file}:${line} is not a JSON line (${detail}); the file was not written by gym collect`,
    );
  }
}

interface Pending {
  readonly text: string;
  readonly done: Deferred<void>;
}

/** What {@link JsonlJournal.open} read back. */
export interface JournalContents {
  /** Bytes cut off the end: a last write the process died in (0 when none was torn). */
  readonly tornBytes: number;
}

/** An append-only JSON Lines file, read back once when opened. */
export class JsonlJournal {
  #pending: Pending[] = [];
  #flushing: Promise<void> | null = null;
  #closed = false;

  private constructor(
    readonly file: string,
    readonly handle: FileHandle,
    readonly sync: boolean,
  ) {}

  /**
   * Opens `file` for appending (created when missing), first handing every complete line to
   * `onLine` in order. Bytes after the last newline are a torn last write (the process died in
   * it): they are cut off, so the next append starts on a line of its own.
   */
  static async open(
    file: string,
    onLine: (value: unknown, lineNumber: number) => void,
    options: { readonly sync?: boolean } = {},
  ): Promise<JsonlJournal & JournalContents> {
    const handle = await open(file, "a+", 0o644);
    try {
      const { goodBytes, totalBytes } = await readLines(file, onLine);
      if (goodBytes < totalBytes) {
        await handle.truncate(goodBytes);
        await handle.sync();
      }
      const journal = new JsonlJournal(file, handle, options.sync ?? true);
      return Object.assign(journal, { tornBytes: totalBytes - goodBytes });
    } catch (error) {
      await handle.close();
      throw error;
    }
  }

  /** Appends `value` as one line; resolves once it is written (and synced, with `sync`). */
  append(value: unknown): Promise<void> {
    return this.appendText(`${JSON.stringify(value)}\n`);
  }

  /** Appends several values; resolves once all are written. */
  appendAll(values: readonly unknown[]): Promise<void> {
    if (values.length === 0) return Promise.resolve();
    return this.appendText(values.map((value) => `${JSON.stringify(value)}\n`).join(""));
  }

  private appendText(text: string): Promise<void> {
    if (this.#closed) return Promise.reject(new Error(`${this.file} is closed`));
    const done = deferred();
    this.#pending.push({ text, done });
    this.#flushing ??= this.#flush();
    return done.promise;
  }

  async #flush(): Promise<void> {
    // Yield once so appends made in the same turn join this write.
    await Promise.resolve();
    while (this.#pending.length > 0) {
      const batch = this.#pending;
      this.#pending = [];
      try {
        await this.handle.appendFile(batch.map((entry) => entry.text).join(""));
        if (this.sync) await this.handle.datasync();
        for (const entry of batch) entry.done.resolve();
      } catch (error) {
        for (const entry of batch) entry.done.reject(error);
      }
    }
    this.#flushing = null;
  }

  /** Waits for every append made so far. */
  async drain(): Promise<void> {
    while (this.#flushing !== null) await this.#flushing;
  }

  /** Drains, then closes the file. */
  async close(): Promise<void> {
    if (this.#closed) return;
    await this.drain();
    this.#closed = true;
    await this.handle.close();
  }
}

/** Streams `file`'s complete lines to `onLine`; returns how many bytes they and the rest span. */
async function readLines(
  file: string,
  onLine: (value: unknown, lineNumber: number) => void,
): Promise<{ goodBytes: number; totalBytes: number }> {
  let carry: Buffer = Buffer.alloc(0);
  let goodBytes = 0;
  let totalBytes = 0;
  let lineNumber = 0;
  for await (const chunk of createReadStream(file) as AsyncIterable<Buffer>) {
    totalBytes += chunk.length;
    let data = carry.length === 0 ? chunk : Buffer.concat([carry, chunk]);
    let start = 0;
    for (let end = data.indexOf(10, start); end !== -1; end = data.indexOf(10, start)) {
      lineNumber++;
      const text = data.toString("utf8", start, end);
      goodBytes += end - start + 1;
      start = end + 1;
      if (text.trim() === "") continue;
      let value: unknown;
      try {
        value = JSON.parse(text);
      } catch (error) {
        throw new JournalCorruptError(file, lineNumber, (error as Error).message);
      }
      onLine(value, lineNumber);
    }
    data = data.subarray(start);
    carry = Buffer.from(data);
  }
  return { goodBytes, totalBytes };
}
