/**
 * The checkpoint pause breakdown `bench:collect` prints, small: 60 rows, 20 in flight, a
 * checkpoint every 300 ms on the reference deployment. Each published checkpoint's breakdown
 * names every stage the pause goes through, and its parts plus the unaccounted remainder it
 * reports make up the pause. No figure is checked against a time.
 */
import { execFile } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { REPO } from "./helpers.js";

const run = promisify(execFile);

interface Breakdown {
  readonly pauseMs: number;
  readonly unaccountedMs: number;
  readonly stages: readonly {
    readonly name: string;
    readonly ms: number;
    readonly servers: readonly { readonly server: string; readonly ms: number }[];
  }[];
}

describe("the checkpoint pause breakdown", () => {
  it("bench:collect prints every checkpoint's stages, and they sum to its pause", async () => {
    const { stdout } = await run(
      process.execPath,
      [
        "--import",
        "tsx",
        path.join(REPO, "test", "bench", "collect.bench.ts"),
        ...["--rows", "60", "--concurrency", "20", "--every", "300ms", "--runs", "1"],
        "--breakdowns",
      ],
      { cwd: REPO, timeout: 150_000, maxBuffer: 16 * 1024 * 1024 },
    );
    const breakdowns = stdout
      .split("\n")
      .filter((line) => line.startsWith("pause-breakdown "))
      .map((line) => JSON.parse(line.slice("pause-breakdown ".length)) as Breakdown);
    expect(breakdowns.length).toBeGreaterThan(0);
    expect(stdout).toContain("the pause per stage, median over");
    for (const b of breakdowns) {
      expect(b.stages.map((s) => s.name)).toEqual([
        "prepare environment",
        "prepare model",
        "prepare agent",
        "prepare resources",
        "commit",
        "publish",
        "resume resources",
        "resume agent",
        "resume model",
        "resume environment",
      ]);
      // Stages follow one another: nothing is counted twice, so the remainder is not negative.
      expect(b.unaccountedMs).toBeGreaterThanOrEqual(0);
      const parts = b.stages.reduce((sum, s) => sum + s.ms, 0);
      expect(parts + b.unaccountedMs).toBeCloseTo(b.pauseMs, 6);
      const commit = b.stages.find((s) => s.name === "commit")!;
      // Every participant server commits, and a stage spans each of its calls.
      expect(commit.servers.length).toBeGreaterThanOrEqual(4);
      for (const stage of b.stages) {
        for (const server of stage.servers) expect(server.ms).toBeLessThanOrEqual(stage.ms + 1e-6);
      }
    }
  }, 180_000);
});
