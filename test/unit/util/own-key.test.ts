import { describe, expect, it } from "vitest";
import { setOwnKey } from "#sdk/util/own-key.js";

describe("setOwnKey", () => {
  it("makes __proto__ an own enumerable key and leaves the prototype alone", () => {
    const target: Record<string, unknown> = {};
    setOwnKey(target, "__proto__", { polluted: true });
    expect(Object.getPrototypeOf(target)).toBe(Object.prototype);
    expect(Object.keys(target)).toEqual(["__proto__"]);
    expect(Object.getOwnPropertyDescriptor(target, "__proto__")).toEqual({
      value: { polluted: true },
      enumerable: true,
      writable: true,
      configurable: true,
    });
    expect((target as { polluted?: unknown }).polluted).toBeUndefined();
  });

  it("assigns every other key, names of Object.prototype members included, in order", () => {
    const target: Record<string, unknown> = {};
    for (const [key, value] of [
      ["b", 1],
      ["constructor", 2],
      ["a", 3],
      ["__proto__", 4],
    ] as const) {
      setOwnKey(target, key, value);
    }
    expect(Object.entries(target)).toEqual([
      ["b", 1],
      ["constructor", 2],
      ["a", 3],
      ["__proto__", 4],
    ]);
    expect(JSON.parse(JSON.stringify(target))).toEqual(target);
  });
});
