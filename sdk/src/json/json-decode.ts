/**
 * The decoding half of the lossless codec (see json-value.ts): standard JSON plus the bare
 * tokens `NaN`, `Infinity` and `-Infinity`, integer literals beyond the safe range as bigints.
 * Native `JSON.parse` decodes whatever it decodes exactly; the hand-written, depth-bounded
 * parser takes the rest and says where malformed text goes wrong.
 *
 * @module
 */
import { setOwnKey } from "../util/own-key.js";
import { MAX_JSON_DEPTH, type JsonValue } from "./json-value.js";

const MAX_SAFE = Number.MAX_SAFE_INTEGER;
const MIN_SAFE = Number.MIN_SAFE_INTEGER;
const MAX_SAFE_BIG = BigInt(MAX_SAFE);
const MIN_SAFE_BIG = BigInt(MIN_SAFE);
const isArray = Array.isArray;

/**
 * Thrown by {@link decodeJson} on malformed text. The message gives the character offset and
 * what was wrong there.
 */
export class JsonSyntaxError extends Error {
  /** Character (UTF-16 code unit) offset in the decoded text where the problem was found. */
  readonly offset: number;

  /**
   * @param offset - Character offset of the problem.
   * @param message - Full human-readable message.
   */
  constructor(offset: number, message: string) {
    super(message);
    this.name = "JsonSyntaxError";
    this.offset = offset;
  }
}

/**
 * Matches a 16+ digit integer literal (not part of a fraction or exponent). Only such literals
 * can be unsafe integers, i.e. the only ones native JSON.parse would round. Digit runs inside
 * strings may match too; that merely sends the text down the exact (slower) path.
 */
const LONG_INTEGER = /(?<![\d.])\d{16,}(?![\d.eE])/;

/** {@link checkParsed} verdicts. */
const PARSED_OK = 0;
const PARSED_TOO_DEEP = 1;
const PARSED_BIG_NUMBER = 2;

/**
 * Checks a natively parsed container: nesting depth, and whether some number lies outside the
 * safe-integer range (only those can come from an integer literal that JSON.parse rounded).
 * Scanning the tree is far cheaper than a regex over the text, so the regex only runs when
 * this finds a big number.
 */
function checkParsed(container: object, depth: number): number {
  if (depth > MAX_JSON_DEPTH) return PARSED_TOO_DEEP;
  let verdict = PARSED_OK;
  const items: unknown[] = isArray(container) ? container : Object.values(container);
  for (let i = 0, n = items.length; i < n; i++) {
    const item = items[i];
    if (typeof item === "number") {
      if (!(item >= MIN_SAFE && item <= MAX_SAFE)) verdict = PARSED_BIG_NUMBER;
    } else if (typeof item === "object" && item !== null) {
      const inner = checkParsed(item, depth + 1);
      if (inner === PARSED_TOO_DEEP) return inner;
      if (inner !== PARSED_OK) verdict = inner;
    }
  }
  return verdict;
}

/** Containers {@link decodeJsonWithin} produced with `JSON.parse` and found exact. */
const nativelyDecoded = new WeakSet<object>();

/**
 * Whether `value` is a container {@link decodeJson} (or a whole-line decode) produced natively:
 * then it held no `NaN`, `Infinity` or unsafe integer literal, so nothing in it is a bigint or
 * a non-finite number, and a check for those need not walk it. Only as decoded: the caller
 * vouches that nothing changed it since.
 */
export function decodedAsStandardJson(value: object): boolean {
  return nativelyDecoded.has(value);
}

/**
 * Decodes one JSON value: standard JSON plus the bare tokens `NaN`, `Infinity` and `-Infinity`.
 * Integer literals outside the safe-integer range become bigints (exact); everything else with
 * a fraction or exponent is a number. Objects are plain objects and `"__proto__"` stays an own
 * property.
 *
 * @throws {@link JsonSyntaxError} on malformed text or nesting deeper than
 * {@link MAX_JSON_DEPTH}.
 */
export function decodeJson(text: string): JsonValue {
  if (typeof text !== "string") {
    throw new TypeError(`decodeJson expects a string, got ${typeof text}`);
  }
  return decodeJsonWithin(text, 0);
}

/**
 * {@link decodeJson} of a value that sits inside `outerDepth` enclosing containers: the nesting
 * limit counts them too, so pieces of one document decode exactly as the whole would.
 *
 * @internal
 */
