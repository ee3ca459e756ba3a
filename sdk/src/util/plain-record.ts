/**
 * Shape checks the hand-checked fast paths share (a value read from JSON, before its schema).
 *
 * @module
 */

/** Whether `value` is an object that is neither null nor an array (what zod takes as an object). */
export function isPlainRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Whether every own key of `value` is one of `allowed` (a strict object's rule). */
export function hasOnlyKeys(value: Record<string, unknown>, allowed: ReadonlySet<string>): boolean {
  for (const key of Object.keys(value)) if (!allowed.has(key)) return false;
  return true;
}

/** The keys of a zod object schema's shape, as a set: the fields a strict object allows. */
export function shapeKeys(schema: {
  readonly shape: Record<string, unknown>;
}): ReadonlySet<string> {
  return new Set(Object.keys(schema.shape));
}
