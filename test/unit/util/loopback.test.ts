import { describe, expect, it } from "vitest";
import { isLoopbackHost } from "#sdk/util/loopback.js";

describe("isLoopbackHost", () => {
  it("holds for 127.0.0.0/8, ::1 in any spelling, IPv4-mapped loopback and localhost", () => {
    for (const host of [
      "127.0.0.1",
      "127.255.255.254",
      "127.1.2.3",
      "::1",
      "[::1]",
      "0:0:0:0:0:0:0:1",
      "::ffff:127.0.0.1",
      "localhost",
      "LocalHost",
      "api.localhost",
    ]) {
      expect(isLoopbackHost(host), host).toBe(true);
    }
  });

  it("fails for wildcards, other addresses and other names", () => {
    for (const host of [
      "0.0.0.0",
      "::",
      "[::]",
      "10.0.0.1",
      "128.0.0.1",
      "126.255.255.255",
      "192.168.1.20",
      "::ffff:10.0.0.1",
      "fe80::1",
      "node-3",
      "localhost.example.com",
      "",
    ]) {
      expect(isLoopbackHost(host), host).toBe(false);
    }
  });
});
