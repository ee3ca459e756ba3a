/** A configuration error from the SDK (an unreadable tls file, say) is a failure with advice, not "a bug in gym". */
import { describe, expect, it } from "vitest";
import { CliError, asCliError } from "#sdk/cli/output.js";
import { ConfigError } from "#sdk/errors.js";

describe("asCliError", () => {
  it("turns a ConfigError into a CliError that keeps its message", () => {
    const error = asCliError(new ConfigError("tls.ca_file /x/ca.pem cannot be read: ENOENT"));
    expect(error).toBeInstanceOf(CliError);
    expect(error?.message).toBe("tls.ca_file /x/ca.pem cannot be read: ENOENT");
    expect(error?.hint).toMatch(/fix the setting/);
  });

  it("leaves other errors to be reported as unexpected", () => {
    expect(asCliError(new TypeError("x is undefined"))).toBeNull();
  });
});
