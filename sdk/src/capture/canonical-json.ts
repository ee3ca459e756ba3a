/**
 * The canonical JSON the fingerprints hash: byte for byte what Python's `orjson.dumps(value,
 * option=OPT_SORT_KEYS)` produces. It differs from {@link pythonJson}: text stays UTF-8 (only `"`,
 * `\` and control characters are escaped), floats use Rust `ryu` layout (`1e-7`, `1e16`,
 * `0.00001`), NaN and ±Infinity become `null`, and integers must fit 64 bits.
 *
 * @module
 */
import { CaptureError } from "./capture-error.js";
import { PyFloat, compareCodePoints, decimalDigits } from "./python-json.js";

const MIN_I64 = -(2n ** 63n);
const MAX_U64 = 2n ** 64n - 1n;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * A float as orjson writes it: `ryu` shortest digits, fixed notation for decimal-point positions
 * -4 to 16 (`1.0`, `0.00001`, `1e16` is the first exponent form), else `1e-7` / `1.5e300` with no
 * `+` and no padding; non-finite values are `null`.
 *
 * @example
 * ryuFloatJson(1); // "1.0"
 * ryuFloatJson(1e-7); // "1e-7"
 */
export function ryuFloatJson(x: number): string {
  if (!Number.isFinite(x)) return "null";
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const sign = x < 0 ? "-" : "";
  const { digits, decimalPoint: kk } = decimalDigits(Math.abs(x));
  const length = digits.length;
  if (kk >= length && kk <= 16) return `${sign}${digits}${"0".repeat(kk - length)}.0`;
  if (kk > 0 && kk <= 16) return `${sign}${digits.slice(0, kk)}.${digits.slice(kk)}`;
  if (kk > -5 && kk <= 0) return `${sign}0.${"0".repeat(-kk)}${digits}`;
  const mantissa = length === 1 ? digits : `${digits[0]}.${digits.slice(1)}`;
  return `${sign}${mantissa}e${kk - 1}`;
}

function fail(path: string, what: string): never {
  throw new CaptureError(
    "invalid_fingerprint_input",
    `${path}: ${what} has no canonical JSON form`,
  );
}

function writeString(text: string, path: string): string {
  // orjson refuses text that is not valid UTF-8; JSON.stringify escapes exactly orjson's set
  // (quote, backslash, control characters; \b \t \n \f \r short, the rest \u00xx lowercase).
  if (LONE_SURROGATE.test(text)) fail(path, "a string with a lone surrogate");
  return JSON.stringify(text);
}

function write(value: unknown, path: string): string {
  switch (typeof value) {
    case "string":
      return writeString(value, path);
    case "boolean":
      return value ? "true" : "false";
    case "bigint":
      if (value < MIN_I64 || value > MAX_U64) fail(path, "an integer beyond 64 bits");
      return value.toString();
    case "number":
      return Number.isSafeInteger(value) && !Object.is(value, -0)
        ? String(value)
        : ryuFloatJson(value);
    case "undefined":
      // A missing Python dict value reads as None.
      return "null";
    case "object": {
      if (value === null) return "null";
      if (value instanceof PyFloat) return ryuFloatJson(value.value);
      if (Array.isArray(value)) {
        return `[${value.map((item, i) => write(item, `${path}[${i}]`)).join(",")}]`;
      }
      const proto: unknown = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) break;
      const record = value as Record<string, unknown>;
      const keys = Object.keys(record).sort(compareCodePoints);
      return `{${keys.map((key) => `${writeString(key, path)}:${write(record[key], `${path}.${key}`)}`).join(",")}}`;
    }
  }
  return fail(path, `a ${typeof value}`);
}

/**
 * Serializes `value` as the fingerprints' canonical JSON (orjson with sorted keys): compact, keys
 * sorted by code point, UTF-8 text. Ints are safe-integer numbers and bigints (64-bit range);
 * floats are other numbers and {@link PyFloat}. Throws {@link CaptureError}
 * `invalid_fingerprint_input` for values orjson refuses (lone surrogates, integers beyond 64 bits,
 * non-JSON objects).
 *
 * @example
 * canonicalJson({ b: 1, a: [true, null] }); // '{"a":[true,null],"b":1}'
 */
export function canonicalJson(value: unknown): string {
  return write(value, "$");
}
