/**
 * Python's `json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)`, byte for
 * byte, for digests that a Python peer recomputes (the generation-cut `inventory_digest`).
 *
 * JavaScript's `JSON.stringify` differs in four places: floats (`1` for `1.0`, `1e-7` for
 * `1e-07`), non-ASCII text (written raw, not `\uXXXX`), key order (insertion, not code point) and
 * NaN/Infinity (`null`, not `NaN`). JavaScript also has one number type where Python has `int` and
 * `float`, so a value says which it is: a safe integer `number` or a `bigint` is an int, any other
 * `number` is a float, and {@link pyFloat} marks an integral value as a float.
 *
 * @module
 */
import { CaptureError } from "./capture-error.js";

/**
 * A number that Python holds as a `float`, even when it is integral: `pythonJson(pyFloat(1))` is
 * `1.0`. Create with {@link pyFloat}.
 */
export class PyFloat {
  constructor(
    /** The float's value. */
    readonly value: number,
  ) {}
}

/**
 * Marks `value` as a Python float.
 *
 * @example
 * pythonJson({ admitted_at: pyFloat(1700000000) }); // '{"admitted_at":1700000000.0}'
 */
export function pyFloat(value: number): PyFloat {
  return new PyFloat(value);
}

/**
 * Orders two strings by Unicode code point, as Python compares `str` and as UTF-8 bytes sort.
 * (`<` on JavaScript strings compares UTF-16 code units, which puts U+10000 before U+FFFF.)
 */
export function compareCodePoints(a: string, b: string): number {
  if (a === b) return 0;
  // UTF-16 code units order like code points except where a surrogate meets a unit above it
  // (U+E000..U+FFFF): compare units, and only such a pair goes the slow way.
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    if ((x & 0xf800) !== 0xd800 && (y & 0xf800) !== 0xd800) return x < y ? -1 : 1;
    return compareByIterators(a, b);
  }
  return a.length < b.length ? -1 : 1;
}

function compareByIterators(a: string, b: string): number {
  const left = a[Symbol.iterator]();
  const right = b[Symbol.iterator]();
  for (;;) {
    const x = left.next();
    const y = right.next();
    if (x.done === true) return y.done === true ? 0 : -1;
    if (y.done === true) return 1;
    const cx = x.value.codePointAt(0) as number;
    const cy = y.value.codePointAt(0) as number;
    if (cx !== cy) return cx < cy ? -1 : 1;
  }
}

/**
 * The shortest round-trip decimal digits of a positive finite number, and where the decimal point
 * goes: `x = 0.DIGITS × 10^decimalPoint`. Both Python's `repr` and Rust's `ryu` pick the same
 * digits as `Number.prototype.toString` (shortest, then closest); they differ only in layout.
 *
 * @internal
 */
export function decimalDigits(x: number): { digits: string; decimalPoint: number } {
  const text = String(x);
  const e = text.indexOf("e");
  const mantissa = e < 0 ? text : text.slice(0, e);
  const exponent = e < 0 ? 0 : Number(text.slice(e + 1));
  const dot = mantissa.indexOf(".");
  const integer = dot < 0 ? mantissa : mantissa.slice(0, dot);
  let digits = integer + (dot < 0 ? "" : mantissa.slice(dot + 1));
  let decimalPoint = integer.length + exponent;
  const leadingZeros = digits.length - digits.replace(/^0+/, "").length;
  digits = digits.slice(leadingZeros).replace(/0+$/, "");
  decimalPoint -= leadingZeros;
  return { digits, decimalPoint };
}

/**
 * Python's `repr(float)` as `json.dumps` writes it: shortest round-trip digits, fixed notation for
 * decimal exponents -4 to 15 with `.0` on integral values, otherwise `d.ddde±XX` (at least two
 * exponent digits); `NaN`, `Infinity` and `-Infinity` for the non-finite values.
 *
 * @example
 * pythonFloatJson(1); // "1.0"
 * pythonFloatJson(0.00001); // "1e-05"
 * pythonFloatJson(1e16); // "1e+16"
 */
export function pythonFloatJson(x: number): string {
  if (Number.isNaN(x)) return "NaN";
  if (x === Infinity) return "Infinity";
  if (x === -Infinity) return "-Infinity";
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const sign = x < 0 ? "-" : "";
  const { digits, decimalPoint } = decimalDigits(Math.abs(x));
  // CPython's float_repr_style "short": exponent form when decpt <= -4 or decpt > 16.
  if (decimalPoint > -4 && decimalPoint <= 16) {
    if (decimalPoint <= 0) return `${sign}0.${"0".repeat(-decimalPoint)}${digits}`;
    if (decimalPoint >= digits.length) {
      return `${sign}${digits}${"0".repeat(decimalPoint - digits.length)}.0`;
    }
    return `${sign}${digits.slice(0, decimalPoint)}.${digits.slice(decimalPoint)}`;
  }
  const mantissa = digits.length === 1 ? digits : `${digits[0]}.${digits.slice(1)}`;
  const exponent = decimalPoint - 1;
  const exponentText = String(Math.abs(exponent)).padStart(2, "0");
  return `${sign}${mantissa}e${exponent < 0 ? "-" : "+"}${exponentText}`;
}

