/**
 * Lossless JSON codec for checkpoint record lines (one JSON value per line).
 *
 * Standard JSON loses information the checkpoint store must keep: NaN, ±Infinity, -0 and
 * integers beyond 2^53. This codec extends the grammar with the bare tokens `NaN`, `Infinity`
 * and `-Infinity`, writes `-0` literally, writes bigints as plain integer literals and unsafe
 * integer-valued numbers in exponent form, so every {@link JsonValue} survives
 * `decodeJson(encodeJson(v))` exactly, key order included.
 *
 * Both directions lean on the native `JSON.stringify`/`JSON.parse` whenever they are known to
 * be exact, and only fall back to the hand-written serializer/parser for the extended cases.
 *
 * @module
 */
import { setOwnKey } from "../util/own-key.js";
import { trustedTree } from "./trusted-trees.js";

/**
 * Canonical JSON value model.
 *
 * Objects are plain objects (prototype `Object.prototype` or `null`). Numbers may be NaN,
 * ±Infinity or -0. A `bigint` is always outside the safe-integer range: one inside it would
 * read back as a number, so {@link encodeJson} and {@link assertJsonValue} refuse it.
 */
export type JsonValue =
  null | boolean | number | bigint | string | JsonValue[] | { [key: string]: JsonValue };

/**
 * Deepest nesting of arrays/objects accepted by {@link encodeJson}, {@link decodeJson} and
 * {@link assertJsonValue}. The outermost container is level 1.
 */
export const MAX_JSON_DEPTH = 1000;

/**
 * Thrown when a value cannot be represented as JSON.
 *
 * The message names the location and what was found there, e.g.
 * `$.a[2]: a Date is not JSON`.
 */
export class NotJsonError extends Error {
  /** JSONPath-like location of the offending value, e.g. `$.a[3].b` (`$` is the root). */
  readonly path: string;

  /**
   * @param path - JSONPath-like location of the offending value.
   * @param message - Full human-readable message (contains "not JSON").
   */
  constructor(path: string, message: string) {
    super(message);
    this.name = "NotJsonError";
    this.path = path;
  }
}

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

// ---------------------------------------------------------------------------------------------
// Validation walk
// ---------------------------------------------------------------------------------------------

const MAX_SAFE = Number.MAX_SAFE_INTEGER;
const MIN_SAFE = Number.MIN_SAFE_INTEGER;
const MAX_SAFE_BIG = BigInt(MAX_SAFE);
const MIN_SAFE_BIG = BigInt(MIN_SAFE);
const objectProto = Object.prototype;
const arrayProto = Array.prototype;
const getProto = Object.getPrototypeOf;
const isArray = Array.isArray;

/**
 * Internal refusal raised deep in the walk (and in the copying walk of `frozen-json.ts`). It
 * collects path segments while it unwinds, so the hot path never builds path strings.
 *
 * @internal
 */
export class Refusal {
  /** Path segments, innermost first. */
  readonly trail: (string | number)[] = [];
  constructor(
    readonly what: string,
    /** Whether the walk went deeper than {@link MAX_JSON_DEPTH} (maybe round a cycle). */
    readonly tooDeep = false,
  ) {}
}

/** Per-call state of the validation walk. */
interface WalkState {
  /**
   * Containers on the current root-to-node path (circularity check), or null on the first walk:
   * a cycle then shows as nesting deeper than {@link MAX_JSON_DEPTH}, and only that refusal
   * walks again with the set to tell a cycle from real depth. Keeping the set costs about half
   * of a walk of ordinary records.
   */
  readonly ancestors: Set<object> | null;
  /** Containers whose subtree needs the extended serializer. */
  readonly extended: Set<object>;
  /**
   * A rough size of the text: string lengths plus {@link MEMBER_CHARS} per array item or object
   * member. Tells a small value, written as one string, from a large one, written in pieces.
   */
  chars: number;
}

/**
 * What {@link WalkState.chars} counts for each array item or object member besides strings.
 *
 * @internal
 */
export const MEMBER_CHARS = 8;

/**
 * True when a number needs an extended token: NaN, ±Infinity, -0 or an unsafe integer.
 *
 * @internal
 */
export function isExtendedNumber(n: number): boolean {
  // NaN fails both comparisons; every double beyond 2^53 is an integer, so the range test alone
  // catches the unsafe integers, and ±Infinity too.
  return !(n >= MIN_SAFE && n <= MAX_SAFE) || (n === 0 && 1 / n < 0);
}

/**
 * Validates any value. Returns true when the value needs the extended serializer.
 * `depth` is the nesting level of the value's parent container (0 for the root).
 */
