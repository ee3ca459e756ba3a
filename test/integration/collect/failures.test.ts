/**
 * The collector when nothing can succeed: every row refused the same way stops the run early
 * (nothing of the streak written, the directory resumable, a resume after the fix sends those
 * rows again); a missing input and an unknown environment server are named before anything is
 * sent or discarded.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { CollectError, type CollectOptions } from "#sdk/collect/collect-options.js";
import { collect } from "#sdk/collect/collector.js";
import type { RolloutRow } from "#sdk/collect/rollout-row.js";
import { TaskFileError } from "#sdk/collect/task-rows.js";
import { ServerClient } from "#sdk/client/server-client.js";
import type { ResolvedServer } from "#sdk/wire/deployment.js";
import { StubDeployment, writeTasks } from "./stub-deployment.js";

let stub: StubDeployment;
let dir: string;

beforeEach(async () => {
  stub = new StubDeployment();
  await stub.start();
  dir = mkdtempSync(path.join(tmpdir(), "gym-collect-failures-"));
});

afterEach(async () => {
  await stub.close();
  rmSync(dir, { recursive: true, force: true });
});

const tasks = (count: number, extra?: (i: number) => object): string =>
  writeTasks(dir, count, extra);

function options(extra: Partial<CollectOptions> = {}): CollectOptions {
  const participants = stub.participants();
  return {
    client: participants.client,
    participants,
    input: extra.input ?? tasks(2),
    output: path.join(dir, "out.jsonl"),
    checkpointDir: path.join(dir, "D"),
    concurrency: 2,
    stepTimeoutMs: 5_000,
    ...extra,
  };
}

function rows(): RolloutRow[] {
  const file = path.join(dir, "out.jsonl");
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8")
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => JSON.parse(line) as RolloutRow);
}

describe("rollouts failing the same way", () => {
  it("stop the run after 20 in a row, none of them written; a resume after the fix sends them again", async () => {
    stub.behaviour = () => "invalid";
    const summary = await collect(options({ input: tasks(60) }));
    expect(summary).toMatchObject({
      status: "failing",
      ended: 0,
      failed: 0,
      failureStreak: {
        kind: "refused",
        code: "invalid_request",
        status: 422,
        rollouts: 20,
        example: { message: "task.task_input.count: Required" },
      },
    });
    // Stopped at the 20th failure: at most the other row in flight went out besides.
    expect(stub.runs.length).toBeGreaterThanOrEqual(20);
    expect(stub.runs.length).toBeLessThanOrEqual(22);
    expect(rows()).toEqual([]);
    expect(stub.calls("forget")).toEqual([]);

    // Every row sent (the refused ones, and any the stop abandoned in flight) was logged.
    const logged = new Set(
      readFileSync(path.join(dir, "D", "dispatch.log"), "utf8")
        .split("\n")
        .filter((line) => line !== "")
        .map((line) => (JSON.parse(line) as { rollout_id: string }).rollout_id),
    );
    for (const run of stub.runs) expect(logged.has(run.rollout_id)).toBe(true);
    stub.runs.length = 0;
    stub.behaviour = () => "reply";
    const resumed = await collect(options({ input: tasks(60), resume: true }));
    expect(resumed).toMatchObject({ status: "complete", ended: 60, finished: 60, session: 2 });
    expect(resumed.fenced).toBe(logged.size);
    const written = rows();
    expect(new Set(written.map((row) => row.rollout_id)).size).toBe(60);
    for (const row of written) {
      expect(row.attempt).toBe(logged.has(row.rollout_id) ? 1 : 0);
    }
  });

  it("a dataset smaller than the limit stops once every rollout failed the same way", async () => {
    stub.behaviour = () => "invalid";
    const summary = await collect(options({ input: tasks(3) }));
    expect(summary).toMatchObject({ status: "failing", failureStreak: { rollouts: 3 } });
    expect(rows()).toEqual([]);
  });

  it("a finished rollout breaks the streak: the failures held back are written, the run completes", async () => {
    // Rows 2 and 5 finish; the others are refused, never three in a row.
    stub.behaviour = (run) => (/-(2|5)-0$/.test(run.rollout_id) ? "reply" : "invalid");
    const summary = await collect(options({ input: tasks(8), concurrency: 1, maxFailures: 3 }));
    expect(summary).toMatchObject({ status: "complete", ended: 8, finished: 2, failed: 6 });
    expect(summary.failureStreak).toBeNull();
    const failed = rows().filter((row) => row.status === "failed");
    expect(failed.map((row) => row.row).sort()).toEqual([0, 1, 3, 4, 6, 7]);
    expect(failed[0]?.failure).toMatchObject({ kind: "refused", code: "invalid_request" });
  });

  it("maxFailures 0 turns the check off: every refused row is written", async () => {
    stub.behaviour = () => "invalid";
    const summary = await collect(options({ input: tasks(30), maxFailures: 0 }));
    expect(summary).toMatchObject({ status: "complete", ended: 30, failed: 30 });
    expect(rows()).toHaveLength(30);
  });
});

describe("a missing input", () => {
  it("is named as a missing file, before a --reset discards anything", async () => {
    const first = await collect(options());
    expect(first.status).toBe("complete");
    const missing = path.join(dir, "tasks.jsonnl");
    const started = collect(options({ input: missing, reset: true }));
    await expect(started).rejects.toBeInstanceOf(TaskFileError);
    await expect(started).rejects.toThrow(`no such file: ${missing}`);
    expect(rows()).toHaveLength(2);
    expect(existsSync(path.join(dir, "D", "run.json"))).toBe(true);
  });
});

describe("an unknown environment server", () => {
  async function refusal(extra: Partial<CollectOptions>): Promise<CollectError> {
    const error = await collect(options(extra)).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(CollectError);
    return error as CollectError;
  }

  it("named by --environment: lists the deployment's environment servers and suggests the close one", async () => {
    const error = await refusal({ environment: "evn" });
    expect(error.message).toMatch(/"evn".*did you mean 'env'\?/);
    expect(error.hint).toMatch(/its environment servers: env/);
    expect(stub.runs).toEqual([]);
  });

  it("named by the rows: names the first line, lists the environment servers, suggests the close one", async () => {
    const input = tasks(3, (i) => (i === 1 ? { environment: "emv" } : {}));
    const error = await refusal({ input });
    expect(error.message).toMatch(/rows name "emv" in "environment" \(first at .*tasks\.jsonl:2\)/);
    expect(error.message).toMatch(/did you mean 'env'\?/);
    expect(error.hint).toMatch(/its environment servers: env/);
    expect(stub.runs).toEqual([]);
  });

  it("far from every name gets no suggestion; a server of another kind is said to be one", async () => {
    expect((await refusal({ environment: "weather" })).message).not.toMatch(/did you mean/);
    const deployment = stub.deployment;
    const env = deployment.servers.env as ResolvedServer;
    const client = new ServerClient({
      ...deployment,
      servers: { ...deployment.servers, policy: { ...env, kind: "model" } },
    });
    const error = await refusal({ client, environment: "policy" });
    expect(error.message).toMatch(/"policy" is a model server, not an environment server/);
    expect(error.hint).toMatch(/its environment servers: env;/);
    await client.close();
  });
});