/** Python's `ensure_ascii` string literal: every code unit outside space..`~` escaped. */
function asciiString(text: string): string {
  let out = '"';
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0x20 && c <= 0x7e && c !== 0x22 && c !== 0x5c) continue;
    out += text.slice(start, i) + escapeUnit(c);
    start = i + 1;
  }
  return out + text.slice(start) + '"';
}

const SHORT_ESCAPES: Readonly<Record<number, string>> = {
  0x22: '\\"',
  0x5c: "\\\\",
  0x08: "\\b",
  0x0c: "\\f",
  0x0a: "\\n",
  0x0d: "\\r",
  0x09: "\\t",
};

function escapeUnit(unit: number): string {
  // Python writes lowercase hex, and a character beyond U+FFFF as its surrogate pair: exactly the
  // UTF-16 code units a JavaScript string already holds.
  return SHORT_ESCAPES[unit] ?? `\\u${unit.toString(16).padStart(4, "0")}`;
}

function isPlainObject(value: object): value is Record<string, unknown> {
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/**
 * A value with no Python JSON form, found deep in {@link write}: it collects the path while it
 * unwinds, so the walk builds no path strings until one is needed.
 */
class NoPythonForm {
  /** Path segments, innermost first. */
  readonly trail: (string | number)[] = [];
  constructor(readonly what: string) {}
}

function write(value: unknown): string {
  switch (typeof value) {
    case "string":
      return asciiString(value);
    case "boolean":
      return value ? "true" : "false";
    case "bigint":
      return value.toString();
    case "number":
      // -0 cannot be a Python int, so it is the float -0.0.
      return Number.isSafeInteger(value) && !Object.is(value, -0)
        ? String(value)
        : pythonFloatJson(value);
    case "object": {
      if (value === null) return "null";
      if (value instanceof PyFloat) return pythonFloatJson(value.value);
      if (Array.isArray(value)) {
        let out = "[";
        for (let i = 0; i < value.length; i++) {
          try {
            out += (i > 0 ? "," : "") + write(value[i]);
          } catch (error) {
            if (error instanceof NoPythonForm) error.trail.push(i);
            throw error;
          }
        }
        return out + "]";
      }
      if (!isPlainObject(value)) break;
      const keys = Object.keys(value).sort(compareCodePoints);
      let out = "{";
      for (let i = 0; i < keys.length; i++) {
        const key = keys[i] as string;
        try {
          out += `${i > 0 ? "," : ""}${asciiString(key)}:${write(value[key])}`;
        } catch (error) {
          if (error instanceof NoPythonForm) error.trail.push(key);
          throw error;
        }
      }
      return out + "}";
    }
  }
  throw new NoPythonForm(describe(value));
}

function describe(value: unknown): string {
  if (value === undefined) return "undefined";
  if (typeof value === "object" && value !== null) return "an object with a non-plain prototype";
  return `a ${typeof value}`;
}

/**
 * Serializes `value` exactly as Python's
 * `json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)` would serialize
 * the equivalent Python value.
 *
 * Rules: keys sorted by code point at every level; no whitespace; every character outside
 * printable ASCII escaped as lowercase `\uXXXX` (astral characters as surrogate pairs); `\"`,
 * `\\`, `\b`, `\f`, `\n`, `\r`, `\t` short escapes; ints (safe-integer numbers, bigints) in
 * decimal; floats (other numbers, {@link PyFloat}) as Python's `repr` ({@link pythonFloatJson}).
 * Accepts null, booleans, numbers, bigints, strings, {@link PyFloat}, arrays and plain objects;
 * anything else throws {@link CaptureError} `invalid_wire_value`.
 *
 * @example
 * pythonJson({ b: [1, pyFloat(2)], a: "é" }); // '{"a":"\\u00e9","b":[1,2.0]}'
 */
export function pythonJson(value: unknown): string {
  try {
    return write(value);
  } catch (error) {
    if (!(error instanceof NoPythonForm)) throw error;
    const path = error.trail
      .reverse()
      .reduce<string>(
        (at, part) => (typeof part === "number" ? `${at}[${part}]` : `${at}.${part}`),
        "$",
      );
    throw new CaptureError("invalid_wire_value", `${path}: ${error.what} has no Python JSON form`);
  }
}
