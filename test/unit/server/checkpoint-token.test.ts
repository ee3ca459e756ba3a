import { describe, expect, it } from "vitest";
import { ConfigError } from "#sdk/errors.js";
import { bearerAuth } from "#sdk/server/bearer-auth.js";
import { Server, resolveCheckpointSettings } from "#sdk/server/server.js";

const BLANK = [" ", "   ", "\t", "\n", " \t\r\n ", "\u00a0", "\u2003"];

describe("a blank control_auth_token", () => {
  it("is refused at startup, naming checkpoint.control_auth_token", () => {
    for (const token of BLANK) {
      const settings = { enabled: true, control_auth_token: token };
      expect(() => resolveCheckpointSettings(settings), JSON.stringify(token)).toThrow(ConfigError);
      expect(() => resolveCheckpointSettings(settings)).toThrow(
        /checkpoint\.control_auth_token must not be blank/,
      );
      expect(() => new Server({ name: "s", checkpoint: settings, logLevel: "silent" })).toThrow(
        /checkpoint\.control_auth_token/,
      );
    }
  });

  it("is no concern while checkpointing is off", () => {
    expect(resolveCheckpointSettings({ enabled: false, control_auth_token: " " })).toMatchObject({
      enabled: false,
    });
  });

  it("leaves a token with spaces inside it alone", () => {
    expect(
      resolveCheckpointSettings({ enabled: true, control_auth_token: "two words" }),
    ).toMatchObject({ control_auth_token: "two words" });
  });

  it("is refused by the bearer check itself", () => {
    for (const token of ["", ...BLANK]) {
      expect(() => bearerAuth(token), JSON.stringify(token)).toThrow(RangeError);
    }
  });
});
