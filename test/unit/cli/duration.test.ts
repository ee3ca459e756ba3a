import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { formatDuration, parseDuration } from "#sdk/cli/duration.js";
import { UsageError } from "#sdk/cli/output.js";

describe("parseDuration", () => {
  it.each([
    ["500ms", 500],
    ["30s", 30_000],
    ["1.5s", 1_500],
    ["2m", 120_000],
    ["0s", 0],
    [" 10s ", 10_000],
  ])("reads %s as %i ms", (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });

  it("refuses a bare number and says to add a unit", () => {
    try {
      parseDuration("30", "--deadline");
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(UsageError);
      expect((error as UsageError).exitCode).toBe(2);
      expect((error as UsageError).message).toMatch(/--deadline "30" is not a duration/);
      expect((error as UsageError).hint).toMatch(/add a unit: 30s/);
    }
  });

  it.each(["", "s", "10h", "-1s", "1e3ms", "ten seconds"])("refuses %j", (text) => {
    expect(() => parseDuration(text)).toThrow(UsageError);
  });

  it("refuses durations a timer cannot hold", () => {
    expect(() => parseDuration("99999999m")).toThrow(/too long/);
  });

  it("law: n<unit> is n times the unit", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 30_000 }), (n) => {
        expect(parseDuration(`${n}ms`)).toBe(n);
        expect(parseDuration(`${n}s`)).toBe(n * 1_000);
        expect(parseDuration(`${n}m`)).toBe(n * 60_000);
      }),
    );
  });
});

describe("formatDuration", () => {
  it.each([
    [850, "850 ms"],
    [2_400, "2.4 s"],
    [30_000, "30 s"],
    [185_000, "3 m 05 s"],
  ])("shows %i ms as %s", (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });
});
