/**
 * The reference deployment in one process: `counter_env` (`single_agent_turn`) driving the
 * reference counter and the Simple Agent, whose model is the reference policy model server in
 * front of the fake inference backend, with checkpointing and token capture on. It runs a
 * rollout whose ID is 300 characters long end to end (rollout IDs have no maximum length), and
 * aggregates verify responses through `/aggregate_metrics`.
 */
import path from "node:path";
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import type { ResolvedDeployment, ServerKind } from "gym-participant-sdk/controller";
import CounterServer from "../../../reference-servers/counter/src/index.js";
import FakeInferenceServer from "../../../reference-servers/fake-inference/src/index.js";
import PolicyModel from "../../../reference-servers/policy-model/src/index.js";
import SimpleAgent from "../../../reference-servers/simple-agent/src/index.js";
import SingleAgentTurnServer from "../../../reference-servers/single-agent-turn/src/index.js";
import { makeTempDir, removeTempDir } from "../../support/test-participant.js";

const TOKEN = "reference-stack-token";
const checkpoint = { enabled: true, control_auth_token: TOKEN, lease_grace_seconds: 600 };
const silent = { logLevel: "silent", shutdownGraceMs: 50 } as const;

const started: { close(): Promise<void> }[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const server of started.splice(0).reverse()) await server.close();
  for (const dir of dirs.splice(0)) await removeTempDir(dir);
});

/** The counter tool as a task offers it. */
const COUNTER_TOOL = {
  type: "function",
  name: "increment_counter",
  description: "Add count to the counter",
  parameters: {
    type: "object",
    properties: { count: { type: "integer" } },
    required: ["count"],
  },
};

/** A counter task: increment once, then answer; rewarded 1 when the count is 1. */
function counterTask(taskId: string) {
  return {
    task_id: { taskset: "counter", task_id: taskId },
    task_input: {
      responses_create_params: { input: "Increment the counter once.", tools: [COUNTER_TOOL] },
      task_data: { initial_count: 0, target: 1 },
    },
  };
}

async function deploy() {
  const dir = await makeTempDir();
  dirs.push(dir);
  const deployment: ResolvedDeployment = { checkpoint, servers: {} };
  const register = (name: string, kind: ServerKind, url: string): void => {
    const { hostname, port } = new URL(url);
    deployment.servers[name] = {
      kind,
      url,
      host: hostname,
      port: Number(port),
      num_workers: 1,
      config: {},
    };
  };
  const start = async (name: string, kind: ServerKind, server: { listen: Listen }) => {
    started.push(server as unknown as { close(): Promise<void> });
    const { url } = await server.listen({ port: 0 });
    register(name, kind, url);
    return url;
  };
  // The fake backend runs the built-in script: one call of the first tool offered, its
  // required parameters filled in (`count: 1`), then "done".
  const inference = new FakeInferenceServer({
    name: "inference",
    config: { token_store_dir: path.join(dir, "tokens"), control_token: TOKEN },
    ...silent,
  });
  await start("inference", "backend", inference);
  const captureDir = path.join(dir, "capture");
  const policy = new PolicyModel({
    name: "policy",
    checkpoint,
    deployment,
    config: { backend_server: "inference", capture_dir: captureDir },
    ...silent,
  });
  await start("policy", "model", policy);
  const counter = new CounterServer({ name: "counter", checkpoint, ...silent });
  await start("counter", "resources", counter);
  const agent = new SimpleAgent({
    name: "simple_agent",
    checkpoint,
    deployment,
    config: { model_server: "policy" },
    ...silent,
  });
  const agentUrl = await start("simple_agent", "agent", agent);
  const env = new SingleAgentTurnServer({
    name: "counter_env",
    checkpoint,
    deployment,
    config: {
      cleanup_timeout_seconds: 5,
      resources_server: "counter",
      agent_server: "simple_agent",
      resources_tool_transports: ["direct_http"],
    },
    ...silent,
  });
  const url = await start("counter_env", "environment", env);
  return { url, policy, inference, counter, agentUrl, deployment };
}

type Listen = (options: { port?: number }) => Promise<{ url: string }>;

