/**
 * What a session hook returns for a set of sessions: a `Map`, or a plain object keyed by
 * session, read by one guarded function so an author never builds a prototype-free object.
 *
 * @module
 */

/**
 * Values by session key (or session ID): a `Map`, or a plain object with one own key per
 * session. Session keys are caller-chosen, `__proto__` and `constructor` included: the SDK
 * reads only own keys, and recovers a `__proto__` assigned into `{}` (which set the prototype).
 * A `Map` is the form that holds every key as data whatever its value; prefer it when a value
 * may be a primitive, which `{}` cannot hold under `__proto__`.
 *
 * @example
 * const out = new Map<string, { turns: number }>();
 * for (const key of sessionKeys) out.set(key, { turns: 1 });
 * return out; // or: const out: Record<string, { turns: number }> = {}; out[key] = …
 */
export type BySession<T> = ReadonlyMap<string, T> | Readonly<Record<string, T>>;

/** What {@link sessionValue} answers for a session the value does not hold. */
export const ABSENT: unique symbol = Symbol("absent");

/**
 * The value `values` holds for `key`, or {@link ABSENT}. A plain object answers its own keys
 * only, so a session named `constructor` or `toString` that was left out is absent, not the
 * inherited function; `values["__proto__"] = v` on `{}` made `v` the object's prototype, and
 * that prototype is read back as the value (a plain object's prototype is otherwise
 * `Object.prototype` or null).
 */
export function sessionValue<T>(values: BySession<T>, key: string): T | typeof ABSENT {
  if (values instanceof Map) return values.has(key) ? (values.get(key) as T) : ABSENT;
  const record = values as Readonly<Record<string, T>>;
  if (Object.hasOwn(record, key)) return record[key] as T;
  if (key === "__proto__") {
    const proto: unknown = Object.getPrototypeOf(record);
    if (proto !== null && proto !== Object.prototype) return proto as T;
  }
  return ABSENT;
}
