/**
 * The task digest of an episode: what a restored record remembers of its
 * task, so a replacement `/run` for another task is refused.
 *
 * @module
 */
import { createHash } from "node:crypto";

/**
 * Canonical JSON: object keys sorted recursively, no whitespace. Self-consistent within this
 * SDK (the Python reference's `\uXXXX` escaping and float `repr` are not reproduced).
 */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.keys(value)
      .filter((key) => (value as Record<string, unknown>)[key] !== undefined)
      .sort()
      .map(
        (key) => `${JSON.stringify(key)}:${canonicalJson((value as Record<string, unknown>)[key])}`,
      );
    return `{${entries.join(",")}}`;
  }
  return JSON.stringify(value) ?? "null";
}

/** Lowercase hex SHA-256 of the canonical JSON of `task`. */
export function taskDigest(task: unknown): string {
  return createHash("sha256").update(canonicalJson(task), "utf8").digest("hex");
}
