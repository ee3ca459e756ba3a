/**
 * The demo's scenario (what `npm run demo` and `npm run bench:scale` run), small: real processes
 * under `gym serve`, a checkpoint with rollouts in flight, a crash of every Gym process group, a
 * restore in fresh processes and the replacements. It must report no contract problem.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { DeploymentRun } from "../../demo/deployment-run.js";
import { runScenario } from "../../demo/scenario.js";
import { killEverything } from "./helpers.js";

const dir = mkdtempSync(path.join(tmpdir(), "gym-demo-scenario-"));
const run = new DeploymentRun(dir);

afterAll(async () => {
  await run.stop().catch(() => undefined);
  await killEverything(dir, [run.stateFile]);
  rmSync(dir, { recursive: true, force: true });
});

describe("the demo scenario", () => {
  it("checkpoints 12 rollouts in flight, survives the crash, and finishes each once with reward 1", async () => {
    const report = await runScenario(run, { rollouts: 16 });
    expect(report.problems).toEqual([]);
    expect(report.inFlight).toBe(12); // every fourth rollout is tool-less and finishes first
    expect(report.exported).toBe(12);
    expect(report.cutCalls).toBe(12);
    expect(report.continuedFromCut).toBe(12);
    expect(report.replacementFailures).toBe(0);
    expect(report.rewards).toEqual({ "1": 16 });
  }, 180_000);
});
