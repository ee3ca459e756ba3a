import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { closestChoice, didYouMean, editDistance } from "#sdk/util/did-you-mean.js";

describe("edit distance", () => {
  it("counts insertions, deletions, substitutions and swapped neighbours as one edit each", () => {
    expect(editDistance("resource", "resources")).toBe(1);
    expect(editDistance("resources", "resource")).toBe(1);
    expect(editDistance("modle", "model")).toBe(1);
    expect(editDistance("prot", "port")).toBe(1);
    expect(editDistance("agent", "agant")).toBe(1);
    expect(editDistance("", "abc")).toBe(3);
    expect(editDistance("kitten", "sitting")).toBe(3);
  });

  it("law: is zero exactly between equal strings, and symmetric", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 12 }), fc.string({ maxLength: 12 }), (a, b) => {
        expect(editDistance(a, b) === 0).toBe(a === b);
        expect(editDistance(a, b)).toBe(editDistance(b, a));
      }),
    );
  });
});

describe("the closest choice", () => {
  const kinds = ["environment", "agent", "resources", "model", "backend"];

  it("suggests a choice one typo away, ignoring case", () => {
    expect(closestChoice("resource", kinds)).toBe("resources");
    expect(closestChoice("Agent", kinds)).toBe("agent");
    expect(closestChoice("enviroment", kinds)).toBe("environment");
    expect(didYouMean("resource", kinds)).toBe(" (did you mean 'resources'?)");
  });

  it("suggests nothing for a word that is not a typo of any choice", () => {
    expect(closestChoice("database", kinds)).toBeNull();
    expect(closestChoice("x", ["abc"])).toBeNull();
    expect(didYouMean("database", kinds)).toBe("");
  });
});
