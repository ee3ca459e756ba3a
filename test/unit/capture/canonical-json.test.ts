/**
 * The fingerprints' canonical JSON is orjson with sorted keys, and tool arguments are read with
 * Python's json.loads. Expected strings follow orjson's rules: UTF-8 text with only `"`, `\` and
 * control characters escaped, Rust ryu float layout, NaN/Infinity as null, 64-bit integers.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { canonicalJson, ryuFloatJson } from "#sdk/capture/canonical-json.js";
import { parsePythonJson } from "#sdk/capture/python-json-parse.js";
import { PyFloat, pyFloat } from "#sdk/capture/python-json.js";
import { expectReason } from "./helpers.js";

describe("ryuFloatJson (orjson floats)", () => {
  it.each([
    [1, "1.0"],
    [-2.5, "-2.5"],
    [0.0001, "0.0001"],
    [0.00001, "0.00001"],
    [0.000001, "1e-6"],
    [1.23e-7, "1.23e-7"],
    [1e15, "1000000000000000.0"],
    [1e16, "1e16"],
    [1.5e300, "1.5e300"],
    [0, "0.0"],
    [-0, "-0.0"],
    [NaN, "null"],
    [Infinity, "null"],
  ])("%s is written %s", (value, expected) => {
    expect(ryuFloatJson(value)).toBe(expected);
  });

  it("round-trips every finite double", () => {
    fc.assert(
      fc.property(fc.double({ noNaN: true, noDefaultInfinity: true }), (x) => {
        expect(Object.is(Number(ryuFloatJson(x)), x)).toBe(true);
      }),
    );
  });
});

describe("canonicalJson", () => {
  it("sorts keys, writes no whitespace and keeps text as UTF-8", () => {
    expect(canonicalJson({ b: [1, pyFloat(2)], a: "é😀\x7f", "\u{10000}": 0, "\uffff": 0 })).toBe(
      '{"a":"é😀\x7f","b":[1,2.0],"\uffff":0,"\u{10000}":0}',
    );
  });

  it("escapes only quote, backslash and control characters", () => {
    expect(canonicalJson('"\\\n\x00\x0b/')).toBe('"\\"\\\\\\n\\u0000\\u000b/"');
  });

  it("accepts 64-bit integers and refuses wider ones", () => {
    expect(canonicalJson([2n ** 64n - 1n, -(2n ** 63n)])).toBe(
      "[18446744073709551615,-9223372036854775808]",
    );
    expectReason(() => canonicalJson(2n ** 64n), "invalid_fingerprint_input");
    expectReason(() => canonicalJson(-(2n ** 63n) - 1n), "invalid_fingerprint_input");
  });

  it("refuses lone surrogates, as orjson refuses text that is not UTF-8", () => {
    expectReason(() => canonicalJson({ k: "\ud800" }), "invalid_fingerprint_input");
    expectReason(() => canonicalJson({ "\udc00": 1 }), "invalid_fingerprint_input");
  });

  it("refuses values that are not JSON", () => {
    expectReason(() => canonicalJson([new Date(0)]), "invalid_fingerprint_input");
  });
});

describe("parsePythonJson (json.loads)", () => {
  it("keeps floats as floats and ints as ints", () => {
    const parsed = parsePythonJson('{"f": 1.0, "e": 1E+2, "i": 1, "z": -0}') as Record<
      string,
      unknown
    >;
    expect(parsed.f).toEqual(new PyFloat(1));
    expect(parsed.e).toEqual(new PyFloat(100));
    expect(parsed.i).toBe(1);
    expect(Object.is(parsed.z, 0)).toBe(true);
    expect(canonicalJson(parsed)).toBe('{"e":100.0,"f":1.0,"i":1,"z":0}');
  });

  it("keeps integers beyond the safe range exact", () => {
    expect(parsePythonJson("123456789012345678901234567890")).toBe(123456789012345678901234567890n);
  });

  it("accepts NaN and the infinities, as Python does", () => {
    expect(canonicalJson(parsePythonJson("[NaN, Infinity, -Infinity]"))).toBe("[null,null,null]");
  });

  it("decodes escapes and keeps a lone surrogate", () => {
    expect(parsePythonJson('"\\u00e9\\ud83d\\ude00\\n\\/"')).toBe("é😀\n/");
    expect(parsePythonJson('"\\ud800"')).toBe("\ud800");
  });

  it("keeps __proto__ as an own key", () => {
    const parsed = parsePythonJson('{"__proto__": {"a": 1}}') as object;
    expect(Object.keys(parsed)).toEqual(["__proto__"]);
    expect(canonicalJson(parsed)).toBe('{"__proto__":{"a":1}}');
  });

  it.each([
    ["trailing data", "{} x"],
    ["a control character in a string", '"a\nb"'],
    ["a trailing comma", "[1,]"],
    ["single quotes", "{'a': 1}"],
    ["a leading zero", "01"],
    ["an empty text", ""],
    ["a bad escape", '"\\x"'],
    ["an unterminated string", '"abc'],
    ["a byte order mark", "\ufeff{}"],
  ])("refuses %s", (_name, text) => {
    expectReason(() => parsePythonJson(text), "invalid_wire_value");
  });

  it("accepts the whitespace Python's json accepts around values", () => {
    expect(canonicalJson(parsePythonJson(' \t\n\r{ "a" : [ 1 , 2 ] } \n'))).toBe('{"a":[1,2]}');
  });

  it("parses any JSON.stringify output to the values JSON.parse finds", () => {
    const plain = (v: unknown): unknown => {
      if (v instanceof PyFloat) return v.value;
      if (typeof v === "bigint") return Number(v);
      if (Array.isArray(v)) return v.map(plain);
      if (typeof v === "object" && v !== null) {
        return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
      }
      return v;
    };
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        const text = JSON.stringify(value);
        expect(plain(parsePythonJson(text))).toEqual(JSON.parse(text));
      }),
    );
  });
});