function walkValue(value: unknown, depth: number, st: WalkState): boolean {
  switch (typeof value) {
    case "string":
      st.chars += value.length;
      return false;
    case "boolean":
      return false;
    case "number":
      return isExtendedNumber(value);
    case "bigint":
      return checkBigint(value);
    case "object":
      return value === null ? false : walkContainer(value, depth + 1, st);
    default:
      throw new Refusal(describe(value));
  }
}

/**
 * Validates one array/object element (inlined leaf checks keep number and string arrays a flat
 * loop). Returns true when the element needs the extended serializer.
 */
function walkItem(item: unknown, depth: number, st: WalkState): boolean {
  if (typeof item === "number") return isExtendedNumber(item);
  if (typeof item === "string") {
    st.chars += item.length;
    return false;
  }
  if (typeof item === "boolean" || item === null) return false;
  if (typeof item === "object") return walkContainer(item, depth + 1, st);
  if (typeof item === "bigint") return checkBigint(item);
  throw new Refusal(describe(item));
}

const MIN_SAFE_BIGINT = BigInt(Number.MIN_SAFE_INTEGER);
const MAX_SAFE_BIGINT = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * A bigint inside the safe-integer range would read back as a number, breaking the round-trip
 * law (same types after restore): refused, the author stores a number instead.
 *
 * @internal
 */
export function checkBigint(value: bigint): true {
  if (value >= MIN_SAFE_BIGINT && value <= MAX_SAFE_BIGINT) {
    throw new Refusal(`a bigint within the safe integer range (${value}n; store it as a number)`);
  }
  return true;
}

/** Validates an array or object at nesting level `depth`. */
function walkContainer(obj: object, depth: number, st: WalkState): boolean {
  if (depth > MAX_JSON_DEPTH) {
    throw new Refusal(`a value nested deeper than ${MAX_JSON_DEPTH} levels`, true);
  }
  // A trusted tree was validated when it was frozen: counted, not walked (unless, placed this
  // deep, it would pass the depth bound; then the walk refuses it where it does).
  const trusted = trustedTree(obj);
  if (trusted !== undefined && depth + trusted.height - 1 <= MAX_JSON_DEPTH) {
    st.chars += trusted.chars;
    return false;
  }
  const ancestors = st.ancestors;
  if (ancestors?.has(obj) === true) throw new Refusal("a circular reference");
  let extended = false;
  let i = 0;
  if (isArray(obj)) {
    // Subclasses are class instances; only real arrays are canonical.
    if (getProto(obj) !== arrayProto) throw new Refusal(describe(obj));
    ancestors?.add(obj);
    const arr = obj as unknown[];
    st.chars += arr.length * MEMBER_CHARS;
    try {
      for (const n = arr.length; i < n; i++) {
        const item = arr[i];
        if (item === undefined && !(i in arr)) throw new Refusal("an array hole (undefined)");
        if (walkItem(item, depth, st)) extended = true;
      }
    } catch (e) {
      if (e instanceof Refusal) e.trail.push(i);
      throw e;
    }
  } else {
    const proto: unknown = getProto(obj);
    if (proto !== objectProto && proto !== null) throw new Refusal(describe(obj));
    ancestors?.add(obj);
    // Values only: keys are needed just to name the path on refusal (same order as Object.keys).
    const values = Object.values(obj);
    st.chars += values.length * MEMBER_CHARS;
    try {
      for (const n = values.length; i < n; i++) {
        if (walkItem(values[i], depth, st)) extended = true;
      }
    } catch (e) {
      if (e instanceof Refusal) e.trail.push(Object.keys(obj)[i] as string);
      throw e;
    }
  }
  ancestors?.delete(obj);
  if (extended) st.extended.add(obj);
  return extended;
}

/**
 * Short description of a refused value, e.g. "a Date", "a function (named f)".
 *
 * @internal
 */
export function describe(value: unknown): string {
  switch (typeof value) {
    case "undefined":
      return "undefined";
    case "function":
      return value.name ? `a function (named ${value.name})` : "a function";
    case "symbol":
      return `a symbol (${value.toString()})`;
    case "object": {
      if (value === null) return "null";
      let name: unknown;
      try {
        // Reading `constructor` can run user code (getters, proxies); never let it mask the refusal.
        name = (value as { constructor?: { name?: unknown } }).constructor?.name;
      } catch {
        name = undefined;
      }
      // An "Object" constructor reached through a foreign prototype says nothing useful.
      if (typeof name === "string" && name !== "" && name !== "Object") {
        return `${/^[AEIO]/.test(name) ? "an" : "a"} ${name}`;
      }
      return "an object with a non-plain prototype";
    }
    default:
      return `a ${typeof value}`;
  }
}

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/** Builds a JSONPath-like string from root-first segments. */
function formatPath(segments: readonly (string | number)[]): string {
  let path = "$";
  for (const s of segments) {
    if (typeof s === "number") path += `[${s}]`;
    else if (IDENTIFIER.test(s)) path += `.${s}`;
    else path += `[${JSON.stringify(s)}]`;
  }
  return path;
}

