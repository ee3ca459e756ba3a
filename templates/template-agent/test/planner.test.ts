/**
 * The planner agent through the SDK's test kit: a real server in process, driven over HTTP the
 * way an environment server drives an agent (seed, activations, close), checkpointed and
 * restored into fresh instances.
 */
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { Server, dataRoute } from "gym-participant-sdk";
import {
  startTestServer,
  type TestServer,
  type TestServerOptions,
} from "gym-participant-sdk/testing";
import { outputText } from "gym-participant-sdk/protocol";
import PlannerAgent from "../src/index.js";

const ep1 = { rollout: "ep1" };

const closing: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const handle of closing.splice(0).reverse()) await handle.close();
});

async function start(options: TestServerOptions = {}): Promise<TestServer<PlannerAgent>> {
  const handle = await startTestServer(PlannerAgent, { name: "planner", ...options });
  closing.push(handle);
  return handle;
}

/** A whole session: seed, two activations ("hi", then "bye"), close. */
async function session(agent: TestServer<PlannerAgent>, sessionId = "s1") {
  const seed = {
    agent_session_id: sessionId,
    episode_id: agent.episodeOf("ep1"),
    task_id: { taskset: "demo", task_id: "1" },
  };
  expect((await agent.request("/v1/agent_sessions", seed, ep1)).status).toBe(200);
  const answers: string[] = [];
  for (const [index, input] of ["hi", "bye"].entries()) {
    const reply = await agent.request(
      "/v1/responses",
      { input },
      // The activation's index makes it idempotent: a replacement sends the same one.
      { ...ep1, headers: { "x-ng-agent-activation": String(index + 1) } },
    );
    expect(reply.status).toBe(200);
    answers.push(outputText(reply.body));
  }
  const closed = await agent.request(
    "/v1/agent_sessions/close",
    { agent_session_id: sessionId, episode_id: agent.episodeOf("ep1") },
    ep1,
  );
  expect(closed.status).toBe(200);
  return {
    answers,
    observations: (closed.body as { agent_observations: unknown }).agent_observations,
  };
}

const EXPECTED = {
  answers: [
    "#1 #1 Plan an answer to: hi | Now answer: hi",
    "#2 #2 Plan an answer to: bye | Now answer: bye",
  ],
  observations: {
    turns: [
      { input: "hi", output: "#1 #1 Plan an answer to: hi | Now answer: hi" },
      { input: "bye", output: "#2 #2 Plan an answer to: bye | Now answer: bye" },
    ],
  },
};

describe("PlannerAgent", () => {
  it("plans, then answers, keeping every turn of the session", async () => {
    expect(await session(await start())).toEqual(EXPECTED);
  });

  it("loses nothing when checkpointed and restored into a fresh process at every boundary", async () => {
    const agent = await start({ checkpointEvery: "boundary" });
    expect(await session(agent)).toEqual(EXPECTED);
    // Each activation was restored at its two boundaries and after it ended, the seed once.
    expect(agent.attemptOf("ep1")).toBe(7);
  });

  it("exports and restores a session whose ID is __proto__ like any other", async () => {
    // Session IDs are the caller's: one named like a prototype member is still an own key.
    const agent = await start({ checkpointEvery: "boundary" });
    expect(await session(agent, "__proto__")).toEqual(EXPECTED);
    expect(agent.attemptOf("ep1")).toBe(7);
  });

  it("calls the deployment's policy model when model_server is set", async () => {
    class FakePolicy extends Server {
      protected override routes() {
        return [
          dataRoute({
            method: "post",
            path: "/v1/responses",
            summary: "Answer with the number of input messages",
            request: z.looseObject({ input: z.array(z.unknown()) }),
            handler: ({ body }) => {
              const text = `${body.input.length} messages`;
              return { output: [{ type: "message", content: [{ type: "output_text", text }] }] };
            },
          }),
        ];
      }
    }
    const policy = new FakePolicy({ name: "policy" });
    const { url, port } = await policy.listen({ port: 0 });
    closing.push(policy);
    const agent = await start({
      config: { model_server: "policy" },
      serverOptions: {
        deployment: {
          checkpoint: null,
          servers: {
            policy: { kind: "model", url, host: "127.0.0.1", port, num_workers: 1, config: {} },
          },
        },
      },
    });
    // The second activation sends the first turn (two messages) before its prompt.
    expect((await session(agent)).answers).toEqual(["1 messages", "3 messages"]);
  });
});
