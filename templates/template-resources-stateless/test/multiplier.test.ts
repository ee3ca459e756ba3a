/**
 * The multiplier through the SDK's test kit: a real server in process, driven over HTTP like a
 * gym environment drives it, checkpointed and restored into fresh instances.
 */
import { afterEach, describe, expect, it } from "vitest";
import {
  startTestServer,
  type TestServer,
  type TestServerOptions,
} from "gym-participant-sdk/testing";
import { outputText } from "gym-participant-sdk/protocol";
import MultiplierServer from "../src/index.js";

const ep1 = { rollout: "ep1" };
const SEED = {
  resources_session_id: "s1",
  episode_id: { rollout_id: "ep1", attempt: 0 },
  task_id: { taskset: "demo", task_id: "1" },
  task_data: {},
};
const answer = (text: string) => ({
  output: [{ type: "message", role: "assistant", content: [{ type: "output_text", text }] }],
});

const handles: TestServer<MultiplierServer>[] = [];
afterEach(async () => {
  for (const handle of handles.splice(0)) await handle.close();
});

async function start(options: TestServerOptions = {}): Promise<TestServer<MultiplierServer>> {
  const handle = await startTestServer(MultiplierServer, { name: "multiplier", ...options });
  handles.push(handle);
  return handle;
}

/** A whole episode: seed, one tool call, verify the model's answer; returns the reward. */
async function episode(server: TestServer<MultiplierServer>, text: string): Promise<number> {
  expect((await server.request("/seed_session", SEED, ep1)).status).toBe(200);
  const multiplied = await server.request("/multiply", { a: 6, b: 7 }, ep1);
  expect(multiplied.body).toEqual({ product: 42 });
  const verified = await server.request(
    "/verify",
    { response: answer(text), expected_answer: 42 },
    ep1,
  );
  expect(verified.status).toBe(200);
  return (verified.body as { reward: number }).reward;
}

describe("MultiplierServer", () => {
  it("rewards an answer holding the expected one, and only that", async () => {
    expect(await episode(await start(), "6 times 7 is 42")).toBe(1);
    expect(await episode(await start(), "6 times 7 is 41")).toBe(0);
  });

  it("goes on against a fresh process after a checkpoint at every boundary", async () => {
    const server = await start({ checkpointEvery: "boundary" });
    const first = server.server;
    expect(await episode(server, "42")).toBe(1);
    expect(server.server).not.toBe(first);
  });

  it("exports nothing at a checkpoint", async () => {
    const server = await start();
    await server.request("/seed_session", SEED, ep1);
    expect((await server.checkpoint()).records).toEqual([]);
  });

  it("reads the text of a Responses reply", () => {
    expect(outputText(answer("hi"))).toBe("hi");
    expect(outputText(null)).toBe("");
  });

  it("declares its verify mode on the seed reply", async () => {
    const seeded = await (await start()).request("/seed_session", SEED, ep1);
    expect(seeded.headers.get("x-ng-checkpoint-verify")).toBe(MultiplierServer.checkpointVerify);
  });

  it("refuses a malformed body with 422 naming the field", async () => {
    const server = await start();
    const bad = await server.request("/multiply", { a: 6 }, ep1);
    expect(bad.status).toBe(422);
    expect(bad.body).toMatchObject({
      error: { code: "invalid_request", issues: [expect.objectContaining({ path: ["b"] })] },
    });
    const verify = await server.request("/verify", {}, ep1);
    expect(verify.status).toBe(422);
  });
});