/** Keeps messages readable when the path is 1000 levels long; `path` itself stays complete. */
function abbreviatePath(path: string): string {
  return path.length <= 200 ? path : `${path.slice(0, 80)}…${path.slice(-80)}`;
}

/**
 * The {@link NotJsonError} a refusal stands for, naming its path.
 *
 * @internal
 */
export function toNotJsonError(r: Refusal): NotJsonError {
  const path = formatPath(r.trail.reverse());
  return new NotJsonError(path, `${abbreviatePath(path)}: ${r.what} is not JSON`);
}

/**
 * Runs the validation walk; returns the extended-container set, or null for a plain tree.
 *
 * @internal
 */
export function validate(value: unknown): Set<object> | null {
  return validateSized(value).extended;
}

/** {@link validate}, with the walk's rough size of the text ({@link WalkState.chars}). */
function validateSized(value: unknown): { extended: Set<object> | null; chars: number } {
  const st: WalkState = { ancestors: null, extended: new Set(), chars: 0 };
  let extended: boolean;
  try {
    extended = walkValue(value, 0, st);
  } catch (e) {
    if (!(e instanceof Refusal)) throw e;
    if (e.tooDeep) {
      // Too deep, or round a cycle: the walk with ancestors names which, and where. Everything
      // before the refusal passed, so it finds the same first problem, or this one (a getter
      // answering differently the second time leaves the first verdict standing).
      try {
        walkValue(value, 0, { ancestors: new Set(), extended: new Set(), chars: 0 });
      } catch (again) {
        if (again instanceof Refusal) throw toNotJsonError(again);
        throw again;
      }
    }
    throw toNotJsonError(e);
  }
  return { extended: extended ? st.extended : null, chars: st.chars };
}

/**
 * Asserts that `value` is a {@link JsonValue}: only null, booleans, strings, numbers (NaN,
 * ±Infinity and -0 included), bigints, arrays and plain objects, acyclic and at most
 * {@link MAX_JSON_DEPTH} levels deep.
 *
 * @throws {@link NotJsonError} naming the path of the first offending value.
 */
export function assertJsonValue(value: unknown): asserts value is JsonValue {
  validate(value);
}

/**
 * {@link assertJsonValue}, answering whether the value holds a number or bigint that needs an
 * extended token (NaN, ±Infinity, -0, an unsafe integer, a bigint): false means plain JSON, so a
 * caller that refuses some of those needs no walk of its own.
 *
 * @throws {@link NotJsonError} naming the path of the first offending value.
 */
export function jsonValueNeedsExtended(value: unknown): boolean {
  if (typeof value !== "object" || value === null) {
    validate(value);
    return typeof value === "bigint" || (typeof value === "number" && isExtendedNumber(value));
  }
  return validate(value) !== null;
}

// ---------------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------------

/** Token for a number; exact and decodable back to a number (never to a bigint). */
function numberToken(n: number): string {
  if (n !== n) return "NaN";
  if (n === Infinity) return "Infinity";
  if (n === -Infinity) return "-Infinity";
  if (n === 0) return 1 / n < 0 ? "-0" : "0";
  // Plain digits would decode as a bigint; the shortest exponent form decodes to the same double.
  if (n > MAX_SAFE || n < MIN_SAFE) return n.toExponential();
  return String(n);
}

/** Serializes a validated value. Containers not in `extended` are plain and go native. */
function writeValue(value: JsonValue, extended: Set<object>): string {
  switch (typeof value) {
    case "string":
      return JSON.stringify(value);
    case "number":
      return numberToken(value);
    case "bigint":
      return value.toString();
    case "boolean":
      return value ? "true" : "false";
  }
  if (value === null) return "null";
  if (!extended.has(value)) return JSON.stringify(value);
  if (isArray(value)) return writeArray(value, extended);
  const keys = Object.keys(value);
  let out = "{";
  for (let i = 0, n = keys.length; i < n; i++) {
    const key = keys[i] as string;
    if (i > 0) out += ",";
    out += JSON.stringify(key) + ":" + writeValue(value[key] as JsonValue, extended);
  }
  return out + "}";
}

/**
 * Serializes an extended array element by element. (Handing plain runs to JSON.stringify via
 * `slice` measured slower: the copies and rope flattening cost more than they save.)
 */
function writeArray(arr: JsonValue[], extended: Set<object>): string {
  const n = arr.length;
  if (n === 0) return "[]";
  let out = "[";
  for (let i = 0; i < n; i++) {
    if (i > 0) out += ",";
    const item = arr[i] as JsonValue;
    out += typeof item === "number" ? numberToken(item) : writeValue(item, extended);
  }
  return out + "]";
}

