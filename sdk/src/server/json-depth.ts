/**
 * A streaming guard against deeply nested JSON: it counts open arrays and objects over the raw
 * UTF-8 bytes of a body as they arrive, so a body nested too deep is refused before it is
 * parsed, validated, logged or echoed (each of which recurses once per level).
 *
 * @module
 */

/**
 * Deepest nesting of arrays and objects a request body may have; the outermost container is
 * level 1. Real payloads are far shallower; the limit leaves room below the checkpoint store's
 * own limit (`MAX_JSON_DEPTH`, 1000) for the records that wrap a body, and keeps schema
 * validation and serialization far from the stack's end.
 */
export const MAX_BODY_DEPTH = 512;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;

/**
 * Tracks the nesting depth of JSON text fed to it in chunks, outside strings. One pass, no
 * allocation: bytes of multi-byte UTF-8 characters are all ≥ 0x80, so none is mistaken for a
 * bracket or quote. It does not validate the text; malformed JSON is `JSON.parse`'s to refuse.
 *
 * @example
 * const scanner = new JsonDepthScanner(2);
 * scanner.feed(Buffer.from('[[1, "]"], ')); // true
 * scanner.feed(Buffer.from("[[[]]]]")); // false: level 3 opened
 */
export class JsonDepthScanner {
  #depth = 0;
  #inString = false;
  #escaped = false;

  constructor(
    /** The deepest level accepted. */
    readonly maxDepth: number,
  ) {}

  /** Scans the next chunk; false as soon as the nesting goes deeper than {@link maxDepth}. */
  feed(chunk: Uint8Array): boolean {
    let depth = this.#depth;
    let inString = this.#inString;
    let escaped = this.#escaped;
    const max = this.maxDepth;
    const length = chunk.length;
    for (let i = 0; i < length; i++) {
      const byte = chunk[i] as number;
      if (inString) {
        if (escaped) escaped = false;
        else if (byte === BACKSLASH) escaped = true;
        else if (byte === QUOTE) inString = false;
      } else if (byte === QUOTE) {
        inString = true;
      } else if (byte === OPEN_ARRAY || byte === OPEN_OBJECT) {
        if (++depth > max) {
          this.#depth = depth;
          return false;
        }
      } else if ((byte === CLOSE_ARRAY || byte === CLOSE_OBJECT) && depth > 0) {
        depth--;
      }
    }
    this.#depth = depth;
    this.#inString = inString;
    this.#escaped = escaped;
    return true;
  }
}
