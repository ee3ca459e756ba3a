/**
 * The logger of a server process: JSON lines on stdout, buffered. An unbuffered destination
 * costs a write per line (a system call, or a hand-off to libuv's pool and back), which at a
 * request-log level is one per request: on the 2-core machine that was ~35 µs of the main
 * thread per request, a sixth of a cheap route (`npm run bench:telemetry -- --parts logs`). Lines
 * are written once 8 KiB are buffered, or within {@link FLUSH_EVERY_MS} when traffic is light, and
 * at once after a warning or an error. Pino writes what is still buffered synchronously as the
 * process exits (normally, after a fatal error, on a second stop signal); a SIGKILL loses at most
 * the info and debug lines of the last {@link FLUSH_EVERY_MS}.
 */
import { pino, type Logger } from "pino";

/** The longest a buffered line waits to be written. */
const FLUSH_EVERY_MS = 100;
/** Buffered bytes that trigger a write. */
const WRITE_AT_BYTES = 8 * 1024;
/** Pino's numeric level of `warn`: lines at or above it are written at once. */
const WARN = 40;

/** A server process's logger at `level` (default `LOG_LEVEL`, else info). */
export function processLogger(level: string = process.env.LOG_LEVEL ?? "info"): Logger {
  const destination = pino.destination({
    dest: 1,
    sync: false,
    minLength: WRITE_AT_BYTES,
    periodicFlush: FLUSH_EVERY_MS,
  });
  return pino(
    {
      level,
      hooks: {
        logMethod(args, method, lineLevel) {
          method.apply(this, args);
          if (lineLevel >= WARN) destination.flush();
        },
      },
    },
    destination,
  );
}
