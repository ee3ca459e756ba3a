/**
 * `decodeJsonLine` decodes a record line from its bytes piece by piece; it must answer exactly
 * as `decodeJson` of the line's text: the same value (key order, -0, NaN, bigints,
 * `__proto__` keys) or the same error. Small piece sizes make small lines take the walk.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { decodeJsonLine, decodeJsonLineIn } from "#sdk/json/json-line-decoder.js";
import { MAX_JSON_DEPTH, encodeJson, type JsonValue } from "#sdk/json/json-value.js";
import { decodeJson, decodedAsStandardJson } from "#sdk/json/json-decode.js";

type Outcome = { ok: true; value: JsonValue } | { ok: false; name: string; message: string };

function outcome(fn: () => JsonValue): Outcome {
  try {
    return { ok: true, value: fn() };
  } catch (error) {
    return { ok: false, name: (error as Error).name, message: (error as Error).message };
  }
}

/** Same value (own keys in the same order, Object.is on leaves) or same error. */
function expectSameOutcome(text: string, pieceBytes: number): void {
  // The reference is what the reader did before: decode the line's bytes, then its text.
  const bytes = Buffer.from(text, "utf8");
  const whole = outcome(() => decodeJson(bytes.toString("utf8")));
  const walked = outcome(() => decodeJsonLineIn(bytes, pieceBytes));
  if (whole.ok && walked.ok) {
    expectIdentical(walked.value, whole.value);
  } else {
    expect(walked).toEqual(whole);
  }
}

function expectIdentical(actual: JsonValue, expected: JsonValue): void {
  if (typeof expected !== "object" || expected === null) {
    expect(Object.is(actual, expected), `${String(actual)} vs ${String(expected)}`).toBe(true);
    return;
  }
  expect(Array.isArray(actual)).toBe(Array.isArray(expected));
  expect(Object.getPrototypeOf(actual)).toBe(Object.getPrototypeOf(expected));
  const keys = Reflect.ownKeys(expected as object);
  expect(Reflect.ownKeys(actual as object)).toEqual(keys);
  for (const key of keys) {
    expectIdentical(
      (actual as Record<string | symbol, JsonValue>)[key] as JsonValue,
      (expected as Record<string | symbol, JsonValue>)[key] as JsonValue,
    );
  }
}

const keyArb = fc.oneof(
  fc.string({ maxLength: 6 }),
  fc.constantFrom("__proto__", "constructor", "0", "10", "-1", 'a"b', "é", "\\"),
);
const leafArb: fc.Arbitrary<JsonValue> = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.integer(),
  fc.double(),
  fc.constantFrom<JsonValue>(NaN, Infinity, -Infinity, -0, 2n ** 64n, -(2n ** 70n)),
  fc.string({ unit: "binary", maxLength: 40 }),
  fc.string({ maxLength: 200 }),
);
const { value: valueArb } = fc.letrec<{ value: JsonValue }>((tie) => ({
  value: fc.oneof(
    { depthSize: "small" },
    leafArb,
    fc.array(tie("value"), { maxLength: 6 }),
    fc.array(fc.tuple(keyArb, tie("value")), { maxLength: 6 }).map((entries) => {
      const out: Record<string, JsonValue> = {};
      for (const [key, value] of entries) {
        Object.defineProperty(out, key, {
          value,
          enumerable: true,
          writable: true,
          configurable: true,
        });
      }
      return out;
    }),
  ),
}));

/** Valid texts: encoded values, some spread out with whitespace or holding duplicate keys. */
const textArb = fc.oneof(
  valueArb.map((v) => encodeJson(v)),
  fc.jsonValue().map((v) => JSON.stringify(v, null, 1).replaceAll("\n", " \r\t")),
  fc
    .tuple(fc.string({ maxLength: 3 }), valueArb, valueArb)
    .map(
      ([key, a, b]) =>
        `{${JSON.stringify(key)}:${encodeJson(a)} , ${JSON.stringify(key)} :${encodeJson(b)}}`,
    ),
);

/** One byte of a valid text replaced, or the text cut short. */
const brokenArb = fc
  .tuple(
    textArb,
    fc.nat(),
    fc.constantFrom("{", "}", "[", "]", '"', ",", ":", " ", "\\", "N", "0", "-", "x", "\u0001"),
  )
  .map(([text, at, ch]) => {
    const i = text.length === 0 ? 0 : at % text.length;
    return at % 5 === 0 ? text.slice(0, i) : text.slice(0, i) + ch + text.slice(i + 1);
  });

