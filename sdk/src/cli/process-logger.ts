/**
 * The logger of a server process: JSON lines on stdout through an asynchronous destination.
 * A synchronous destination costs a system call per line, which at a request-log level is one
 * per request; the asynchronous one writes the lines logged while a write is in flight together,
 * in the next one, and writes each line promptly when traffic is light. Pino writes what is
 * still buffered synchronously as the process exits (normally, after a fatal error, on a second
 * stop signal); a SIGKILL loses at most the lines logged since the last write began.
 */
import { pino, type Logger } from "pino";

/** A server process's logger at `level` (default `LOG_LEVEL`, else info). */
export function processLogger(level: string = process.env.LOG_LEVEL ?? "info"): Logger {
  return pino({ level }, pino.destination({ dest: 1, sync: false }));
}
