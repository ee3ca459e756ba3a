import { createHash } from "node:crypto";
import { inspect } from "node:util";
import { describe, expect, it } from "vitest";
import { ConfigError } from "#sdk/errors.js";
import { resolveCheckpointSettings } from "#sdk/server/server.js";
import { SessionSecret, resolveSessionSecret } from "#sdk/server/session-secret.js";

const ON = resolveCheckpointSettings({ enabled: true, control_auth_token: "token-1" });
const OFF = resolveCheckpointSettings(null);
const NAME = "Counter___counter";

describe("the session secret", () => {
  it("is the configured one when given, whatever the checkpoint settings", () => {
    const secret = resolveSessionSecret("configured-secret", ON);
    expect(secret.source).toBe("configured");
    expect(secret.keyFor(NAME)).toEqual(SessionSecret.configured("configured-secret").keyFor(NAME));
    expect(secret.keyFor(NAME)).not.toEqual(resolveSessionSecret(null, ON).keyFor(NAME));
  });

  it("is derived from the control token with checkpointing on: the same in a fresh process", () => {
    const before = resolveSessionSecret(undefined, ON);
    const after = resolveSessionSecret(undefined, ON);
    expect(before.source).toBe("control_token");
    expect(after.keyFor(NAME)).toEqual(before.keyFor(NAME));
    const rotated = resolveCheckpointSettings({ enabled: true, control_auth_token: "token-2" });
    expect(resolveSessionSecret(undefined, rotated).keyFor(NAME)).not.toEqual(before.keyFor(NAME));
  });

  it("is random with checkpointing off: two processes never share it", () => {
    const a = resolveSessionSecret(null, OFF);
    const b = resolveSessionSecret(null, OFF);
    expect(a.source).toBe("random");
    expect(a.keyFor(NAME)).not.toEqual(b.keyFor(NAME));
    expect(a.keyFor(NAME)).toEqual(a.keyFor(NAME));
  });

  it("gives every cookie name its own key, none of them the public-name key of old", () => {
    const secret = resolveSessionSecret(undefined, ON);
    expect(secret.keyFor("A___x")).not.toEqual(secret.keyFor("B___x"));
    const publicKey = createHash("sha256").update(`gym-resources-session:${NAME}`).digest();
    expect(secret.keyFor(NAME)).not.toEqual(publicKey);
    expect(secret.keyFor(NAME)).not.toEqual(Buffer.from("token-1"));
  });

  it("refuses a blank configured secret without echoing it", () => {
    for (const blank of ["", " ", "\t\n"]) {
      expect(() => resolveSessionSecret(blank, OFF), JSON.stringify(blank)).toThrow(ConfigError);
    }
  });

  it("never prints, serializes or inspects to its value", () => {
    const value = "do-not-print-me-0123456789";
    for (const secret of [SessionSecret.configured(value), SessionSecret.fromControlToken(value)]) {
      const shown = [
        JSON.stringify({ secret }),
        String(secret),
        `${secret}`,
        inspect(secret),
        inspect({ nested: { secret } }, { depth: 5, showHidden: true }),
      ];
      for (const text of shown) expect(text).not.toContain(value);
    }
  });
});
