/**
 * pythonJson reproduces `json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=True)`.
 * Expected strings are derived by hand from Python's rules: `repr(float)` (shortest digits; fixed
 * notation for decimal exponents -4..15 with `.0` on integral values; otherwise `d.ddde±XX`),
 * lowercase `\uXXXX` for everything outside printable ASCII, keys in code point order.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  compareCodePoints,
  pyFloat,
  pythonFloatJson,
  pythonJson,
} from "#sdk/capture/python-json.js";
import { expectReason } from "./helpers.js";

describe("pythonFloatJson (Python repr of a float)", () => {
  it.each([
    [1, "1.0"],
    [0.5, "0.5"],
    [-2.5, "-2.5"],
    [0.1 + 0.2, "0.30000000000000004"],
    [123456789.125, "123456789.125"],
    [0.0001, "0.0001"],
    [0.00001, "1e-05"],
    [0.000123, "0.000123"],
    [1.23e-7, "1.23e-07"],
    [1e15, "1000000000000000.0"],
    [2 ** 53, "9007199254740992.0"],
    [1e16, "1e+16"],
    [1.5e16, "1.5e+16"],
    [1e22, "1e+22"],
    [1e100, "1e+100"],
    [1.5e300, "1.5e+300"],
    [5e-324, "5e-324"],
    [1.7976931348623157e308, "1.7976931348623157e+308"],
    [0, "0.0"],
    [-0, "-0.0"],
    [NaN, "NaN"],
    [Infinity, "Infinity"],
    [-Infinity, "-Infinity"],
  ])("%s is written %s", (value, expected) => {
    expect(pythonFloatJson(value)).toBe(expected);
  });

  it("round-trips every finite double", () => {
    fc.assert(
      fc.property(fc.double({ noNaN: true, noDefaultInfinity: true }), (x) => {
        expect(Object.is(Number(pythonFloatJson(x)), x)).toBe(true);
      }),
    );
  });
});

describe("pythonJson", () => {
  it("writes ints as ints and floats as Python floats", () => {
    expect(pythonJson([1, -3, 0, pyFloat(1), pyFloat(-0), 2.5, 1e20, 2n ** 64n, -0])).toBe(
      "[1,-3,0,1.0,-0.0,2.5,1e+20,18446744073709551616,-0.0]",
    );
  });

  it("escapes everything outside printable ASCII as lowercase \\uXXXX", () => {
    expect(pythonJson("é😀\x7f\u2028\ufeff")).toBe('"\\u00e9\\ud83d\\ude00\\u007f\\u2028\\ufeff"');
  });

  it("uses Python's short escapes and leaves the slash alone", () => {
    expect(pythonJson('a"b\\c\n\t\r\b\f/<>&')).toBe('"a\\"b\\\\c\\n\\t\\r\\b\\f/<>&"');
    expect(pythonJson("\x00\x1f\x0b")).toBe('"\\u0000\\u001f\\u000b"');
  });

  it("sorts keys at every level and writes no whitespace", () => {
    expect(pythonJson({ z: [{ b: null, a: true }], a: { d: false }, B: "x" })).toBe(
      '{"B":"x","a":{"d":false},"z":[{"a":true,"b":null}]}',
    );
  });

  it("sorts keys by code point, not UTF-16 code unit", () => {
    // U+FFFF < U+10000 in Python; as UTF-16, "\ud800\udc00" sorts first.
    expect(pythonJson({ "\u{10000}": 2, "\uffff": 1 })).toBe('{"\\uffff":1,"\\ud800\\udc00":2}');
  });

  it("writes NaN and the infinities as Python does (allow_nan)", () => {
    expect(pythonJson([NaN, Infinity, pyFloat(-Infinity)])).toBe("[NaN,Infinity,-Infinity]");
  });

  it.each([
    ["undefined", undefined],
    ["a function", () => 1],
    ["a Map", new Map()],
    ["a Date", new Date(0)],
    ["a symbol", Symbol("s")],
  ])("refuses %s", (_name, value) => {
    expectReason(() => pythonJson({ a: [value] }), "invalid_wire_value");
  });

  it("is JSON that parses back to the same integers, strings and structure", () => {
    const value = fc.letrec((tie) => ({
      node: fc.oneof(
        { depthSize: "small" },
        fc.constant(null),
        fc.boolean(),
        fc.integer(),
        fc.string({ unit: "binary" }),
        fc.array(tie("node"), { maxLength: 4 }),
        fc.dictionary(fc.string({ unit: "binary" }), tie("node"), { maxKeys: 4 }),
      ),
    })).node;
    fc.assert(
      fc.property(value, (v) => {
        expect(JSON.parse(pythonJson(v))).toEqual(v);
        expect(pythonJson(v)).toMatch(/^[\x20-\x7e]*$/);
      }),
    );
  });
});

describe("pythonJson refusals", () => {
  it("names the path of a value with no Python JSON form", () => {
    expect(() => pythonJson({ a: [1, { b: undefined }] })).toThrow(
      "$.a[1].b: undefined has no Python JSON form",
    );
    expect(() => pythonJson([new Date(0)])).toThrow(
      "$[0]: an object with a non-plain prototype has no Python JSON form",
    );
  });
});

describe("compareCodePoints", () => {
  /** The reference: compare the strings' code point sequences. */
  function byCodePoints(a: string, b: string): number {
    const x = [...a].map((c) => c.codePointAt(0) as number);
    const y = [...b].map((c) => c.codePointAt(0) as number);
    for (let i = 0; i < Math.min(x.length, y.length); i++) {
      if (x[i] !== y[i]) return (x[i] as number) < (y[i] as number) ? -1 : 1;
    }
    return x.length === y.length ? 0 : x.length < y.length ? -1 : 1;
  }

  it("agrees with a comparison of code points on any strings, lone surrogates included", () => {
    const unit = fc.oneof(
      fc.constantFrom(
        "a",
        "b",
        "\ud7ff",
        "\ud800",
        "\udbff",
        "\udc00",
        "\udfff",
        "\ue000",
        "\uffff",
      ),
      fc.string({ unit: "binary", maxLength: 1 }),
    );
    const text = fc.array(unit, { maxLength: 6 }).map((parts) => parts.join(""));
    fc.assert(
      fc.property(text, text, (a, b) => {
        expect(compareCodePoints(a, b)).toBe(byCodePoints(a, b));
      }),
      { numRuns: 2000 },
    );
  });

  it("orders as Python orders str", () => {
    const keys = ["b", "\u{1F600}", "a", "\uffff", "", "ab", "\ue000"];
    expect([...keys].sort(compareCodePoints)).toEqual([
      "",
      "a",
      "ab",
      "b",
      "\ue000",
      "\uffff",
      "\u{1F600}",
    ]);
  });
});
