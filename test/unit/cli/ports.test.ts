import { describe, expect, it } from "vitest";
import { chooseFreePorts } from "#sdk/cli/ports.js";
import { CliError } from "#sdk/cli/output.js";

describe("choosing free ports", () => {
  it("gives distinct ports on the same host", async () => {
    const ports = await chooseFreePorts([
      { name: "a", host: "127.0.0.1" },
      { name: "b", host: "127.0.0.1" },
    ]);
    expect(ports.a).not.toBe(ports.b);
    expect(ports.a).toBeGreaterThan(0);
  });

  it("names the server and host it cannot bind, as a typed CLI error", async () => {
    // 192.0.2.0/24 is TEST-NET-1: never an address of this machine.
    const error = await chooseFreePorts([{ name: "far", host: "192.0.2.1" }]).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(CliError);
    expect((error as CliError).message).toContain("server far");
  });
});
