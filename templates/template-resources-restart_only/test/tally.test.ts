/**
 * The tally through the SDK's test kit: a real server in process, driven over HTTP like a gym
 * environment drives it. It saves nothing, so a checkpoint reports its rollouts as restarts.
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

describe("TallyServer", () => {
  it("rewards a total equal to the target", async () => {
    const tally = await start();
    expect((await tally.request("/seed_session", SEED, ep1)).status).toBe(200);
    for (const amount of [2, 3]) await tally.request("/add", { amount }, ep1);
    const verified = await tally.request("/verify", { target: 5 }, ep1);
    expect(verified.body).toMatchObject({ reward: 1 });
  });

  it("marks its seeds as restarts, never blocks a checkpoint and exports nothing", async () => {
    const tally = await start();
    const seeded = await tally.request("/seed_session", SEED, ep1);
    expect(seeded.headers.get("x-ng-checkpoint-restart")).toBe("1");
    await tally.prepare();
    expect((await tally.status()).report.restarts).toEqual(["ep1"]);
    expect((await tally.commit()).records).toEqual([]);
    await tally.resume();
  });

  it("frees a session's total when its attempt is retired", async () => {
    const tally = await start();
    await tally.request("/seed_session", SEED, ep1);
    expect(tally.server.totals.size).toBe(1);
    await tally.retire(["ep1"]);
    expect(tally.server.totals.size).toBe(0);
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
