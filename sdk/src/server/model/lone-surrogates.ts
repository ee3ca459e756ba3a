/**
 * Finds strings that are not valid Unicode in a parsed JSON body.
 *
 * @module
 */

/** A high surrogate not followed by a low one, or a low one not preceded by a high one. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Whether `text` holds a lone surrogate (JSON's `"\ud800"` parses into one). */
export function hasLoneSurrogate(text: string): boolean {
  return LONE_SURROGATE.test(text);
}

/**
 * The JSON paths of the strings (values and keys) in `value` that hold a lone surrogate, at most
 * `limit` of them.
 *
 * Why: such a string has no UTF-8 encoding. A digest of it cannot be computed (the reference
 * refuses to encode it), and a backend given its `\ud800` escape fails on it in its tokenizer, so
 * it is refused where it enters. Iterative: a deep body must not overflow the stack.
 *
 * @example
 * loneSurrogatePaths({ input: [{ content: "\ud800" }] }); // [["input", 0, "content"]]
 */
export function loneSurrogatePaths(value: unknown, limit = 8): (string | number)[][] {
  const found: (string | number)[][] = [];
  const stack: { value: unknown; path: (string | number)[] }[] = [{ value, path: [] }];
  while (stack.length > 0 && found.length < limit) {
    const { value: current, path } = stack.pop() as { value: unknown; path: (string | number)[] };
    if (typeof current === "string") {
      if (hasLoneSurrogate(current)) found.push(path);
    } else if (Array.isArray(current)) {
      for (let i = current.length - 1; i >= 0; i--) {
        stack.push({ value: current[i], path: [...path, i] });
      }
    } else if (typeof current === "object" && current !== null) {
      const keys = Object.keys(current);
      for (let i = keys.length - 1; i >= 0; i--) {
        const key = keys[i] as string;
        if (hasLoneSurrogate(key)) found.push([...path, key]);
        stack.push({ value: (current as Record<string, unknown>)[key], path: [...path, key] });
      }
    }
  }
  return found.slice(0, limit);
}
