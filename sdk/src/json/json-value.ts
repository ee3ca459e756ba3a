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
 * Here: the value type, its bounds, the validation walk and the encoder; the decoder is
 * json-decode.ts.
 *
 * @module
 */
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

// ---------------------------------------------------------------------------------------------
// Validation walk
// ---------------------------------------------------------------------------------------------

const MAX_SAFE = Number.MAX_SAFE_INTEGER;
const MIN_SAFE = Number.MIN_SAFE_INTEGER;
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
