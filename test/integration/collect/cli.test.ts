/**
 * `gym collect` run in-process against the scripted environment server: how a run stopped by
 * its failures exits and what it tells the user, a missing input, a bad `--max-failures`.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { EXIT_FAILING } from "#sdk/collect/collect-report.js";
import { runGym, writeRunState, type GymOutcome } from "../../support/gym-in-process.js";
import { StubDeployment } from "./stub-deployment.js";

let stub: StubDeployment;
let dir: string;
let stateFile: string;

beforeEach(async () => {
  stub = new StubDeployment();
  await stub.start();
  dir = mkdtempSync(path.join(tmpdir(), "gym-collect-cli-"));
  stateFile = path.join(dir, ".gym", "run.json");
  writeRunState(
    {
      stateFile,
      deploymentFile: path.join(dir, "deployment.yaml"),
      resolvedFile: path.join(dir, "deployment.resolved.json"),
      logDir: path.join(dir, "logs"),
    },
    stub.deployment,
  );
  writeFileSync(
    path.join(dir, "tasks.jsonl"),
    Array.from({ length: 40 }, (_, i) => `${JSON.stringify({ task_id: `t${i}` })}\n`).join(""),
  );
});

afterEach(async () => {
  await stub.close();
  rmSync(dir, { recursive: true, force: true });
});

async function gym(...argv: string[]): Promise<GymOutcome> {
  return await runGym({ cwd: dir }, ["collect", ...argv, "--state", stateFile]);
}

describe("gym collect", () => {
  it("exits 3 when rollouts keep failing the same way, naming the code, an example and what to do", async () => {
    stub.behaviour = () => "invalid";
    const { code, out, err } = await gym(
      "tasks.jsonl",
      "--checkpoint-dir",
      "D",
      "--concurrency",
      "1",
    );
    expect(code).toBe(EXIT_FAILING);
    expect(stub.runs).toHaveLength(20);
    expect(out).toMatch(/stopped at 0\/40 rollouts: the last 20 failed the same way/);
    expect(err).toMatch(
      /gym: stopped: 20 rollouts in a row failed the same way \(refused, invalid_request, HTTP 422\); for example row 0 \(task tasks\/t0\): task\.task_input\.count: Required/,
    );
    expect(err).toMatch(
      /what to do: .*--reset.*gym collect tasks\.jsonl --checkpoint-dir D --resume/,
    );
    expect(err).toMatch(/--max-failures 0 turns this check off/);
    // The directory stays resumable: the fixed servers continue the run.
    stub.behaviour = () => "reply";
    const resumed = await gym("tasks.jsonl", "--checkpoint-dir", "D", "--resume");
    expect(resumed.code, resumed.err).toBe(0);
    expect(resumed.out).toMatch(/complete: 40\/40 rollouts ended/);
  });

  it("--json prints the summary with the failure streak on stdout", async () => {
    stub.behaviour = () => "invalid";
    const { code, out } = await gym(
      "tasks.jsonl",
      "--checkpoint-dir",
      "D",
      "--max-failures",
      "5",
      "--json",
    );
    expect(code).toBe(EXIT_FAILING);
    expect(JSON.parse(out)).toMatchObject({
      status: "failing",
      failureStreak: { kind: "refused", code: "invalid_request", rollouts: 5 },
    });
  });

  it("--max-failures none writes every failure row and exits 0", async () => {
    stub.behaviour = () => "invalid";
    const { code, out } = await gym(
      "tasks.jsonl",
      "--output",
      "out.jsonl",
      "--max-failures",
      "none",
    );
    expect(code).toBe(0);
    expect(out).toMatch(/complete: 40\/40 rollouts ended/);
    expect(out).toMatch(/failed 40/);
  });

  it("a bad --max-failures is a usage error", async () => {
    const { code, err } = await gym("tasks.jsonl", "--output", "out.jsonl", "--max-failures", "-1");
    expect(code).toBe(2);
    expect(err).toMatch(/--max-failures must be a whole number or none/);
    expect(stub.runs).toEqual([]);
  });

  it("a missing input names the path and says to check it", async () => {
    const { code, err } = await gym("taks.jsonl", "--checkpoint-dir", "D");
    expect(code).toBe(1);
    expect(err).toContain(`gym: no such file: ${path.join(dir, "taks.jsonl")}`);
    expect(err).toMatch(/what to do: check the path/);
    expect(err).not.toMatch(/fix the row/);
  });
});
