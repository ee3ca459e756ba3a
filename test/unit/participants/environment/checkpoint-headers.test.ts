import { describe, expect, it } from "vitest";
import { isRestartReply, verifyModeOf } from "#sdk/participants/environment/checkpoint-headers.js";

describe("isRestartReply", () => {
  it("matches the header name in any casing, in Headers and plain records", () => {
    expect(isRestartReply(new Headers({ "X-NG-Checkpoint-Restart": "1" }))).toBe(true);
    expect(isRestartReply({ "x-ng-checkpoint-restart": "1" })).toBe(true);
    expect(isRestartReply({ "X-Ng-Checkpoint-Restart": "1" })).toBe(true);
    expect(isRestartReply({ "x-ng-checkpoint-restart": ["1"] })).toBe(true);
  });

  it("requires the value to be exactly 1", () => {
    for (const value of ["true", "01", " 1", "2", "", "yes"]) {
      expect(isRestartReply({ "x-ng-checkpoint-restart": value }), value).toBe(false);
    }
    expect(isRestartReply({ "x-ng-checkpoint-restart": ["1", "1"] })).toBe(false);
    expect(isRestartReply({ "x-ng-checkpoint-restart": undefined })).toBe(false);
    expect(isRestartReply({})).toBe(false);
    expect(isRestartReply(null)).toBe(false);
    expect(isRestartReply(undefined)).toBe(false);
  });
});

describe("verifyModeOf", () => {
  it("is replay iff the verify header is exactly replay, in any name casing", () => {
    expect(verifyModeOf(new Headers({ "X-NG-Checkpoint-Verify": "replay" }))).toBe("replay");
    expect(verifyModeOf({ "X-Ng-Checkpoint-Verify": "replay" })).toBe("replay");
    expect(verifyModeOf({ "x-ng-checkpoint-verify": "wait" })).toBe("wait");
    expect(verifyModeOf({ "x-ng-checkpoint-verify": "Replay" })).toBe("wait");
    expect(verifyModeOf({ "x-ng-checkpoint-verify": "replay " })).toBe("wait");
    expect(verifyModeOf({})).toBe("wait");
    expect(verifyModeOf(null)).toBe("wait");
  });
});
