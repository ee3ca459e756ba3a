/**
 * The reference resources servers under `gym serve`, with a real crash: the counter's state is
 * checkpointed, every process group is killed, fresh processes restore it, and the replacement
 * attempt gets the reward only the restored count can give. The built CLI and servers (as the
 * packages ship them): each process then starts without a TypeScript loader, on about half the
 * CPU.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO, gym as gymCommand, killEverything, stateServers } from "./helpers.js";

/** The built `gym`. */
const gym = (args: readonly string[]) => gymCommand(args, { compiled: true });

let dir: string;
let deployment: string;
let stateFile: string;
let checkpointDir: string;
let cookie = "";

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), "gym-e2e-reference-"));
  const text = readFileSync(path.join(REPO, "reference-servers", "resources.yaml"), "utf8")
    .replace(
      "entrypoint: counter/",
      `entrypoint: ${path.join(REPO, "reference-servers", "counter")}/`,
    )
    .replace(
      "entrypoint: weather/",
      `entrypoint: ${path.join(REPO, "reference-servers", "weather")}/`,
    )
    .replaceAll("/src/index.ts", "/dist/index.js");
  deployment = path.join(dir, "resources.yaml");
  writeFileSync(deployment, text);
  stateFile = path.join(dir, ".gym", "run.json");
  checkpointDir = path.join(dir, "checkpoints", "c1");
});

afterAll(async () => {
  await killEverything(dir, [stateFile]);
  rmSync(dir, { recursive: true, force: true });
});

function counterUrl(): string {
  const counter = stateServers(stateFile).find((server) => server.name === "counter");
  if (counter === undefined) throw new Error("counter is not running");
  return counter.url;
}

async function post(route: string, body: unknown): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`${counterUrl()}${route}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(cookie === "" ? {} : { cookie }) },
    body: JSON.stringify(body),
  });
  const setCookie = res.headers.get("set-cookie");
  if (setCookie !== null) cookie = setCookie.split(";")[0] as string;
  return { status: res.status, body: await res.json() };
}

const SEED = {
  resources_session_id: "s1",
  episode_id: { rollout_id: "ep1", attempt: 0 },
  task_id: { taskset: "t", task_id: "1" },
  task_data: { target: 2 },
};
const VERIFY = { responses_create_params: { input: [] }, response: { output: [] } };

describe.sequential("the counter survives a crash", { timeout: 120_000 }, () => {
  it("serves both reference servers and checkpoints the counter's session", async () => {
    const served = await gym(["serve", deployment, "--detach"]);
    expect(served.code, served.stderr).toBe(0);
    expect(
      stateServers(stateFile)
        .map((server) => server.name)
        .sort(),
    ).toEqual(["counter", "weather"]);
    expect((await post("/ng-rollout/ep1/seed_session", SEED)).status).toBe(200);
    expect((await post("/ng-rollout/ep1/increment_counter", { count: 1 })).body).toEqual({
      success: true,
    });
    const checkpoint = await gym([
      "ckpt",
      "checkpoint",
      "--deployment",
      deployment,
      "--dir",
      checkpointDir,
    ]);
    expect(checkpoint.code, checkpoint.stderr).toBe(0);
  });

  it("restores it into fresh processes after every group was killed", async () => {
    expect((await gym(["stop", "--state", stateFile, "--kill"])).code).toBe(0);
    const served = await gym(["serve", deployment, "--detach"]);
    expect(served.code, served.stderr).toBe(0);
    const manifest = JSON.parse(
      readFileSync(
        path.join(checkpointDir, "gym", "resources", "counter", "manifest.json"),
        "utf8",
      ),
    ) as { checkpoint_id: string };
    const restored = await gym([
      "ckpt",
      "restore",
      "--deployment",
      deployment,
      "--id",
      manifest.checkpoint_id,
      "--dir",
      checkpointDir,
      "--all",
      "--resume",
    ]);
    expect(restored.code, restored.stderr).toBe(0);
    expect(restored.stdout).toContain("ep1-a1");
  });

  it("gives the replacement attempt the reward only the restored count allows, and fences the old one", async () => {
    expect((await post("/ng-rollout/ep1-a1/increment_counter", { count: 1 })).body).toEqual({
      success: true,
    });
    const verified = await post("/ng-rollout/ep1-a1/verify", VERIFY);
    expect((verified.body as { reward: number }).reward).toBe(1);
    const stale = await post("/ng-rollout/ep1/increment_counter", { count: 1 });
    expect(stale.status).toBe(409);
    expect((stale.body as { error: { code: string } }).error.code).toBe("stale_attempt");
    expect((await gym(["stop", "--state", stateFile])).code).toBe(0);
  });
});
