/**
 * Durations on the command line: `30s`, `500ms`, `2m`, decimals allowed (`1.5s`). A bare number
 * is refused: `--deadline 30` could mean seconds or milliseconds.
 */
import { UsageError } from "./output.js";

const UNIT_MS = { ms: 1, s: 1_000, m: 60_000 } as const;
const DURATION_PATTERN = /^(\d+(?:\.\d+)?)(ms|s|m)$/;

/** Parses a duration into milliseconds (rounded to a whole millisecond). */
export function parseDuration(text: string, flag = "duration"): number {
  const match = DURATION_PATTERN.exec(text.trim());
  if (match === null) {
    const bare = /^\d+(?:\.\d+)?$/.test(text.trim());
    throw new UsageError(
      `${flag} ${JSON.stringify(text)} is not a duration`,
      bare
        ? `add a unit: ${text.trim()}s (seconds), ${text.trim()}ms or ${text.trim()}m`
        : "write it as a number and a unit: 500ms, 30s or 2m",
    );
  }
  const value = Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS];
  if (!Number.isFinite(value) || value > 2_147_483_647) {
    throw new UsageError(`${flag} ${JSON.stringify(text)} is too long`, "use at most 35000m");
  }
  return Math.round(value);
}

/** A duration for people: `850 ms`, `2.4 s`, `3 m 05 s`. */
export function formatDuration(ms: number): string {
  if (ms < 1_000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${Number((ms / 1_000).toFixed(ms < 10_000 ? 2 : 1))} s`;
  const minutes = Math.floor(ms / 60_000);
  const seconds = Math.round((ms % 60_000) / 1_000);
  return `${minutes} m ${String(seconds).padStart(2, "0")} s`;
}
