/**
 * The demo's scenario (what `npm run demo` and `npm run bench:scale` run), small: real processes
 * under `gym serve`, a checkpoint with rollouts in flight, a crash of every Gym process group, a
 * restore in fresh processes and the replacements. It must report no contract problem. The
 * built CLI and servers: the scenario is not about tsx, and they start on about half the CPU.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { DeploymentRun } from "../../demo/deployment-run.js";
import { runBody, runScenario } from "../../demo/scenario.js";
import { episodeId } from "#sdk/identity/episode-id.js";
import { gym, killEverything } from "./helpers.js";

const dir = mkdtempSync(path.join(tmpdir(), "gym-demo-scenario-"));
const run = new DeploymentRun(dir, {}, { compiled: true });

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

  // The shell controller has no list of what is in flight, and the policy model refuses a commit
  // without one (its contract): `gym ckpt checkpoint` must still work on this deployment.
  it("gym ckpt checkpoint commits a rollout in flight on the reference deployment, model included", async () => {
    await run.backend("POST", "/_ctl/hold", { after_calls_per_rollout: 0 });
    const reply = fetch(`${run.url("counter_env")}/run`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(runBody(episodeId("cli-0"), 0, false)),
    });
    const deadline = Date.now() + 30_000;
    for (;;) {
      const { calls } = await run.backend<{ calls: { rollout: string | null; held: boolean }[] }>(
        "GET",
        "/_ctl/calls",
      );
      if (calls.some((call) => call.rollout === "cli-0" && call.held)) break;
      if (Date.now() > deadline) throw new Error("cli-0 never reached its held model call");
      await new Promise((resolve) => setTimeout(resolve, 100));
    }

    const checkpointDir = path.join(dir, "cli-checkpoint");
    const done = await gym(
      ["ckpt", "checkpoint", "--dir", checkpointDir, "--state", run.stateFile, "--json"],
      { env: run.env, compiled: true },
    );
    expect(done.code, done.stderr).toBe(0);
    const json = JSON.parse(done.stdout) as {
      commit: Record<string, { episode_ids: string[] }>;
    };
    expect(json.commit.counter_env?.episode_ids).toEqual(["cli-0"]);
    expect(json.commit.policy?.episode_ids).toEqual(["cli-0"]);

    await run.backend("POST", "/_ctl/release");
    expect((await reply).status).toBe(200);
  }, 120_000);
});
