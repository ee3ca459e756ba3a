import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  encodeJsonPieces,
  MAX_JSON_DEPTH,
  NotJsonError,
  assertJsonValue,
  jsonValueNeedsExtended,
  encodeJson,
  type JsonValue,
} from "#sdk/json/json-value.js";
import { JsonSyntaxError, decodeJson } from "#sdk/json/json-decode.js";
import { JsonPayloadSchema, withDecodedPayloadsTrusted } from "#sdk/json/json-payload-schema.js";

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

const MAX_SAFE = Number.MAX_SAFE_INTEGER;

/** Short rendering of a value for failure messages (handles -0, bigint, NaN). */
function show(v: unknown): string {
  if (typeof v === "bigint") return `${v}n`;
  if (Object.is(v, -0)) return "-0";
  if (typeof v === "number" || v === undefined) return String(v);
  if (typeof v === "object" && v !== null) return Array.isArray(v) ? "an array" : "an object";
  return JSON.stringify(v) ?? String(v);
}

/**
 * Strict structural comparison: Object.is for numbers (NaN, -0), exact bigints, arrays by
 * index, plain objects by own key order. Returns a description of the first difference.
 */
function diff(actual: unknown, expected: unknown, path = "$"): string | null {
  const mismatch = `${path}: expected ${show(expected)}, got ${show(actual)}`;
  if (typeof expected === "number") {
    return typeof actual === "number" && Object.is(actual, expected) ? null : mismatch;
  }
  if (typeof expected !== "object" || expected === null) {
    return typeof actual === typeof expected && actual === expected ? null : mismatch;
  }
  if (typeof actual !== "object" || actual === null) return mismatch;
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual)) return mismatch;
    if (actual.length !== expected.length) {
      return `${path}: expected length ${expected.length}, got ${actual.length}`;
    }
    for (let i = 0; i < expected.length; i++) {
      const d = diff(actual[i], expected[i], `${path}[${i}]`);
      if (d !== null) return d;
    }
    return null;
  }
  if (Array.isArray(actual)) return mismatch;
  const proto: unknown = Object.getPrototypeOf(actual);
  if (proto !== Object.prototype && proto !== null) return `${path}: not a plain object`;
  const ek = Object.keys(expected);
  const ak = Object.keys(actual);
  if (JSON.stringify(ak) !== JSON.stringify(ek)) {
    return `${path}: expected keys ${JSON.stringify(ek)}, got ${JSON.stringify(ak)}`;
  }
  for (const k of ek) {
    const d = diff(
      (actual as Record<string, unknown>)[k],
      (expected as Record<string, unknown>)[k],
      `${path}[${JSON.stringify(k)}]`,
    );
    if (d !== null) return d;
  }
  return null;
}

/** Builds a plain object with own data properties only ("__proto__" included). */
function plainObject(
  entries: [string, JsonValue][],
  nullProto: boolean,
): Record<string, JsonValue> {
  const obj = (nullProto ? Object.create(null) : {}) as Record<string, JsonValue>;
  for (const [k, v] of entries) {
    Object.defineProperty(obj, k, {
      value: v,
      writable: true,
      enumerable: true,
      configurable: true,
    });
  }
  return obj;
}

/** Independent, naive reference encoder: the oracle for encodeJson's optimized paths. */
function referenceEncode(v: JsonValue): string {
  if (v === null) return "null";
  switch (typeof v) {
    case "boolean":
      return String(v);
    case "string":
      return JSON.stringify(v);
    case "bigint":
      return v.toString();
    case "number":
      if (Number.isNaN(v)) return "NaN";
      if (v === Infinity) return "Infinity";
      if (v === -Infinity) return "-Infinity";
      if (Object.is(v, -0)) return "-0";
      return Math.abs(v) > MAX_SAFE ? v.toExponential() : JSON.stringify(v);
  }
  if (Array.isArray(v)) return `[${v.map(referenceEncode).join(",")}]`;
  const obj = v;
  return `{${Object.keys(obj)
    .map((k) => `${JSON.stringify(k)}:${referenceEncode(obj[k] as JsonValue)}`)
    .join(",")}}`;
}

function nestedArrays(levels: number, leaf: JsonValue = 1): JsonValue {
  let v: JsonValue = leaf;
  for (let i = 0; i < levels; i++) v = [v];
  return v;
}

function nestedObjects(levels: number, leaf: JsonValue = 1): JsonValue {
  let v: JsonValue = leaf;
  for (let i = 0; i < levels; i++) v = { a: v };
  return v;
}

function catchError(fn: () => unknown): unknown {
  try {
    fn();
  } catch (e) {
    return e;
  }
  throw new Error("expected the call to throw");
}

// ---------------------------------------------------------------------------------------------
// Arbitraries
// ---------------------------------------------------------------------------------------------

const numberArb: fc.Arbitrary<number> = fc.oneof(
  fc.double(), // includes NaN, ±Infinity, -0, subnormals, huge integers
  fc.maxSafeInteger(),
  fc.integer(),
  fc.constantFrom(
    NaN,
    Infinity,
    -Infinity,
    -0,
    0,
    0.1,
    1.5,
    1e20,
    -1e20,
    1e21,
    2 ** 53,
    -(2 ** 53),
    MAX_SAFE,
    -MAX_SAFE,
    5e-324,
    Number.MAX_VALUE,
  ),
);

