/**
 * The README's main job, as a new user runs it: `npm run demo` collects the sample dataset, is
 * preempted with rows in flight (SIGTERM, exit 75), crashed and resumed, and must end every row
 * exactly once with reward 1, continuing the checkpointed rows without repeating a model call.
 */
import { describe, expect, it } from "vitest";
import { runCommand } from "../../demo/gym-process.js";

describe("npm run demo", () => {
  it(
    "collects the sample dataset through a preemption and a resume, every row exactly once",
    { timeout: 240_000 },
    async () => {
      const done = await runCommand(
        process.execPath,
        ["--import", "tsx", "demo/main.ts", "--json"],
        {
          timeoutMs: 230_000,
        },
      );
      expect(done.code, done.stderr).toBe(0);
      const report = JSON.parse(done.stdout) as Record<string, unknown>;
      expect(report).toMatchObject({
        rows: 48,
        endedOnce: true,
        rewards: { "1": 48 },
        preemptedExit: 75,
        resumedExit: 0,
        repeatedDeliveredCalls: 0,
        problems: [],
      });
      expect(report.continued).toBeGreaterThan(0);
    },
  );
});
