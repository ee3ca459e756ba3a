/**
 * The tally through the SDK's test kit: a real server in process, driven over HTTP like a gym
 * environment drives it, checkpointed and restored into fresh instances.
 */
import { afterEach, describe, expect, it } from "vitest";
import {
  startTestServer,
  type TestServer,
  type TestServerOptions,
} from "gym-participant-sdk/testing";
import TallyServer from "../src/index.js";

const ep1 = { rollout: "ep1" };
const SEED = {
  resources_session_id: "s1",
  episode_id: { rollout_id: "ep1", attempt: 0 },
  task_id: { taskset: "demo", task_id: "1" },
  task_data: {},
};

const handles: TestServer<TallyServer>[] = [];
afterEach(async () => {
  for (const handle of handles.splice(0)) await handle.close();
});

async function start(options: TestServerOptions = {}): Promise<TestServer<TallyServer>> {
  const handle = await startTestServer(TallyServer, { name: "tally", ...options });
  handles.push(handle);
  return handle;
}

/** A whole episode: seed, add 2, add 3, verify against the target 5; returns the reward. */
async function episode(tally: TestServer<TallyServer>): Promise<number> {
  expect((await tally.request("/seed_session", SEED, ep1)).status).toBe(200);
  for (const amount of [2, 3]) {
    expect((await tally.request("/add", { amount }, ep1)).status).toBe(200);
  }
  const verified = await tally.request("/verify", { target: 5 }, ep1);
  expect(verified.status).toBe(200);
  return (verified.body as { reward: number }).reward;
}

describe("TallyServer", () => {
  it("rewards a total equal to the target", async () => {
    expect(await episode(await start())).toBe(1);
  });

  it("loses nothing when checkpointed and restored into a fresh process at every boundary", async () => {
    const tally = await start({ checkpointEvery: "boundary" });
    expect(await episode(tally)).toBe(1);
    // The seed and both adds were each followed by a restore: /verify ran as attempt 3.
    expect(tally.attemptOf("ep1")).toBe(3);
  });

  it("exports each session's total and frees it when its attempt is retired", async () => {
    const tally = await start();
    await tally.request("/seed_session", SEED, ep1);
    await tally.request("/add", { amount: 2 }, ep1);
    const { records } = await tally.checkpoint();
    expect(records).toEqual([expect.objectContaining({ state: 2 })]);
    await tally.retire(["ep1"]);
    expect(tally.server.states.size).toBe(0);
  });

  it("declares its verify mode on the seed reply", async () => {
    const seeded = await (await start()).request("/seed_session", SEED, ep1);
    expect(seeded.headers.get("x-ng-checkpoint-verify")).toBe(TallyServer.checkpointVerify);
  });

  it("refuses a malformed body with 422 naming the field", async () => {
    const server = await start();
    const bad = await server.request("/add", { amount: "two" }, ep1);
    expect(bad.status).toBe(422);
    expect(bad.body).toMatchObject({
      error: { code: "invalid_request", issues: [expect.objectContaining({ path: ["amount"] })] },
    });
    const verify = await server.request("/verify", {}, ep1);
    expect(verify.status).toBe(422);
  });
});
