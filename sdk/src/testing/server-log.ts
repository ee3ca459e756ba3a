import { pino, type Logger } from "pino";

/**
 * A server's warnings and errors, kept in memory: a 500 reply only says "see the server log",
 * so a failed call quotes what the server logged while it ran.
 */
export class ServerLog {
  readonly #lines: string[] = [];
  /** The logger to give the server (level `warn`). */
  readonly logger: Logger = pino({ level: "warn" }, { write: (line: string) => this.#push(line) });

  /** A mark to pass to {@link since}. */
  mark(): number {
    return this.#lines.length;
  }

  /** The messages logged since `mark` (an error's own message when one was logged). */
  since(mark: number): string[] {
    return this.#lines.slice(mark);
  }

  #push(line: string): void {
    try {
      const entry = JSON.parse(line) as { msg?: string; err?: { message?: string } };
      const message = entry.err?.message;
      this.#lines.push(message === undefined ? String(entry.msg) : `${entry.msg}: ${message}`);
    } catch {
      this.#lines.push(line.trim());
    }
  }
}