describe("the reference deployment", () => {
  it("runs a rollout with a 300-character ID through agent, policy model and backend", async () => {
    const { url, policy, inference, counter } = await deploy();
    const rolloutId = `r${"x".repeat(299)}`;
    const res = await request(url)
      .post("/run")
      .send({ episode_id: { rollout_id: rolloutId, attempt: 0 }, task: counterTask("1") });
    expect(res.status, JSON.stringify(res.body).slice(0, 2000)).toBe(200);
    expect(res.body.failure).toBeNull();
    expect(res.body.result.reward).toBe(1);
    // Both model calls were captured under the long key, and the counter's session is closed.
    const rows = (await policy.ledger?.rows(rolloutId)) ?? [];
    expect(rows.map((row) => row.mode)).toEqual(["text", "token_in"]);
    expect(inference.calls.calls().map((call) => call.capture)).toEqual(["staged", "staged"]);
    expect(counter.states.size).toBe(0);
  });

  it("answers the agent's caller 422, not 502, when the model finds the caller's input invalid", async () => {
    const { agentUrl } = await deploy();
    const res = await request(agentUrl)
      .post("/ng-rollout/bad-input/v1/responses")
      .send({ input: [{ content: "no type, no role" }], tools: [{ name: "t" }] });
    expect(res.status, JSON.stringify(res.body)).toBe(422);
    expect(res.body.error.code).toBe("invalid_request");
    expect(res.body.error.detail).toMatch(
      /^the model server refused the request built from this input/,
    );
    expect(res.body.error.issues.length).toBeGreaterThan(0);
  });

  it("answers the agent's caller 409 stale_attempt, not 502, when the model has the attempt retired", async () => {
    const { agentUrl, deployment } = await deploy();
    // A retire reached the model only (the agent has not heard of it).
    const retired = await request(deployment.servers.policy!.url)
      .post("/ng-control/v1/checkpoint/retire")
      .set("authorization", `Bearer ${TOKEN}`)
      .send({
        checkpoint_id: "retire-1",
        deadline_ts: Date.now() / 1000 + 30,
        episode_ids: [{ rollout_id: "r-1", attempt: 2 }],
      });
    expect(retired.status, JSON.stringify(retired.body)).toBe(200);
    const res = await request(agentUrl)
      .post("/ng-rollout/r-1-a1/v1/responses")
      .send({ input: "hi" });
    expect(res.status, JSON.stringify(res.body)).toBe(409);
    expect(res.body.error.code).toBe("stale_attempt");
    expect(res.body.error.detail).toMatch(/^the model server refused it: attempt 'r-1-a1'/);
  });

  it("refuses verify responses that are not objects on /aggregate_metrics (422, not 502)", async () => {
    const { url } = await deploy();
    const res = await request(url)
      .post("/aggregate_metrics")
      .send({ verify_responses: [1, "x"] });
    expect(res.status, JSON.stringify(res.body)).toBe(422);
    expect(res.body.error.code).toBe("invalid_request");
  });

  it("aggregates verify responses on /aggregate_metrics of counter_env", async () => {
    const { url } = await deploy();
    const res = await request(url)
      .post("/aggregate_metrics")
      .send({
        verify_responses: [
          { _ng_task_index: 0, _ng_rollout_index: 0, reward: 1, mask_sample: false },
          { _ng_task_index: 0, _ng_rollout_index: 1, reward: 0, mask_sample: false },
          { _ng_task_index: 1, _ng_rollout_index: 0, reward: 1, mask_sample: true },
        ],
      });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.key_metrics).toEqual({ "mean/reward": 2 / 3 });
    expect(res.body.agent_metrics).toMatchObject({
      "mean/reward": 2 / 3,
      "max/reward": 1,
      "min/reward": 0,
      "median/reward": 1,
      "mean/mask_sample": 1 / 3,
    });
    expect(res.body.agent_metrics["std/reward"]).toBeCloseTo(Math.sqrt(1 / 3), 12);
    expect(res.body.group_level_metrics).toEqual([
      expect.objectContaining({ _ng_task_index: 0, "mean/reward": 0.5, "std/reward": 0.5 ** 0.5 }),
      expect.objectContaining({ _ng_task_index: 1, "mean/reward": 1, "std/reward": 0 }),
    ]);

    const invalid = await request(url).post("/aggregate_metrics").send({ verify_responses: 3 });
    expect(invalid.status).toBe(422);
    expect(invalid.body.error.code).toBe("invalid_request");
  });
});