export function decodeJsonWithin(text: string, outerDepth: number): JsonValue {
  // Text with extended tokens would make JSON.parse fail late, after doing most of the work.
  if (!text.includes("NaN") && !text.includes("Infinity")) {
    let parsed: unknown;
    let ok = true;
    try {
      parsed = JSON.parse(text);
    } catch {
      // Malformed text: the exact parser decides and reports where.
      ok = false;
    }
    if (ok) {
      const verdict =
        typeof parsed === "object" && parsed !== null
          ? checkParsed(parsed, 1 + outerDepth)
          : typeof parsed === "number" && !(parsed >= MIN_SAFE && parsed <= MAX_SAFE)
            ? PARSED_BIG_NUMBER
            : PARSED_OK;
      // Native parsing is exact unless a 16+ digit integer literal was rounded.
      if (verdict === PARSED_OK || (verdict === PARSED_BIG_NUMBER && !LONG_INTEGER.test(text))) {
        if (typeof parsed === "object" && parsed !== null) nativelyDecoded.add(parsed);
        return parsed as JsonValue;
      }
    }
  }
  return new Parser(text, outerDepth).document();
}

/** Finds the next raw control character (illegal inside strings); used via `lastIndex`. */
// eslint-disable-next-line no-control-regex -- matching raw control characters is the point
const CONTROL_CHAR = /[\x00-\x1f]/g;

/** Recursive-descent parser for the extended grammar; depth-bounded, so no stack overflow. */
class Parser {
  private pos = 0;
  private readonly len: number;
  /** Cached offset of the next backslash at or after the last string start (len if none). */
  private nextBackslash = -1;
  /** Cached offset of the next control character at or after the last string start. */
  private nextControl = -1;

  constructor(
    private readonly text: string,
    /** Containers enclosing the document (0 for a whole document). */
    private readonly outerDepth = 0,
  ) {
    this.len = text.length;
  }

  document(): JsonValue {
    this.skipWs();
    const value = this.value(this.outerDepth);
    this.skipWs();
    if (this.pos < this.len) this.fail("unexpected data after the JSON value");
    return value;
  }

  private fail(what: string, at: number = this.pos): never {
    const found = at >= this.len ? "end of input" : JSON.stringify(this.text.charAt(at));
    throw new JsonSyntaxError(at, `JSON syntax error at offset ${at}: ${what}, found ${found}`);
  }

