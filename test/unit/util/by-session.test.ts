import { describe, expect, it } from "vitest";
import { ABSENT, sessionValue } from "#sdk/util/by-session.js";

describe("sessionValue", () => {
  it("reads a Map by key, a value under __proto__ included", () => {
    const values = new Map<string, unknown>([
      ["__proto__", 1],
      ["a", { n: 2 }],
    ]);
    expect(sessionValue(values, "__proto__")).toBe(1);
    expect(sessionValue(values, "a")).toEqual({ n: 2 });
    expect(sessionValue(values, "constructor")).toBe(ABSENT);
  });

  it("reads only own keys of a plain object: an inherited constructor or toString is absent", () => {
    const values: Record<string, unknown> = { a: 1 };
    expect(sessionValue(values, "a")).toBe(1);
    expect(sessionValue(values, "constructor")).toBe(ABSENT);
    expect(sessionValue(values, "toString")).toBe(ABSENT);
    expect(sessionValue(values, "__proto__")).toBe(ABSENT);
  });

  it("reads back a __proto__ assigned into {}, which set the prototype instead of a key", () => {
    const values: Record<string, unknown> = {};
    const state = { turns: 3 };
    values["__proto__"] = state;
    values["constructor"] = { turns: 1 };
    expect(Object.hasOwn(values, "__proto__")).toBe(false);
    expect(sessionValue(values, "__proto__")).toBe(state);
    expect(sessionValue(values, "constructor")).toEqual({ turns: 1 });
  });

  it("reads an own __proto__ key (Object.fromEntries, a computed key, a null-prototype object)", () => {
    expect(sessionValue(Object.fromEntries([["__proto__", 5]]), "__proto__")).toBe(5);
    expect(sessionValue({ ["__proto__"]: 6 }, "__proto__")).toBe(6);
    const bare = Object.create(null) as Record<string, unknown>;
    expect(sessionValue(bare, "__proto__")).toBe(ABSENT);
    bare["__proto__"] = 7;
    expect(sessionValue(bare, "__proto__")).toBe(7);
  });
});