describe("decodeJsonLine", () => {
  it("answers every valid line exactly as decodeJson of its text, at any piece size", () => {
    fc.assert(
      fc.property(textArb, fc.integer({ min: 1, max: 64 }), (text, pieceBytes) => {
        expectSameOutcome(text, pieceBytes);
      }),
      { numRuns: 1500 },
    );
  });

  it("fails every broken line with the very error decodeJson gives", () => {
    fc.assert(
      fc.property(brokenArb, fc.integer({ min: 1, max: 64 }), (text, pieceBytes) => {
        expectSameOutcome(text, pieceBytes);
      }),
      { numRuns: 1500 },
    );
  });

  it("decodes invalid UTF-8 as the whole line's text would (replacement characters)", () => {
    fc.assert(
      fc.property(
        textArb,
        fc.nat(),
        fc.integer({ min: 0x80, max: 0xff }),
        fc.integer({ min: 1, max: 64 }),
        (text, at, byte, pieceBytes) => {
          const bytes = Buffer.from(text, "utf8");
          const i = bytes.length === 0 ? 0 : at % bytes.length;
          const broken = Buffer.concat([
            bytes.subarray(0, i),
            Buffer.from([byte]),
            bytes.subarray(i),
          ]);
          const whole = outcome(() => decodeJson(broken.toString("utf8")));
          const walked = outcome(() => decodeJsonLineIn(broken, pieceBytes));
          if (whole.ok && walked.ok) expectIdentical(walked.value, whole.value);
          else expect(walked).toEqual(whole);
        },
      ),
      { numRuns: 1000 },
    );
  });

  it("counts the enclosing containers when a deep piece is decoded on its own", () => {
    const pad = "x".repeat(5000);
    for (const inner of [MAX_JSON_DEPTH - 2, MAX_JSON_DEPTH - 1]) {
      // Depth of the innermost array: 1 (record) + 1 ("a") + inner.
      const text = `{"pad":"${pad}","a":{"b":${"[".repeat(inner)}${"]".repeat(inner)}}}`;
      expectSameOutcome(text, 4096);
    }
    expect(() =>
      decodeJsonLineIn(
        Buffer.from(`{"pad":"${pad}","a":{"b":${"[".repeat(999)}${"]".repeat(999)}}}`),
        4096,
      ),
    ).toThrow(/nested deeper than 1000/);
  });

  it("decodes a large record line (the walk's real size) like the whole-line decoder", () => {
    const record = {
      episode_id: { rollout_id: "r", attempt: 0 },
      payload: {
        files: [0, 1, 2].map((f) => ({
          path: `/f${f}`,
          content: `${f} ${'words and "quotes"\n'.repeat(4000)}`,
        })),
        tokens: Array.from({ length: 20_000 }, (_, k) => k * 7),
        logprobs: [NaN, -0, -Infinity, 0.5],
        big: 2n ** 80n,
      },
    };
    const text = encodeJson(record);
    expect(text.length).toBeGreaterThan(200_000);
    expectIdentical(decodeJsonLine(Buffer.from(text)), decodeJson(text));
  });
});

/** Whether a decoded value holds a bigint or a non-finite number anywhere. */
function holdsExtended(value: unknown): boolean {
  if (typeof value === "bigint") return true;
  if (typeof value === "number") return !Number.isFinite(value);
  if (value === null || typeof value !== "object") return false;
  return Object.values(value).some(holdsExtended);
}

describe("decodedAsStandardJson", () => {
  it("marks a natively decoded container, never one holding a bigint or a non-finite number", () => {
    const extendedTokens = fc.constantFrom("NaN", "-Infinity", "12345678901234567890", "1");
    fc.assert(
      fc.property(fc.json({ maxDepth: 3 }), extendedTokens, (text, token) => {
        const withToken = `{"v":${text},"w":[${token}]}`;
        const value = decodeJson(withToken);
        if (decodedAsStandardJson(value as object)) expect(holdsExtended(value)).toBe(false);
        if (token === "1") expect(decodedAsStandardJson(value as object)).toBe(true);
      }),
      { numRuns: 200, seed: 20261206 },
    );
    expect(decodedAsStandardJson({ a: 1 })).toBe(false);
  });
});