/** Arrays of scalars longer than this are emitted in slices of this many items. */
const PIECE_ITEMS = 2048;
/** Containers nested deeper than this are emitted whole. */
const PIECE_DEPTH = 4;
const NOTHING_EXTENDED: Set<object> = new Set();
/** Values whose walk counted at most this many characters are emitted as one piece. */
const WHOLE_VALUE_CHARS = 64 * 1024;
/** Strings at least this long are emitted as they are when nothing in them needs escaping. */
const RAW_STRING_CHARS = 1024;
/**
 * What JSON.stringify escapes in a string (and any surrogate, lone or not, to stay simple):
 * anything outside the code units written as they are. Spelled as the complement of that set,
 * V8 scans one-byte text with it ~1.3x faster than with the set of escapes.
 */
const NEEDS_ESCAPE = /[^\x20\x21\x23-\x5b\x5d-\ud7ff\ue000-\uffff]/;

/**
 * Encodes like {@link encodeJson}, handing the text to `emit` in pieces whose concatenation is
 * exactly `encodeJson(value)`.
 *
 * Why: `JSON.stringify` of a large record returns a rope that must be flattened into one large
 * string before it can be written; on a VM each such fresh large allocation costs page faults
 * that exceed the encoding itself. Pieces of a few tens of KB stay in the regular heap. The
 * checkpoint writer copies the pieces straight into its reused write buffers.
 *
 * A value whose validation walk counts at most `wholeValueChars` characters (string lengths plus
 * a few per member; 64 Ki by default) is emitted as one piece.
 *
 * Throws {@link NotJsonError} (before emitting anything) when the value is not JSON.
 */
export function encodeJsonPieces(
  value: unknown,
  emit: (piece: string) => void,
  wholeValueChars: number = WHOLE_VALUE_CHARS,
): void {
  const { extended, chars } = validateSized(value);
  // A small value is one piece: one native JSON.stringify beats thousands of tiny pieces (the
  // records of most participants are a few KB), and its string stays small.
  if (chars <= wholeValueChars) {
    emit(extended === null ? JSON.stringify(value) : writeValue(value as JsonValue, extended));
    return;
  }
  emitPieces(value as JsonValue, extended ?? NOTHING_EXTENDED, 0, emit);
}

function emitPieces(
  value: JsonValue,
  extended: Set<object>,
  depth: number,
  emit: (piece: string) => void,
): void {
  if (typeof value === "string" && value.length >= RAW_STRING_CHARS && !NEEDS_ESCAPE.test(value)) {
    // JSON.stringify would only copy it between quotes: hand the string itself to `emit`.
    emit('"');
    emit(value);
    emit('"');
    return;
  }
  if (value === null || typeof value !== "object" || depth >= PIECE_DEPTH) {
    emit(writeValue(value, extended));
    return;
  }
  if (isArray(value)) {
    const n = value.length;
    const first = value[0];
    const nested = first !== null && typeof first === "object";
    if (n === 0 || (!nested && n <= PIECE_ITEMS)) {
      emit(writeValue(value, extended));
      return;
    }
    emit("[");
    if (nested) {
      for (let i = 0; i < n; i++) {
        if (i > 0) emit(",");
        emitPieces(value[i] as JsonValue, extended, depth + 1, emit);
      }
    } else {
      const special = extended.has(value);
      for (let i = 0; i < n; i += PIECE_ITEMS) {
        const slice = value.slice(i, i + PIECE_ITEMS);
        const text = special ? writeArray(slice, extended) : JSON.stringify(slice);
        if (i > 0) emit(",");
        emit(text.slice(1, -1));
      }
    }
    emit("]");
    return;
  }
  const keys = Object.keys(value);
  emit("{");
  for (let i = 0, n = keys.length; i < n; i++) {
    const key = keys[i] as string;
    emit((i > 0 ? "," : "") + JSON.stringify(key) + ":");
    emitPieces(value[key] as JsonValue, extended, depth + 1, emit);
  }
  emit("}");
}

/**
 * Encodes a value as compact, single-line JSON text (extended with `NaN`, `Infinity`,
 * `-Infinity`, `-0` and arbitrary-size integer literals for bigints). Non-ASCII characters are
 * written as-is; keys keep the object's own order.
 *
 * @throws {@link NotJsonError} when `value` is not a {@link JsonValue}.
 */
export function encodeJson(value: unknown): string {
  const extended = validate(value);
  // A plain tree is exactly what native JSON.stringify handles losslessly.
  if (extended === null) return JSON.stringify(value);
  return writeValue(value as JsonValue, extended);
}

// ---------------------------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------------------------

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
