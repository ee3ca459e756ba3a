/** The manifest's on-disk form: keys sorted at every level, indent 1, no trailing newline. */
import { assertJsonValue, NotJsonError, type JsonValue } from "../json/json-value.js";

/**
 * Writes `value` like `JSON.stringify(value, null, 1)` but with the keys of every object sorted
 * and in that order (a JS object cannot hold integer-like keys in sorted order, and assigning
 * `__proto__` to a fresh object would drop it, so the text is built directly).
 */
function writeSorted(value: JsonValue, indent: string): string {
  if (value === null || typeof value !== "object") {
    if (typeof value === "number" && !Number.isFinite(value)) {
      throw new NotJsonError("$", `${String(value)} is not JSON in a manifest`);
    }
    if (typeof value === "bigint") {
      throw new NotJsonError("$", `the integer ${value} is not JSON in a manifest`);
    }
    return JSON.stringify(value);
  }
  const inner = indent + " ";
  if (Array.isArray(value)) {
    if (value.length === 0) return "[]";
    const items = value.map((item) => inner + writeSorted(item, inner));
    return `[\n${items.join(",\n")}\n${indent}]`;
  }
  const keys = Object.keys(value).sort();
  if (keys.length === 0) return "{}";
  const entries = keys.map(
    (key) => `${inner}${JSON.stringify(key)}: ${writeSorted(value[key] as JsonValue, inner)}`,
  );
  return `{\n${entries.join(",\n")}\n${indent}}`;
}

/**
 * Serializes a manifest in the store's fixed layout (sorted keys, indent 1, no trailing
 * newline). Only standard JSON is allowed (the manifest is read back with `JSON.parse`).
 *
 * @throws {@link NotJsonError} for a value standard JSON cannot hold exactly (NaN, ±Infinity,
 * bigints, dates, class instances, `undefined`, cycles, ...).
 */
export function serializeManifest(manifest: Record<string, unknown>): string {
  assertJsonValue(manifest);
  return writeSorted(manifest, "");
}

/** Field-by-field equality of two manifests (order-insensitive objects). */
export function sameManifest(a: Record<string, unknown>, b: Record<string, unknown>): boolean {
  return serializeManifest(a) === serializeManifest(b);
}
