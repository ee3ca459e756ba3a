import { describe, expect, it } from "vitest";
import { rolloutPath, splitRolloutPath } from "#sdk/identity/rollout-prefix.js";

describe("rollout path prefix", () => {
  it("prefixes a path with its capture key", () => {
    expect(rolloutPath("r-a1", "/v1/responses")).toBe("/ng-rollout/r-a1/v1/responses");
    expect(rolloutPath("r", "verify")).toBe("/ng-rollout/r/verify");
  });

  it("splits a prefixed path into key and rest", () => {
    expect(splitRolloutPath("/ng-rollout/r-a1/v1/responses")).toEqual({
      captureKey: "r-a1",
      rest: "/v1/responses",
    });
    expect(splitRolloutPath("/ng-rollout/r/")).toEqual({ captureKey: "r", rest: "/" });
  });

  it("does not treat the key alone, without a following slash, as a prefixed path", () => {
    expect(splitRolloutPath("/ng-rollout/r")).toEqual({ malformed: true, captureKey: "r" });
  });

  it("reports a malformed key", () => {
    expect(splitRolloutPath("/ng-rollout/.x/verify")).toEqual({
      malformed: true,
      captureKey: ".x",
    });
    expect(splitRolloutPath("/ng-rollout//verify")).toEqual({ malformed: true, captureKey: "" });
  });

  it("ignores paths without the prefix", () => {
    expect(splitRolloutPath("/verify")).toBeNull();
    expect(splitRolloutPath("/ng-rolloutx/r/verify")).toBeNull();
  });
});