/** Bigints outside the safe range: inside it they canonically decode as numbers. */
const bigintArb: fc.Arbitrary<bigint> = fc.oneof(
  fc.bigInt({ min: BigInt(MAX_SAFE) + 1n, max: 2n ** 300n }),
  fc.bigInt({ min: -(2n ** 300n), max: -BigInt(MAX_SAFE) - 1n }),
  fc.constantFrom(2n ** 53n, -(2n ** 53n), 2n ** 64n, -(2n ** 64n), 2n ** 70n, 10n ** 40n),
);

const stringArb: fc.Arbitrary<string> = fc.oneof(
  fc.string(),
  fc.string({ unit: "grapheme" }),
  fc.string({ unit: "binary" }), // any code point, lone surrogates included
  fc.constantFrom(
    "__proto__",
    "\n",
    "\r\n",
    "\t\u0000\u001f",
    "\u2028\u2029",
    '"\\/',
    "\ud800",
    "😀",
    "12345678901234567890",
    "NaN",
    "-Infinity",
    "",
  ),
);

const keyArb: fc.Arbitrary<string> = fc.oneof(
  stringArb,
  fc.nat().map(String), // integer-like keys reorder in JS objects
  fc.constantFrom(
    "__proto__",
    "constructor",
    "toString",
    "toJSON",
    "hasOwnProperty",
    "0",
    "1",
    "10",
    "-1",
    "01",
    "1.5",
    "4294967294",
    "4294967295",
  ),
);

const leafArb: fc.Arbitrary<JsonValue> = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  numberArb,
  bigintArb,
  stringArb,
);

const { value: jsonValueArb } = fc.letrec<{
  value: JsonValue;
  array: JsonValue[];
  object: Record<string, JsonValue>;
}>((tie) => ({
  value: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    leafArb,
    tie("array"),
    tie("object"),
  ),
  array: fc.array(tie("value"), { maxLength: 6 }),
  object: fc
    .tuple(
      fc.uniqueArray(fc.tuple(keyArb, tie("value")), { selector: (e) => e[0], maxLength: 6 }),
      fc.boolean(),
    )
    .map(([entries, nullProto]) => plainObject(entries, nullProto)),
}));

/** Long arrays, mostly plain with sparse extended elements: exercises run splitting. */
const longArrayArb: fc.Arbitrary<JsonValue[]> = fc.array(
  fc.oneof(
    { weight: 30, arbitrary: fc.integer() },
    { weight: 10, arbitrary: fc.double({ noNaN: true, noDefaultInfinity: true }) },
    { weight: 5, arbitrary: fc.string({ maxLength: 4 }) },
    { weight: 2, arbitrary: fc.constantFrom<JsonValue>(NaN, -0, Infinity, 1e20) },
    { weight: 2, arbitrary: bigintArb },
    { weight: 2, arbitrary: fc.array(fc.integer(), { maxLength: 3 }) },
    { weight: 2, arbitrary: fc.constant<JsonValue>([1, NaN]) },
    { weight: 1, arbitrary: fc.constant<JsonValue>({ x: 2n ** 60n }) },
  ),
  { maxLength: 120 },
);

/**
 * Standard JSON values on which native JSON is already lossless: -0 normalized away (written as
 * 0) and unsafe integers (rounded by JSON.parse, bigints for decodeJson) replaced.
 */
const standardJsonArb: fc.Arbitrary<JsonValue> = fc
  .jsonValue()
  .map(
    (v) =>
      JSON.parse(JSON.stringify(v), (_k, x: unknown) =>
        typeof x === "number" && Math.abs(x) > MAX_SAFE ? 0.25 : x,
      ) as JsonValue,
  );

// ---------------------------------------------------------------------------------------------
// Round trip
// ---------------------------------------------------------------------------------------------