  private skipWs(): void {
    const text = this.text;
    let pos = this.pos;
    for (;;) {
      const c = text.charCodeAt(pos);
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) pos++;
      else break;
    }
    this.pos = pos;
  }

  /** Parses a value at the current position; `depth` is the parent container's level. */
  private value(depth: number): JsonValue {
    const c = this.text.charCodeAt(this.pos);
    switch (c) {
      case 0x22: // "
        return this.string();
      case 0x7b: // {
        return this.object(depth + 1);
      case 0x5b: // [
        return this.array(depth + 1);
      case 0x74: // t
        return this.word("true", true);
      case 0x66: // f
        return this.word("false", false);
      case 0x6e: // n
        return this.word("null", null);
      case 0x4e: // N
        return this.word("NaN", NaN);
      case 0x49: // I
        return this.word("Infinity", Infinity);
      case 0x2d: // -
        if (this.text.charCodeAt(this.pos + 1) === 0x49) return this.word("-Infinity", -Infinity);
        return this.number();
      default:
        if (c >= 0x30 && c <= 0x39) return this.number();
        return this.fail("expected a JSON value");
    }
  }

  private word<T extends JsonValue>(word: string, value: T): T {
    if (!this.text.startsWith(word, this.pos)) this.fail(`expected ${word}`);
    this.pos += word.length;
    return value;
  }

  private number(): number | bigint {
    const text = this.text;
    const start = this.pos;
    let pos = start;
    let negative = false;
    if (text.charCodeAt(pos) === 0x2d) {
      negative = true;
      pos++;
    }
    let c = text.charCodeAt(pos);
    // Accumulate small integers directly; avoids a slice + Number() per array element.
    let acc = 0;
    if (c === 0x30) {
      pos++;
      c = text.charCodeAt(pos);
      if (c >= 0x30 && c <= 0x39) this.fail("leading zeros are not allowed", pos);
    } else if (c >= 0x31 && c <= 0x39) {
      do {
        acc = acc * 10 + (c - 0x30);
        c = text.charCodeAt(++pos);
      } while (c >= 0x30 && c <= 0x39);
    } else {
      this.fail("expected a digit", pos);
    }
    const intDigits = pos - start - (negative ? 1 : 0);
    let integral = true;
    if (c === 0x2e) {
      integral = false;
      c = text.charCodeAt(++pos);
      if (!(c >= 0x30 && c <= 0x39)) this.fail("expected a digit after the decimal point", pos);
      do c = text.charCodeAt(++pos);
      while (c >= 0x30 && c <= 0x39);
    }
    if (c === 0x65 || c === 0x45) {
      integral = false;
      c = text.charCodeAt(++pos);
      if (c === 0x2b || c === 0x2d) c = text.charCodeAt(++pos);
      if (!(c >= 0x30 && c <= 0x39)) this.fail("expected a digit in the exponent", pos);
      do c = text.charCodeAt(++pos);
      while (c >= 0x30 && c <= 0x39);
    }
    this.pos = pos;
    if (!integral) return Number(text.slice(start, pos));
    // 15 digits always fit exactly in a double (and `-0` keeps its sign).
    if (intDigits <= 15) return negative ? -acc : acc;
    const big = BigInt(text.slice(start, pos));
    return big >= MIN_SAFE_BIG && big <= MAX_SAFE_BIG ? Number(big) : big;
  }

  private string(): string {
    const text = this.text;
    const start = ++this.pos; // skip the opening quote
    // Fast path: find the closing quote natively and check (with cached look-aheads, so the
    // whole text is scanned at most once) that no backslash or control character precedes it.
    const end = text.indexOf('"', start);
    if (end >= 0) {
      if (this.nextBackslash < start) {
        const b = text.indexOf("\\", start);
        this.nextBackslash = b < 0 ? this.len : b;
      }
      if (this.nextControl < start) {
        CONTROL_CHAR.lastIndex = start;
        const m = CONTROL_CHAR.exec(text);
        this.nextControl = m === null ? this.len : m.index;
      }
      if (this.nextBackslash > end && this.nextControl > end) {
        this.pos = end + 1;
        return text.slice(start, end);
      }
    }
    let pos = start;
    for (;;) {
      const c = text.charCodeAt(pos);
      if (c === 0x22) {
        this.pos = pos + 1;
        return text.slice(start, pos);
      }
      if (c === 0x5c) break;
      if (c < 0x20 || pos >= this.len) this.stringFail(pos);
      pos++;
    }
    // Escapes present: validate them here for precise offsets, then let native JSON.parse
    // decode the literal (it handles \uXXXX surrogate pairs and lone surrogates).
    for (;;) {
      const c = text.charCodeAt(pos);
      if (c === 0x22) break;
      if (c === 0x5c) {
        const e = text.charCodeAt(pos + 1);
        if (e === 0x75) {
          if (!/^[0-9a-fA-F]{4}$/.test(text.slice(pos + 2, pos + 6))) {
            this.fail("expected four hex digits after \\u", pos);
          }
          pos += 6;
        } else if (
          e === 0x22 ||
          e === 0x5c ||
          e === 0x2f ||
          e === 0x62 ||
          e === 0x66 ||
          e === 0x6e ||
          e === 0x72 ||
          e === 0x74
        ) {
          pos += 2;
        } else {
          this.fail("invalid escape sequence in string", pos);
        }
        continue;
      }
      if (c < 0x20 || pos >= this.len) this.stringFail(pos);
      pos++;
    }
    this.pos = pos + 1;
    try {
      return JSON.parse(text.slice(start - 1, pos + 1)) as string;
    } catch {
      // Unreachable after the checks above; kept so no other error type can escape.
      return this.fail("invalid string literal", start - 1);
    }
  }

  private stringFail(pos: number): never {
    if (pos >= this.len) this.fail("unterminated string", pos);
    this.fail("unescaped control character in string", pos);
  }

  private array(depth: number): JsonValue[] {
    if (depth > MAX_JSON_DEPTH) this.fail(`value nested deeper than ${MAX_JSON_DEPTH} levels`);
    this.pos++; // [
    const out: JsonValue[] = [];
    this.skipWs();
    if (this.text.charCodeAt(this.pos) === 0x5d) {
      this.pos++;
      return out;
    }
    for (;;) {
      out.push(this.value(depth));
      this.skipWs();
      const c = this.text.charCodeAt(this.pos);
      if (c === 0x2c) {
        this.pos++;
        this.skipWs();
      } else if (c === 0x5d) {
        this.pos++;
        return out;
      } else {
        this.fail("expected ',' or ']' in array");
      }
    }
  }

  private object(depth: number): { [key: string]: JsonValue } {
    if (depth > MAX_JSON_DEPTH) this.fail(`value nested deeper than ${MAX_JSON_DEPTH} levels`);
    this.pos++; // {
    const out: { [key: string]: JsonValue } = {};
    this.skipWs();
    if (this.text.charCodeAt(this.pos) === 0x7d) {
      this.pos++;
      return out;
    }
    for (;;) {
      if (this.text.charCodeAt(this.pos) !== 0x22) this.fail("expected a string key in object");
      const key = this.string();
      this.skipWs();
      if (this.text.charCodeAt(this.pos) !== 0x3a) this.fail("expected ':' after object key");
      this.pos++;
      this.skipWs();
      const value = this.value(depth);
      setOwnKey(out, key, value);
      this.skipWs();
      const c = this.text.charCodeAt(this.pos);
      if (c === 0x2c) {
        this.pos++;
        this.skipWs();
      } else if (c === 0x7d) {
        this.pos++;
        return out;
      } else {
        this.fail("expected ',' or '}' in object");
      }
    }
  }
}
