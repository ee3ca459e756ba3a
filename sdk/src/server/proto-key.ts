/**
 * Finding a `__proto__` object key in parsed JSON. `JSON.parse` keeps such a key as an own
 * property, but most of what handles the value afterwards (schema validation, spreading into
 * replies, records) drops it or turns it into the object's prototype: the key would vanish, or
 * its fields would appear inherited. A body that holds one is refused instead of changed.
 *
 * @module
 */

/** The one key JSON can carry that plain JavaScript objects cannot hold as data. */
export const PROTO_KEY = "__proto__";

/**
 * Whether `text` may hold a `__proto__` key: it names one literally, or has `\u` escapes that
 * could spell one. A cheap test that spares the walk for almost every body.
 */
export function mayHoldProtoKey(text: string): boolean {
  return text.includes(PROTO_KEY) || text.includes("\\u");
}

/**
 * The path to the first object with an own `__proto__` key in a parsed JSON value, or null.
 * Iterative, so a value as deep as JSON allows cannot exhaust the stack.
 *
 * @example
 * protoKeyPath(JSON.parse('{"a":[{"__proto__":1}]}')); // ["a", 0, "__proto__"]
 */
export function protoKeyPath(value: unknown): (string | number)[] | null {
  // Each entry links to its parent: the path is built only for the key found, keeping the walk
  // linear in the size of the value.
  interface Step {
    readonly value: unknown;
    readonly key: string | number | null;
    readonly parent: Step | null;
  }
  const pathOf = (step: Step): (string | number)[] => {
    const path: (string | number)[] = [PROTO_KEY];
    for (let at: Step | null = step; at !== null && at.key !== null; at = at.parent) {
      path.push(at.key);
    }
    return path.reverse();
  };
  const pending: Step[] = [{ value, key: null, parent: null }];
  for (let step = pending.pop(); step !== undefined; step = pending.pop()) {
    const current = step.value;
    if (Array.isArray(current)) {
      for (let i = current.length - 1; i >= 0; i--) {
        const item: unknown = current[i];
        if (typeof item === "object" && item !== null) {
          pending.push({ value: item, key: i, parent: step });
        }
      }
    } else if (typeof current === "object" && current !== null) {
      if (Object.hasOwn(current, PROTO_KEY)) return pathOf(step);
      for (const [key, item] of Object.entries(current)) {
        if (typeof item === "object" && item !== null) {
          pending.push({ value: item, key, parent: step });
        }
      }
    }
  }
  return null;
}
