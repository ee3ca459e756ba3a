/**
 * The bounded slice of the fuzz suite in `npm test`: one fixed seed, 1,500 hostile requests on
 * every route of the reference deployment in real processes (started from source), then
 * half-sent bodies, absurd Content-Lengths and restores of corrupted checkpoints. Longer runs:
 * `npm run test:fuzz -- --budget 20000 --seed S`.
 */
import { describe, expect, it } from "vitest";
import { runFuzz } from "./fuzzer.js";

describe("fuzz", () => {
  it(
    "answers 1,500 hostile requests and corrupted restores without a 5xx, a hang or a leftover",
    {
      timeout: 600_000,
    },
    async () => {
      const report = await runFuzz({ seed: 20_261_203, budget: 1500, concurrency: 4 });
      const lines = report.findings.map((f) => `${f.group}: ${f.detail}\n  ${f.repro}`);
      expect(lines, lines.join("\n")).toEqual([]);
      expect(report.requests).toBeGreaterThanOrEqual(1500);
      expect(report.corruptedRestores).toBeGreaterThan(20);
    },
  );
});
