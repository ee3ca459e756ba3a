/**
 * Decodes one checkpoint record line straight from its bytes, exactly as
 * `decodeJson(line.toString("utf8"))` would.
 *
 * Why: a record of a few hundred KB decoded into one string lands in V8's large-object space,
 * and on a VM each fresh large allocation costs page faults worth far more than the parse (a
 * 350 KB line decodes at ~150 MB/s that way, a 64 KB one at several GB/s). So a large line is
 * walked structurally on its bytes and decoded piece by piece, each piece small enough for the
 * regular heap; only a single string value that is itself huge still needs a large allocation.
 *
 * Exactness: every piece (a small container, a string, a number, a keyword) goes through the
 * same decoder as a whole line, with its enclosing depth counted; pieces are cut only at ASCII
 * structural bytes, which never occur inside a multi-byte UTF-8 sequence. Anything the
 * structural walk does not expect (malformed text, deep nesting) falls back to decoding the
 * whole line, which then fails, or succeeds, exactly as before.
 *
 * @module
 */
import { setOwnKey } from "../util/own-key.js";
import type { JsonValue } from "./json-value.js";
import { decodeJson, decodeJsonWithin } from "./json-decode.js";

/** Lines up to this size are decoded whole (the regular heap takes them cheaply). */
const PIECE_BYTES = 64 * 1024;
/** The structural walk descends at most this deep; deeper lines are decoded whole. */
const MAX_WALK_DEPTH = 64;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;

/** A raw control character: not allowed inside a JSON string. */
// eslint-disable-next-line no-control-regex -- matching raw control characters is the point
const CONTROL_CHAR = /[\x00-\x1f]/;

/** Thrown inside the walk when the line needs the whole-line decoder (no stack: it is common). */
const ABORT = Object.freeze({ walkAborted: true });

/**
 * Decodes a line (without its newline) as {@link decodeJson} decodes its UTF-8 text.
 *
 * @throws {@link JsonSyntaxError} on malformed text, as {@link decodeJson} does.
 */
export function decodeJsonLine(line: Buffer): JsonValue {
  return decodeJsonLineIn(line, PIECE_BYTES);
}

/**
 * {@link decodeJsonLine} with pieces of at most `pieceBytes` (tests use small pieces to walk
 * small lines).
 *
 * @internal
 */
export function decodeJsonLineIn(line: Buffer, pieceBytes: number): JsonValue {
  if (line.length > pieceBytes) {
    try {
      return new LineWalker(line, pieceBytes).document();
    } catch {
      // Malformed somewhere, or shaped unlike a record: the whole-line decoder decides, so a
      // bad line fails with the same error (and offset) as before.
    }
  }
  return decodeJson(line.toString("utf8"));
}

class LineWalker {
  #pos = 0;
  readonly #end: number;

  constructor(
    private readonly buf: Buffer,
    private readonly pieceBytes: number,
  ) {
    this.#end = buf.length;
  }

