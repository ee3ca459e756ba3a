/** `withFields` builds what an object spread builds, for any JSON objects. */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { decodeJson } from "#sdk/json/json-decode.js";
import { withFields } from "#sdk/util/with-fields.js";

const object = fc.dictionary(
  fc.oneof(fc.string(), fc.constantFrom("__proto__", "constructor", "a", "b", "0", "1")),
  fc.jsonValue({ maxDepth: 2 }),
);

describe("withFields", () => {
  it("equals { ...base, ...extra }: the same own keys, in the same order, with the same values", () => {
    fc.assert(
      fc.property(object, object, (base, extra) => {
        const spread = { ...base, ...extra };
        const built = withFields(base, extra);
        expect(Object.keys(built)).toEqual(Object.keys(spread));
        for (const key of Object.keys(spread)) {
          expect(Object.getOwnPropertyDescriptor(built, key)?.value).toBe(
            (spread as Record<string, unknown>)[key],
          );
        }
        expect(Object.getPrototypeOf(built)).toBe(Object.prototype);
      }),
    );
  });

  it("keeps a decoded __proto__ key an own property and leaves the prototype alone", () => {
    const base = decodeJson('{"__proto__": {"polluted": true}, "a": 1}') as Record<string, unknown>;
    const built = withFields(base, { b: 2 }) as Record<string, unknown>;
    expect(Object.keys(built)).toEqual(["__proto__", "a", "b"]);
    expect(Object.getPrototypeOf(built)).toBe(Object.prototype);
    expect(built.polluted).toBeUndefined();
    expect(JSON.stringify(built)).toBe('{"__proto__":{"polluted":true},"a":1,"b":2}');
  });
});