describe("round trip", () => {
  it("decodeJson(encodeJson(v)) reproduces every canonical value exactly, key order included", () => {
    fc.assert(
      fc.property(jsonValueArb, (v) => {
        const text = encodeJson(v);
        const back = decodeJson(text);
        expect(diff(back, v)).toBeNull();
        expect(encodeJson(back)).toBe(text);
      }),
      { numRuns: 1000 },
    );
  });

  it("encodes long, mostly plain arrays exactly like a naive reference encoder", () => {
    fc.assert(
      fc.property(longArrayArb, (arr) => {
        const text = encodeJson(arr);
        expect(text).toBe(referenceEncode(arr));
        expect(diff(decodeJson(text), arr)).toBeNull();
      }),
      { numRuns: 300 },
    );
  });

  it("encodes every canonical value exactly like a naive reference encoder", () => {
    fc.assert(
      fc.property(jsonValueArb, (v) => {
        expect(encodeJson(v)).toBe(referenceEncode(v));
      }),
      { numRuns: 500 },
    );
  });

  it("never writes a raw line break, so one value fits one record line", () => {
    fc.assert(
      fc.property(jsonValueArb, (v) => {
        const text = encodeJson(v);
        expect(text).not.toMatch(/[\n\r]/);
      }),
      { numRuns: 300 },
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Encoding format
// ---------------------------------------------------------------------------------------------

describe("encodeJson format", () => {
  it("matches JSON.stringify byte for byte on standard JSON values", () => {
    fc.assert(
      fc.property(standardJsonArb, (v) => {
        expect(encodeJson(v)).toBe(JSON.stringify(v));
      }),
      { numRuns: 300 },
    );
  });

  it("writes compact JSON with keys in the object's own order", () => {
    expect(encodeJson({ b: 1, a: [true, null, "x"], 2: {}, 1: [] })).toBe(
      '{"1":[],"2":{},"b":1,"a":[true,null,"x"]}',
    );
  });

  it("writes NaN, Infinity, -Infinity and -0 as bare tokens", () => {
    expect(encodeJson([NaN, Infinity, -Infinity, -0, 0])).toBe("[NaN,Infinity,-Infinity,-0,0]");
    expect(encodeJson(NaN)).toBe("NaN");
    expect(encodeJson(-0)).toBe("-0");
    expect(encodeJson({ x: -Infinity })).toBe('{"x":-Infinity}');
  });

  it("writes bigints as their decimal digits", () => {
    expect(encodeJson(2n ** 70n)).toBe("1180591620717411303424");
    expect(encodeJson({ n: -(2n ** 64n) })).toBe('{"n":-18446744073709551616}');
  });

  it("writes unsafe integer-valued numbers in exponent form so they stay numbers", () => {
    expect(encodeJson(1e20)).toBe("1e+20");
    expect(encodeJson([2 ** 53])).toBe("[9.007199254740992e+15]");
    expect(encodeJson(MAX_SAFE)).toBe("9007199254740991");
  });

  it("keeps non-ASCII text unescaped and escapes line breaks", () => {
    expect(encodeJson({ é: "😀 ü\u2028" })).toBe('{"é":"😀 ü\u2028"}');
    expect(encodeJson("a\nb\r")).toBe('"a\\nb\\r"');
  });

  it("refuses a bigint inside the safe range, which would read back as a number", () => {
    expect(() => encodeJson(5n)).toThrow(NotJsonError);
    expect(() => encodeJson({ a: [-(2n ** 53n) + 1n] })).toThrow(/safe integer range/);
    expect(JsonPayloadSchema.safeParse({ x: 5n }).success).toBe(false);
    expect(decodeJson(encodeJson(2n ** 53n))).toBe(2n ** 53n);
  });

  it("writes an own __proto__ key as a normal key", () => {
    const obj = plainObject([["__proto__", { polluted: NaN }]], false);
    expect(encodeJson(obj)).toBe('{"__proto__":{"polluted":NaN}}');
  });

  it("accepts null-prototype objects and shared (non-circular) references", () => {
    const shared = { v: NaN };
    const bare = plainObject([["k", 1]], true);
    expect(encodeJson({ a: shared, b: shared, c: [shared, shared], d: bare })).toBe(
      '{"a":{"v":NaN},"b":{"v":NaN},"c":[{"v":NaN},{"v":NaN}],"d":{"k":1}}',
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Refusals
// ---------------------------------------------------------------------------------------------

describe("values that are not JSON", () => {
  class Point {
    x = 1;
  }
  class MyArray extends Array<number> {}
  const hole = [1, , 3]; // eslint-disable-line no-sparse-arrays

  const cases: [label: string, value: unknown, path: string, what: RegExp][] = [
    ["undefined at the root", undefined, "$", /undefined/],
    ["undefined as a property value", { a: undefined }, "$.a", /undefined/],
    ["undefined in an array", [1, undefined], "$[1]", /undefined/],
    ["an array hole", hole, "$[1]", /hole/],
    ["a function", { a: { f: () => 1 } }, "$.a.f", /function/],
    ["a symbol", [Symbol("s")], "$[0]", /symbol/],
    ["a Date", { a: [1, 2, new Date(0)] }, "$.a[2]", /a Date/],
    ["a Map", { m: new Map() }, "$.m", /a Map/],
    ["a Set", { "a b": { s: new Set([1]) } }, '$["a b"].s', /a Set/],
    ["a RegExp", [/x/], "$[0]", /a RegExp/],
    ["a Buffer", { b: Buffer.from("x") }, "$.b", /a Buffer/],
    ["a typed array", { b: new Uint8Array(2) }, "$.b", /a Uint8Array/],
    ["an ArrayBuffer", { b: new ArrayBuffer(2) }, "$.b", /an ArrayBuffer/],
    ["a class instance", { p: new Point() }, "$.p", /a Point/],
    ["an Array subclass", { p: MyArray.from([1]) }, "$.p", /a MyArray/],
    ["an object with a foreign prototype", { o: Object.create({ x: 1 }) }, "$.o", /prototype/],
    ["a boxed primitive", [new Number(1)], "$[0]", /a Number/],
    ["an Error", { e: new Error("x") }, "$.e", /an Error/],
    ["a Promise", { p: Promise.resolve(1) }, "$.p", /a Promise/],
  ];

  for (const [label, value, path, what] of cases) {
    it(`refuses ${label} with NotJsonError at ${path}`, () => {
      for (const fn of [() => encodeJson(value), () => assertJsonValue(value)]) {
        const e = catchError(fn);
        expect(e).toBeInstanceOf(NotJsonError);
        const err = e as NotJsonError;
        expect(err.name).toBe("NotJsonError");
        expect(err.path).toBe(path);
        expect(err.message).toContain("not JSON");
        expect(err.message).toContain(`${path}:`);
        expect(err.message).toMatch(what);
      }
    });
  }

  it("names the found kind and path in the message", () => {
    expect(() => encodeJson({ a: [1, 2, new Date(0)] })).toThrow("$.a[2]: a Date is not JSON");
  });

  it("refuses a circular structure and names where the cycle closes", () => {
    const root: Record<string, unknown> = { x: [] };
    (root.x as unknown[]).push({ back: root });
    const e = catchError(() => encodeJson(root)) as NotJsonError;
    expect(e).toBeInstanceOf(NotJsonError);
    expect(e.path).toBe("$.x[0].back");
    expect(e.message).toMatch(/circular reference.*not JSON/);
  });

  it("refuses a self-containing array", () => {
    const a: unknown[] = [];
    a.push(a);
    const e = catchError(() => assertJsonValue(a)) as NotJsonError;
    expect(e).toBeInstanceOf(NotJsonError);
    expect(e.path).toBe("$[0]");
  });

  it("narrows unknown to JsonValue once the assertion passes", () => {
    const input: unknown = { a: [1, NaN, 2n ** 70n] };
    assertJsonValue(input);
    const typed: JsonValue = input;
    expect(encodeJson(typed)).toBe('{"a":[1,NaN,1180591620717411303424]}');
  });
});

// ---------------------------------------------------------------------------------------------
// Depth
// ---------------------------------------------------------------------------------------------

describe("nesting depth", () => {
  it("limits nesting to 1000 levels", () => {
    expect(MAX_JSON_DEPTH).toBe(1000);
  });

  for (const levels of [400, 1000]) {
    // Plain trees decode natively; NaN and big integers send the text through the exact parser.
    it(`round-trips ${levels} levels of arrays and of objects, plain and extended`, () => {
      for (const v of [
        nestedArrays(levels),
        nestedObjects(levels),
        nestedArrays(levels, NaN),
        nestedObjects(levels, 2n ** 64n),
      ]) {
        const text = encodeJson(v);
        expect(diff(decodeJson(text), v)).toBeNull();
      }
    });
  }

  it("refuses 1001 levels when encoding", () => {
    const e = catchError(() => encodeJson(nestedArrays(1001))) as NotJsonError;
    expect(e).toBeInstanceOf(NotJsonError);
    expect(e.message).toMatch(/nested deeper than 1000 levels.*not JSON/);
    expect(e.path).toBe("$" + "[0]".repeat(1000));
  });

  it("refuses 5000 levels when encoding with NotJsonError, never a RangeError", () => {
    for (const v of [nestedArrays(5000), nestedObjects(5000), nestedArrays(5000, NaN)]) {
      for (const fn of [() => encodeJson(v), () => assertJsonValue(v)]) {
        const e = catchError(fn);
        expect(e).toBeInstanceOf(NotJsonError);
        expect((e as Error).message).toContain("nested deeper than 1000 levels");
      }
    }
  });

  it("refuses 1001 levels when decoding, on the fast and the slow path", () => {
    const text = "[".repeat(1001) + "]".repeat(1001);
    for (const t of [text, text.replace("[]", "[NaN]")]) {
      const e = catchError(() => decodeJson(t)) as JsonSyntaxError;
      expect(e).toBeInstanceOf(JsonSyntaxError);
      expect(e.offset).toBe(1000);
      expect(e.message).toContain("nested deeper than 1000 levels");
    }
  });

  it("refuses 5000 and 100000 levels when decoding with JsonSyntaxError, never a RangeError", () => {
    for (const levels of [5000, 100_000]) {
      const arrays = "[".repeat(levels) + "]".repeat(levels);
      const objects = '{"a":'.repeat(levels) + "1" + "}".repeat(levels);
      const unclosed = "[".repeat(levels);
      for (const t of [arrays, objects, unclosed, arrays.replace("[]", "[NaN]")]) {
        expect(catchError(() => decodeJson(t))).toBeInstanceOf(JsonSyntaxError);
      }
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Numbers
// ---------------------------------------------------------------------------------------------

describe("numbers and big integers", () => {
  it("round-trips 2n**70n and -(2n**64n) exactly", () => {
    for (const b of [2n ** 70n, -(2n ** 64n), 10n ** 400n]) {
      expect(decodeJson(encodeJson(b))).toBe(b);
      expect(decodeJson(encodeJson({ b }))).toEqual({ b });
    }
  });

  it("decodes an integer literal beyond the safe range to an exact bigint", () => {
    expect(decodeJson("12345678901234567890")).toBe(12345678901234567890n);
    expect(decodeJson("[9007199254740993]")).toEqual([9007199254740993n]);
    expect(decodeJson("-9007199254740992")).toBe(-9007199254740992n);
    expect(decodeJson("9007199254740992")).toBe(9007199254740992n);
  });

  it("decodes a safe integer literal to a number, even with 16 digits", () => {
    expect(decodeJson("9007199254740991")).toBe(MAX_SAFE);
    expect(decodeJson("-9007199254740991")).toBe(-MAX_SAFE);
    expect(decodeJson("[1234567890123456]")).toEqual([1234567890123456]);
  });

  it("decodes literals with a fraction or an exponent to numbers", () => {
    expect(decodeJson("1.0")).toBe(1);
    expect(decodeJson("1e20")).toBe(1e20);
    expect(decodeJson("1e+20")).toBe(1e20);
    expect(decodeJson("12345678901234567890.5")).toBe(Number("12345678901234567890.5"));
    expect(decodeJson("12345678901234567890e0")).toBe(Number("12345678901234567890"));
    expect(decodeJson("[1E400]")).toEqual([Infinity]);
  });

  it("round-trips the number 1e20 as a number, not a bigint", () => {
    expect(decodeJson(encodeJson(1e20))).toBe(1e20);
    expect(decodeJson(encodeJson([1e20, -1e21, 2 ** 60]))).toEqual([1e20, -1e21, 2 ** 60]);
  });

  it("decodes NaN, Infinity, -Infinity and -0", () => {
    const v = decodeJson("[NaN, Infinity, -Infinity, -0, 0]") as number[];
    expect(v.map((n) => (Object.is(n, -0) ? "-0" : String(n)))).toEqual([
      "NaN",
      "Infinity",
      "-Infinity",
      "-0",
      "0",
    ]);
    expect(Object.is(decodeJson("-0"), -0)).toBe(true);
    expect(Object.is((decodeJson("[-0]") as JsonValue[])[0], -0)).toBe(true);
  });

  it("keeps a big float exact when a long digit run elsewhere forces the exact parser", () => {
    expect(decodeJson('["12345678901234567890", 1e20]')).toEqual(["12345678901234567890", 1e20]);
    expect(decodeJson("[1e20, 12345678901234567890]")).toEqual([1e20, 12345678901234567890n]);
  });
});

// ---------------------------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------------------------

describe("decodeJson", () => {
  it("agrees with JSON.parse on standard JSON text, compact and pretty-printed", () => {
    fc.assert(
      fc.property(standardJsonArb, (v) => {
        for (const text of [JSON.stringify(v), JSON.stringify(v, null, 2)]) {
          expect(diff(decodeJson(text), JSON.parse(text))).toBeNull();
        }
      }),
      { numRuns: 300 },
    );
  });

  it("gives the same result on the native fast path and the exact slow path", () => {
    fc.assert(
      fc.property(standardJsonArb, fc.boolean(), (v, pretty) => {
        const text = pretty ? JSON.stringify(v, null, 2) : JSON.stringify(v);
        const fast = decodeJson(text);
        // The NaN token makes native JSON.parse unusable, so this text takes the custom parser.
        const slow = decodeJson(`[${text}, NaN]`) as JsonValue[];
        expect(diff(slow[0], fast)).toBeNull();
        expect(Number.isNaN(slow[1])).toBe(true);
      }),
      { numRuns: 300 },
    );
  });

  it("decodes text with long digit runs inside strings the same on both paths", () => {
    const text =
      '{"s":"12345678901234567890","n":12345678901234567890,"t":"x\\"1234567890123456789"}';
    const expected = {
      s: "12345678901234567890",
      n: 12345678901234567890n,
      t: 'x"1234567890123456789',
    };
    expect(diff(decodeJson(text), expected)).toBeNull();
    const withNaN = { s: expected.s, nan: NaN, n: expected.n, t: expected.t };
    expect(diff(decodeJson(text.replace('"n"', '"nan":NaN,"n"')), withNaN)).toBeNull();
    const onlyStrings = '["12345678901234567890", "a\\u00e9\\n", 1.5]';
    expect(diff(decodeJson(onlyStrings), JSON.parse(onlyStrings))).toBeNull();
  });

  it("keeps __proto__ an own data property and never changes the prototype", () => {
    for (const text of ['{"__proto__": {"polluted": true}}', '{"__proto__": {"polluted": NaN}}']) {
      const v = decodeJson(text) as Record<string, JsonValue>;
      expect(Object.getPrototypeOf(v)).toBe(Object.prototype);
      expect(Object.hasOwn(v, "__proto__")).toBe(true);
      expect(Object.keys(v)).toEqual(["__proto__"]);
      expect("polluted" in v).toBe(false);
      expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    }
  });

  it("lets a repeated key keep its first position and its last value, like JSON.parse", () => {
    for (const tail of ["", ',"z":NaN']) {
      const v = decodeJson(`{"a":1,"b":2,"a":3${tail}}`) as Record<string, JsonValue>;
      expect(Object.keys(v).slice(0, 2)).toEqual(["a", "b"]);
      expect(v.a).toBe(3);
    }
  });

  it("allows space, tab, CR and LF between tokens", () => {
    const v = decodeJson(' \t\r\n{ "a" :\n[ 1 ,\tNaN , "x" ] ,"b":\r-Infinity }\n ');
    expect(diff(v, { a: [1, NaN, "x"], b: -Infinity })).toBeNull();
  });

  it("decodes escapes, surrogate pairs and lone surrogates exactly", () => {
    const text = '["\\ud83d\\ude00", "\\ud800", "\\"\\\\\\/\\b\\f\\n\\r\\t", "\\u0041", NaN]';
    expect(diff(decodeJson(text), ["😀", "\ud800", '"\\/\b\f\n\r\t', "A", NaN])).toBeNull();
  });

  const malformed: string[] = [
    "",
    "   ",
    "01",
    "-01",
    "00",
    "-",
    "- 1",
    "--1",
    "+1",
    ".5",
    "1.",
    "1e",
    "1e+",
    "0x10",
    "1_000",
    "'a'",
    "[1,]",
    '{"a":1,}',
    "[,1]",
    "{,}",
    "[1 2]",
    "1 2",
    "[1]]",
    "[1] x",
    "[",
    "]",
    "{",
    '{"a":}',
    '{"a" 1}',
    "{a:1}",
    '{"a":1 "b":2}',
    '"abc',
    '"\\"',
    '"\u0001"',
    '"tab\there"',
    '"line\nbreak"',
    '"\\x"',
    '"\\u12g4"',
    '"\\u12"',
    "tru",
    "nul",
    "True",
    "nan",
    "infinity",
    "NaNx",
    "-Inf",
    "+Infinity",
    "[NaN,]",
    "NaN NaN",
    "\u00a01",
    "\ufeff1",
    "undefined",
  ];

  for (const text of malformed) {
    it(`refuses malformed text ${JSON.stringify(text)} with JsonSyntaxError`, () => {
      for (const t of [text, `[NaN,${text}]`]) {
        const e = catchError(() => decodeJson(t));
        expect(e).toBeInstanceOf(JsonSyntaxError);
        const err = e as JsonSyntaxError;
        expect(err.name).toBe("JsonSyntaxError");
        expect(err.offset).toBeGreaterThanOrEqual(0);
        expect(err.offset).toBeLessThanOrEqual(t.length);
        expect(err.message).toContain(`offset ${err.offset}`);
      }
    });
  }

  it("reports the offset where the text goes wrong", () => {
    const at = (t: string) => (catchError(() => decodeJson(t)) as JsonSyntaxError).offset;
    expect(at("[1,]")).toBe(3);
    expect(at("01")).toBe(1);
    expect(at('{"a":1} x')).toBe(8);
    expect(at('["ok", "\\q"]')).toBe(8);
    expect(at("")).toBe(0);
  });

  it("never throws anything but JsonSyntaxError on arbitrary or mutated text", () => {
    const jsonChars = fc.constantFrom(
      ..."{}[]\",:0123456789-+.eE \t\n\\/tfnrulsaNIiyb'u\u0000".split(""),
    );
    const mutated = fc
      .tuple(
        jsonValueArb,
        fc.array(
          fc.tuple(fc.nat(), fc.nat({ max: 3 }), fc.string({ maxLength: 3, unit: jsonChars })),
          {
            minLength: 1,
            maxLength: 3,
          },
        ),
      )
      .map(([v, edits]) => {
        let text = encodeJson(v);
        for (const [at, del, ins] of edits) {
          const i = at % (text.length + 1);
          text = text.slice(0, i) + ins + text.slice(i + del);
        }
        return text;
      });
    const texts = fc.oneof(
      fc.string(),
      fc.string({ unit: "binary" }),
      fc.string({ unit: jsonChars, maxLength: 40 }),
      mutated,
    );
    fc.assert(
      fc.property(texts, (text) => {
        let decoded: JsonValue;
        try {
          decoded = decodeJson(text);
        } catch (e) {
          expect(e).toBeInstanceOf(JsonSyntaxError);
          return;
        }
        // Whatever decodes is canonical: it survives another round trip unchanged.
        expect(diff(decodeJson(encodeJson(decoded)), decoded)).toBeNull();
      }),
      { numRuns: 2000 },
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Schema
// ---------------------------------------------------------------------------------------------

describe("JsonPayloadSchema", () => {
  it("passes the same reference through without copying", () => {
    const payload = { a: [1, NaN, 2n ** 70n, -0], b: { c: "x" } };
    expect(JsonPayloadSchema.parse(payload)).toBe(payload);
    const wrapped = z.object({ payload: JsonPayloadSchema }).parse({ payload });
    expect(wrapped.payload).toBe(payload);
    expect(JsonPayloadSchema.parse(null)).toBeNull();
    expect(JsonPayloadSchema.parse("s")).toBe("s");
  });

  it("accepts exactly what assertJsonValue accepts", () => {
    fc.assert(
      fc.property(jsonValueArb, (v) => {
        expect(JsonPayloadSchema.safeParse(v).success).toBe(true);
      }),
      { numRuns: 200 },
    );
  });

  it("fails with a custom issue whose message says not JSON and names the path", () => {
    const result = JsonPayloadSchema.safeParse({ a: [new Date(0)] });
    expect(result.success).toBe(false);
    const issue = result.error?.issues[0];
    expect(issue?.code).toBe("custom");
    expect(issue?.message).toContain("not JSON");
    expect(issue?.message).toContain("$.a[0]");
  });

  it("reports the payload's location inside an enclosing schema", () => {
    const schema = z.object({ payload: JsonPayloadSchema });
    const result = schema.safeParse({ payload: { f: () => 1 } });
    expect(result.success).toBe(false);
    expect(result.error?.issues[0]?.path).toEqual(["payload"]);
    expect(result.error?.issues[0]?.message).toMatch(/\$\.f: .*not JSON/);
  });

  it("refuses an undefined payload", () => {
    expect(JsonPayloadSchema.safeParse(undefined).success).toBe(false);
  });
});

describe("decoded payloads on restore", () => {
  it("are not checked again inside withDecodedPayloadsTrusted, and are checked outside it", () => {
    const date = new Date(0);
    expect(JsonPayloadSchema.safeParse(date).success).toBe(false);
    expect(withDecodedPayloadsTrusted(() => JsonPayloadSchema.safeParse(date).success)).toBe(true);
    expect(JsonPayloadSchema.safeParse(date).success).toBe(false);
  });
});

describe("encodeJsonPieces", () => {
  /** The pieces of `value`, always split (no value is small enough to be written whole). */
  function pieces(value: unknown): string[] {
    const out: string[] = [];
    encodeJsonPieces(value, (piece) => out.push(piece), -1);
    return out;
  }

  function defaultPieces(value: unknown): string[] {
    const out: string[] = [];
    encodeJsonPieces(value, (piece) => out.push(piece));
    return out;
  }

  it("emits pieces whose concatenation is exactly encodeJson", () => {
    fc.assert(
      fc.property(fc.oneof(jsonValueArb, longArrayArb, standardJsonArb), (value) => {
        expect(pieces(value).join("")).toBe(encodeJson(value));
        expect(defaultPieces(value).join("")).toBe(encodeJson(value));
      }),
      { numRuns: 300 },
    );
  });

  it("emits a small value as one piece and a large one in many", () => {
    const small = { episode_id: { rollout_id: "r", attempt: 0 }, x: [1, Number.NaN, "a"] };
    expect(defaultPieces(small)).toEqual([encodeJson(small)]);
    const large = { a: "x".repeat(40_000), b: "y".repeat(40_000) };
    expect(defaultPieces(large).length).toBeGreaterThan(1);
    expect(defaultPieces(large).join("")).toBe(encodeJson(large));
  });

  it("writes long strings as JSON.stringify would, escapes and surrogates included", () => {
    const longText = fc
      .tuple(
        fc.string({ unit: "binary", maxLength: 8 }),
        fc.constantFrom(
          "a",
          'say "hi"',
          "back\\slash",
          "line\nbreak",
          "\u0001",
          "é",
          "😀",
          "\ud800",
          "\udfff x",
        ),
        fc.integer({ min: 1000, max: 1100 }),
      )
      .map(([head, tail, n]) => head + "w".repeat(n) + tail);
    fc.assert(
      fc.property(longText, fc.constantFrom(0, 1, 2, 3, 4, 5), (text, depth) => {
        let value: JsonValue = text;
        for (let i = 0; i < depth; i++) value = i % 2 === 0 ? { k: value, n: i } : [i, value];
        expect(pieces(value).join("")).toBe(encodeJson(value));
        expect(pieces(value).join("")).toBe(JSON.stringify(value));
      }),
      { numRuns: 300 },
    );
  });

  it("writes every UTF-16 code unit inside a long string as JSON.stringify would", () => {
    const padding = "w".repeat(1100);
    const wrong: number[] = [];
    for (let unit = 0; unit <= 0xffff; unit++) {
      const text = padding + String.fromCharCode(unit);
      if (pieces(text).join("") !== JSON.stringify(text)) wrong.push(unit);
    }
    expect(wrong).toEqual([]);
  });

  it("splits a large record into pieces no larger than its parts", () => {
    const text = "x".repeat(60_000);
    const record = {
      episode_id: { rollout_id: "r", attempt: 0 },
      messages: [0, 1, 2, 3, 4].map((i) => ({ role: "user", content: `${i}${text}` })),
      token_ids: Array.from({ length: 10_000 }, (_, i) => i),
      logprobs: Array.from({ length: 5_000 }, (_, i) => (i % 2 === 0 ? -i / 7 : Number.NaN)),
    };
    const out = pieces(record);
    expect(out.join("")).toBe(encodeJson(record));
    expect(Math.max(...out.map((piece) => piece.length))).toBeLessThan(70_000);
  });

  it("emits nothing for a value that is not JSON", () => {
    const out: string[] = [];
    expect(() => encodeJsonPieces({ a: [1, new Date(0)] }, (piece) => out.push(piece))).toThrow(
      NotJsonError,
    );
    expect(out).toEqual([]);
  });
});

// ---------------------------------------------------------------------------------------------
// Cycles found by the depth limit
// ---------------------------------------------------------------------------------------------

/** The first refusal of a plain DFS that keeps its ancestors: the reference for where and what. */
function firstRefusal(
  value: unknown,
  path: string,
  ancestors: Set<object>,
  depth: number,
): { path: string; what: RegExp } | null {
  if (value === null || typeof value !== "object") return null;
  if (value instanceof Date) return { path, what: /a Date is not JSON/ };
  if (depth > MAX_JSON_DEPTH) return { path, what: /nested deeper than 1000 levels/ };
  if (ancestors.has(value)) return { path, what: /a circular reference is not JSON/ };
  ancestors.add(value);
  const entries: [string, unknown][] = Array.isArray(value)
    ? value.map((item, i) => [`[${i}]`, item])
    : Object.keys(value).map((key) => [
        /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`,
        (value as Record<string, unknown>)[key],
      ]);
  for (const [segment, child] of entries) {
    const found = firstRefusal(child, path + segment, ancestors, depth + 1);
    if (found !== null) return found;
  }
  ancestors.delete(value);
  return null;
}

/** Every container of a tree with its ancestors (itself included), in DFS order. */
function containersOf(value: unknown, above: object[] = []): { node: object; up: object[] }[] {
  if (value === null || typeof value !== "object") return [];
  const up = [...above, value];
  const children = Array.isArray(value) ? value : Object.values(value);
  return [{ node: value, up }, ...children.flatMap((child) => containersOf(child, up))];
}

describe("cycles and depth, told apart after the walk without ancestors", () => {
  it("names the same place and problem as a walk that keeps its ancestors (property)", () => {
    fc.assert(
      fc.property(
        jsonValueArb.filter((v) => v !== null && typeof v === "object"),
        fc.nat(),
        fc.nat(),
        fc.nat(),
        fc.boolean(),
        fc.boolean(),
        (tree, at, back, dateAt, withCycle, withDate) => {
          const containers = containersOf(tree);
          const add = (node: object, child: unknown): void => {
            if (Array.isArray(node)) node.push(child);
            else (node as Record<string, unknown>).zz_added = child;
          };
          if (withDate)
            add((containers[dateAt % containers.length] as { node: object }).node, new Date(0));
          if (withCycle) {
            const { node, up } = containers[at % containers.length] as {
              node: object;
              up: object[];
            };
            add(node, up[back % up.length]);
          }
          const expected = firstRefusal(tree, "$", new Set(), 1);
          if (expected === null) {
            expect(() => assertJsonValue(tree)).not.toThrow();
            return;
          }
          const error = catchError(() => assertJsonValue(tree));
          expect(error).toBeInstanceOf(NotJsonError);
          expect((error as NotJsonError).path).toBe(expected.path);
          expect((error as NotJsonError).message).toMatch(expected.what);
        },
      ),
      { numRuns: 400 },
    );
  });

  it("a cycle deep inside a long chain is still a cycle, and a chain past the limit is depth", () => {
    const chain: Record<string, unknown> = {};
    let tip = chain;
    for (let i = 0; i < 900; i++) tip = (tip.next = {}) as Record<string, unknown>;
    tip.back = chain;
    const cyclic = catchError(() => assertJsonValue(chain)) as NotJsonError;
    expect(cyclic.message).toMatch(/circular reference/);
    expect(cyclic.path).toBe(`$${".next".repeat(900)}.back`);
    delete tip.back;
    for (let i = 0; i < 200; i++) tip = (tip.next = {}) as Record<string, unknown>;
    const deep = catchError(() => assertJsonValue(chain)) as NotJsonError;
    expect(deep.message).toMatch(/nested deeper than 1000 levels/);
  });
});

describe("jsonValueNeedsExtended", () => {
  const special = fc.constantFrom<unknown>(
    NaN,
    Infinity,
    -Infinity,
    -0,
    2 ** 53,
    -(2 ** 60),
    2n ** 60n,
    -(2n ** 70n),
  );
  const tree = fc.letrec((tie) => ({
    value: fc.oneof(
      { depthSize: "small", withCrossShrink: true },
      fc.oneof(
        fc.constant(null),
        fc.boolean(),
        fc.string(),
        fc.integer(),
        fc.double({ noNaN: true, noDefaultInfinity: true }),
      ),
      { weight: 1, arbitrary: special },
      fc.array(tie("value"), { maxLength: 4 }),
      fc.dictionary(fc.string(), tie("value"), { maxKeys: 4 }),
    ),
  })).value;

  /** The reference: a number or bigint anywhere that JSON cannot write as it is. */
  function holdsExtended(value: unknown): boolean {
    if (typeof value === "bigint") return true;
    if (typeof value === "number") {
      const unsafeInteger = Number.isInteger(value) && !Number.isSafeInteger(value);
      return !Number.isFinite(value) || unsafeInteger || Object.is(value, -0);
    }
    if (value === null || typeof value !== "object") return false;
    return Object.values(value).some(holdsExtended);
  }

  it("tells a tree holding NaN, ±Infinity, -0, an unsafe integer or a bigint from plain JSON", () => {
    fc.assert(
      fc.property(tree, (value) => {
        expect(jsonValueNeedsExtended(value)).toBe(holdsExtended(value));
      }),
      { numRuns: 500 },
    );
  });

  it("refuses what is not JSON, as assertJsonValue does", () => {
    expect(() => jsonValueNeedsExtended({ a: new Date(0) })).toThrow(NotJsonError);
    expect(() => jsonValueNeedsExtended(undefined)).toThrow(NotJsonError);
  });
});