  document(): JsonValue {
    this.#skipWs();
    const value = this.#value(0);
    this.#skipWs();
    if (this.#pos !== this.#end) throw ABORT;
    return value;
  }

  /** The value at the cursor, inside `depth` containers; moves the cursor past it. */
  #value(depth: number): JsonValue {
    const start = this.#pos;
    const c = this.buf[start];
    if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      const end = this.#containerEnd(start, start + this.pieceBytes);
      if (end >= 0) return this.#piece(start, end, depth);
      if (depth >= MAX_WALK_DEPTH) throw ABORT;
      return c === OPEN_BRACE ? this.#object(depth + 1) : this.#array(depth + 1);
    }
    if (c === QUOTE) return this.#string(start, this.#stringEnd(start), depth);
    return this.#piece(start, this.#scalarEnd(start), depth);
  }

  /** Decodes bytes `[start, end)` as one value inside `depth` containers. */
  #piece(start: number, end: number, depth: number): JsonValue {
    this.#pos = end;
    return decodeJsonWithin(this.buf.toString("utf8", start, end), depth);
  }

  /**
   * The string `[start, end)` (quotes included). Without escapes its value is its bytes between
   * the quotes: decoded straight from them, it skips JSON.parse and the copy between the two.
   */
  #string(start: number, end: number, depth: number): JsonValue {
    const inner = this.buf.subarray(start + 1, end - 1);
    if (inner.indexOf(BACKSLASH) < 0) {
      const value = inner.toString("utf8");
      if (!CONTROL_CHAR.test(value)) {
        this.#pos = end;
        return value;
      }
    }
    // Escapes to resolve, or a raw control character to report: the exact decoder does both.
    return this.#piece(start, end, depth);
  }

  #object(depth: number): { [key: string]: JsonValue } {
    const out: { [key: string]: JsonValue } = {};
    this.#pos++; // {
    this.#skipWs();
    if (this.buf[this.#pos] === CLOSE_BRACE) {
      this.#pos++;
      return out;
    }
    for (;;) {
      if (this.buf[this.#pos] !== QUOTE) throw ABORT;
      const key = this.#value(depth) as string;
      this.#skipWs();
      if (this.buf[this.#pos] !== COLON) throw ABORT;
      this.#pos++;
      this.#skipWs();
      const value = this.#value(depth);
      setOwnKey(out, key, value);
      if (this.#separator(CLOSE_BRACE)) return out;
    }
  }

  #array(depth: number): JsonValue[] {
    const out: JsonValue[] = [];
    this.#pos++; // [
    this.#skipWs();
    if (this.buf[this.#pos] === CLOSE_BRACKET) {
      this.#pos++;
      return out;
    }
    for (;;) {
      out.push(this.#value(depth));
      if (this.#separator(CLOSE_BRACKET)) return out;
    }
  }

  /** After a member: true past the closing byte, false past a comma (then at the next value). */
  #separator(close: number): boolean {
    this.#skipWs();
    const c = this.buf[this.#pos];
    this.#pos++;
    if (c === close) return true;
    if (c !== COMMA) throw ABORT;
    this.#skipWs();
    return false;
  }

  #skipWs(): void {
    const buf = this.buf;
    let pos = this.#pos;
    for (;;) {
      const c = buf[pos];
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) pos++;
      else break;
    }
    this.#pos = pos;
  }

  /** The offset just past the string starting (at its quote) at `start`. */
  #stringEnd(start: number): number {
    const buf = this.buf;
    let from = start + 1;
    for (;;) {
      const quote = buf.indexOf(QUOTE, from);
      if (quote < 0) throw ABORT;
      let backslashes = 0;
      while (buf[quote - 1 - backslashes] === BACKSLASH) backslashes++;
      if (backslashes % 2 === 0) return quote + 1;
      from = quote + 1;
    }
  }

  /** The offset just past a number or keyword starting at `start`. */
  #scalarEnd(start: number): number {
    const buf = this.buf;
    let pos = start;
    for (; pos < this.#end; pos++) {
      const c = buf[pos];
      if (
        c === COMMA ||
        c === CLOSE_BRACE ||
        c === CLOSE_BRACKET ||
        c === 0x20 ||
        c === 0x0a ||
        c === 0x0d ||
        c === 0x09
      ) {
        break;
      }
    }
    if (pos === start) throw ABORT;
    return pos;
  }

  /**
   * The offset just past the array opening at `start` if it holds no string and no container
   * and closes before `stop`, else -1. Such an array (token IDs, log-probabilities) ends at the
   * first `]`, and native byte searches prove it far faster than a loop over its bytes.
   */
  #flatArrayEnd(start: number, stop: number): number {
    const buf = this.buf;
    if (buf[start] !== OPEN_BRACKET) return -1;
    const found = buf.subarray(start + 1, stop).indexOf(CLOSE_BRACKET);
    if (found < 0) return -1;
    const close = start + 1 + found;
    const inner = buf.subarray(start + 1, close);
    const plain =
      inner.indexOf(QUOTE) < 0 &&
      inner.indexOf(OPEN_BRACKET) < 0 &&
      inner.indexOf(OPEN_BRACE) < 0 &&
      inner.indexOf(CLOSE_BRACE) < 0;
    return plain ? close + 1 : -1;
  }

  /**
   * The offset just past the container opening at `start` if it closes before `limit`, else -1.
   * Strings are skipped whole, so brackets inside them do not count.
   */
  #containerEnd(start: number, limit: number): number {
    const buf = this.buf;
    const stop = Math.min(limit, this.#end);
    const flat = this.#flatArrayEnd(start, stop);
    if (flat >= 0) return flat;
    let depth = 0;
    for (let pos = start; pos < stop; pos++) {
      const c = buf[pos];
      if (c === QUOTE) {
        pos = this.#stringEnd(pos) - 1;
      } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
        depth++;
      } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
        depth--;
        if (depth === 0) return pos + 1;
      }
    }
    return -1;
  }
}
