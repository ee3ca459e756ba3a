import { Writable } from "node:stream";
import fc from "fast-check";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { JsonDepthScanner, MAX_BODY_DEPTH } from "#sdk/server/json-depth.js";
import { encodeJson, type JsonValue } from "#sdk/json/json-value.js";
import { decodeJson } from "#sdk/json/json-decode.js";
import { JsonPayloadSchema } from "#sdk/json/json-payload-schema.js";

/** The nesting depth of a parsed JSON value (the outermost container is level 1). */
function depthOf(value: unknown): number {
  if (value === null || typeof value !== "object") return 0;
  const children = Array.isArray(value) ? value : Object.values(value);
  return 1 + Math.max(0, ...children.map(depthOf));
}

/** Feeds `bytes` to a fresh scanner in pieces cut at `cuts`; whether it stayed within `max`. */
function scan(bytes: Uint8Array, max: number, cuts: readonly number[] = []): boolean {
  const scanner = new JsonDepthScanner(max);
  const at = [...new Set(cuts.map((cut) => cut % (bytes.length + 1)))].sort((a, b) => a - b);
  let from = 0;
  for (const to of [...at, bytes.length]) {
    if (!scanner.feed(bytes.subarray(from, to))) return false;
    from = to;
  }
  return true;
}

/** Strings that look like JSON structure: brackets, quotes, backslashes, non-ASCII. */
const tricky = fc
  .array(fc.constantFrom("[", "]", "{", "}", '"', "\\", '\\"', "a", "é", "😀", "\u2028", ":", ","))
  .map((parts) => parts.join(""));

const jsonValue = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.constantFrom(null, true, false, 0, -1.5, 1e300),
    tricky,
    fc.array(tie("value"), { maxLength: 4 }),
    fc.dictionary(tricky, tie("value"), { maxKeys: 4 }),
  ),
})).value;

/** A value nested `depth` levels deep, with tricky strings on the way. */
function deep(depth: number): unknown {
  let value: unknown = '"]]}}\\';
  for (let i = 0; i < depth; i++) value = i % 2 === 0 ? [value, "[{"] : { "}]": value };
  return value;
}

describe("JsonDepthScanner", () => {
  it("accepts a text exactly when its nesting is within the limit, however it is cut", () => {
    fc.assert(
      fc.property(
        jsonValue,
        fc.integer({ min: 0, max: 6 }),
        fc.array(fc.nat(), { maxLength: 6 }),
        (value, max, cuts) => {
          const bytes = Buffer.from(JSON.stringify(value));
          expect(scan(bytes, max, cuts)).toBe(depthOf(value) <= max);
        },
      ),
      { numRuns: 500 },
    );
  });

  it(`takes ${MAX_BODY_DEPTH} levels and refuses one more, one byte at a time too`, () => {
    const within = Buffer.from(JSON.stringify(deep(MAX_BODY_DEPTH)));
    const past = Buffer.from(JSON.stringify(deep(MAX_BODY_DEPTH + 1)));
    const everyByte = Array.from({ length: past.length }, (_, i) => i);
    expect(scan(within, MAX_BODY_DEPTH)).toBe(true);
    expect(scan(within, MAX_BODY_DEPTH, everyByte)).toBe(true);
    expect(scan(past, MAX_BODY_DEPTH)).toBe(false);
    expect(scan(past, MAX_BODY_DEPTH, everyByte)).toBe(false);
  });

  it("reads an escaped backslash before a closing quote as the string's end", () => {
    // "a\\" closes the string; what follows is structure again.
    expect(scan(Buffer.from('["a\\\\", [[1]]]'), 2)).toBe(false);
    // "a\"[[" keeps the string open past the escaped quote: its brackets are text.
    expect(scan(Buffer.from('["a\\"[[", 1]'), 1)).toBe(true);
  });
});

describe(`a body nested ${MAX_BODY_DEPTH} levels deep`, () => {
  it("survives schema validation, logging and the checkpoint store's codec, wrapped in a record", () => {
    const body = deep(MAX_BODY_DEPTH) as JsonValue;
    expect(JsonPayloadSchema.parse(body)).toBe(body);
    expect(z.looseObject({ body: z.unknown() }).parse({ body })).toEqual({ body });
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(chunk.toString("utf8"));
        done();
      },
    });
    pino(sink).info({ body }, "deep");
    expect((JSON.parse(lines[0] ?? "{}") as { body: unknown }).body).toEqual(body);
    const record = { episode: { state: { request: body } } } as JsonValue;
    expect(decodeJson(encodeJson(record))).toEqual(record);
  });
});
