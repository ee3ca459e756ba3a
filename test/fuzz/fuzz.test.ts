/**
 * The bounded slice of the fuzz suite in `npm test`: one fixed seed, 1,500 hostile requests on
 * every route of the reference deployment in real processes (started from the build: the fuzz
 * is not about tsx, and a server under it starts on about twice the CPU), then
 * half-sent bodies, declared oversize bodies and restores of corrupted checkpoints, then every
 * server healthy and idle. Longer runs: `npm run test:fuzz -- --budget 20000 --seed S`; a
 * finding here replays with the repro it prints.
 */
import { describe, expect, it } from "vitest";
import { runFuzz } from "./fuzzer.js";

/** Fixed, so a failure here replays exactly with `npm run test:fuzz -- --seed 20261203`. */
const SEED = 20_261_203;

describe("the reference deployment under fuzz", () => {
  it(
    "answers hostile requests and corrupted restores without a 5xx, a hang or a leftover",
    { timeout: 300_000 },
    async () => {
      const report = await runFuzz({ seed: SEED, budget: 1500, concurrency: 4, compiled: true });
      const lines = report.findings.map((f) => `${f.group}\n  ${f.detail}\n  repro: ${f.repro}`);
      expect(lines, lines.join("\n")).toEqual([]);
      expect(report.requests).toBeGreaterThanOrEqual(1500);
      // Every corruption reached a participant (most of them, every participant).
      expect(report.corruptedRestores).toBeGreaterThan(100);
      // The bodies were varied enough to meet each kind of refusal.
      for (const status of ["200", "400", "401", "404", "409", "413", "415", "422"]) {
        expect(report.statuses[status] ?? 0, `HTTP ${status} replies`).toBeGreaterThan(0);
      }
    },
  );
});
