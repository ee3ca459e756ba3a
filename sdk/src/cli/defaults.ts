/**
 * The CLI's defaults and small argument helpers, kept apart from the commands so `gym --help`
 * loads nothing heavy.
 */
import { sdkPackage } from "../util/sdk-package.js";
import { UsageError } from "./output.js";

/** How long each coordination step of `gym ckpt` may take by default (`--deadline`), in ms. */
export const DEFAULT_DEADLINE_MS = 30_000;
/** How long `gym serve` waits for every server's `GET /health` by default, in ms. */
export const DEFAULT_HEALTH_TIMEOUT_MS = 30_000;
/** How long SIGTERM'd servers get before SIGKILL by default, in ms (servers drain for 10 s). */
export const DEFAULT_GRACE_MS = 15_000;
/** Log lines shown for a server that failed to start. */
export const FAILED_LOG_LINES = 20;
/**
 * The `--state` help of every command that acts on a running deployment: where the run is
 * looked for without it (see `stateFilesNear` in `state-io.ts`).
 */
export const STATE_OPTION_HELP =
  "the run's state file (default: .gym/run.json here, else in the one directory just below " +
  "that has one, else the nearest above)";

/** The SDK's version, from its package.json. */
export function sdkVersion(): string {
  return sdkPackage().version;
}

/** Splits `a,b, c` into items, refusing an empty list. */
export function splitList(value: string, flag: string): string[] {
  const items = value
    .split(",")
    .map((item) => item.trim())
    .filter((item) => item !== "");
  if (items.length === 0) throw new UsageError(`${flag} needs at least one item`);
  return items;
}
