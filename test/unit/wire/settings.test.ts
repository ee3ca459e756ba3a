import { describe, expect, it } from "vitest";
import { ConfigError } from "#sdk/errors.js";
import { resolveCheckpointSettings } from "#sdk/server/server.js";

describe("checkpoint settings", () => {
  it("is off with defaults when the block is absent", () => {
    expect(resolveCheckpointSettings(undefined)).toEqual({
      enabled: false,
      control_auth_token: null,
      lease_grace_seconds: 600,
    });
  });

  it("requires a non-empty token when enabled, naming checkpoint.control_auth_token", () => {
    expect(() => resolveCheckpointSettings({ enabled: true })).toThrow(
      /checkpoint\.control_auth_token/,
    );
    expect(() => resolveCheckpointSettings({ enabled: true, control_auth_token: "" })).toThrow(
      ConfigError,
    );
  });

  it("validates a present block even when disabled", () => {
    expect(() => resolveCheckpointSettings({ enabled: false, lease_grace_seconds: 0 })).toThrow(
      /checkpoint\.lease_grace_seconds/,
    );
  });

  it("refuses unknown keys, naming them", () => {
    expect(() => resolveCheckpointSettings({ enabled: false, lease_grace: 5 } as never)).toThrow(
      /lease_grace/,
    );
  });

  it("refuses a non-positive or non-finite grace", () => {
    for (const grace of [0, -1, Number.POSITIVE_INFINITY, Number.NaN]) {
      expect(() => resolveCheckpointSettings({ lease_grace_seconds: grace })).toThrow(ConfigError);
    }
  });

  it("accepts an enabled block with a token", () => {
    expect(
      resolveCheckpointSettings({
        enabled: true,
        control_auth_token: "s3cret",
        lease_grace_seconds: 5,
      }),
    ).toEqual({ enabled: true, control_auth_token: "s3cret", lease_grace_seconds: 5 });
  });
});
