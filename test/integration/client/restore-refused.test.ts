/**
 * A restore every participant refuses, on the reference deployment in one process: the SDK's
 * rollback still retires the replacement attempts on every participant, so a later `/run` of a
 * replacement is refused with 409 `stale_attempt` and a `/run` of the attempt after it runs.
 */
import path from "node:path";
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import type { ResolvedDeployment, ServerKind } from "gym-participant-sdk/controller";
import {
  CoordinationError,
  discover,
  restore,
  status,
  type Participants,
} from "#sdk/client/coordination.js";
import { ServerClient } from "#sdk/client/server-client.js";
import { episodeId } from "#sdk/identity/episode-id.js";
import CounterServer from "../../../reference-servers/counter/src/index.js";
import FakeInferenceServer from "../../../reference-servers/fake-inference/src/index.js";
import PolicyModel from "../../../reference-servers/policy-model/src/index.js";
import SimpleAgent from "../../../reference-servers/simple-agent/src/index.js";
import SingleAgentTurnServer from "../../../reference-servers/single-agent-turn/src/index.js";
import { makeTempDir, removeTempDir } from "../../support/test-participant.js";

const TOKEN = "restore-refused-token";
const checkpoint = { enabled: true, control_auth_token: TOKEN, lease_grace_seconds: 600 };
const silent = { logLevel: "silent", shutdownGraceMs: 50 } as const;

const started: { close(): Promise<void> | void }[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const server of started.splice(0).reverse()) await server.close();
  for (const dir of dirs.splice(0)) await removeTempDir(dir);
});

type Listen = (options: { port?: number }) => Promise<{ url: string }>;

/** The reference deployment, freshly started: the environment's URL and the participants. */
async function deploy(): Promise<{ dir: string; envUrl: string; participants: Participants }> {
  const dir = await makeTempDir();
  dirs.push(dir);
  const deployment: ResolvedDeployment = { checkpoint, servers: {} };
  const start = async (name: string, kind: ServerKind, server: { listen: Listen }) => {
    started.push(server as unknown as { close(): Promise<void> });
    const { url } = await server.listen({ port: 0 });
    const { hostname, port } = new URL(url);
    deployment.servers[name] = {
      kind,
      url,
      host: hostname,
      port: Number(port),
      num_workers: 1,
      config: {},
    };
    return url;
  };
  const inference = new FakeInferenceServer({
    name: "inference",
    config: { token_store_dir: path.join(dir, "tokens"), control_token: TOKEN },
    ...silent,
  });
  await start("inference", "backend", inference);
  const policy = new PolicyModel({
    name: "policy",
    checkpoint,
    deployment,
    config: { backend_server: "inference", capture_dir: path.join(dir, "capture") },
    ...silent,
  });
  await start("policy", "model", policy);
  await start(
    "counter",
    "resources",
    new CounterServer({ name: "counter", checkpoint, ...silent }),
  );
  const agent = new SimpleAgent({
    name: "simple_agent",
    checkpoint,
    deployment,
    config: { model_server: "policy" },
    ...silent,
  });
  await start("simple_agent", "agent", agent);
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
  const envUrl = await start("counter_env", "environment", env);
  const client = new ServerClient(deployment);
  started.push(client);
  return { dir, envUrl, participants: await discover(client, TOKEN) };
}

/** A counter task: increment once, then answer. */
const TASK = {
  task_id: { taskset: "counter", task_id: "1" },
  task_input: {
    responses_create_params: {
      input: "Increment the counter once.",
      tools: [
        {
          type: "function",
          name: "increment_counter",
          description: "Add count to the counter",
          parameters: {
            type: "object",
            properties: { count: { type: "integer" } },
            required: ["count"],
          },
        },
      ],
    },
    task_data: { initial_count: 0, target: 1 },
  },
};

describe("a restore refused by every participant", () => {
  it("retires the replacement attempts everywhere: a later /run of one is 409 stale_attempt", async () => {
    const { dir, envUrl, participants } = await deploy();
    const error = await restore(participants, {
      checkpointId: "c1",
      // No checkpoint was ever written here: every participant refuses it as it reads.
      checkpointDir: path.join(dir, "no-such-checkpoint"),
      episodeIds: [episodeId("r1", 0)],
      deadlineTs: Date.now() / 1000 + 30,
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CoordinationError);
    const codes = (error as CoordinationError).codes();
    expect(Object.keys(codes).sort()).toEqual(
      participants.members.map((member) => member.name).sort(),
    );
    expect(new Set(Object.values(codes))).toEqual(new Set(["invalid_checkpoint_state"]));

    // Every participant holds the retired mark, and every one is open again.
    for (const [name, s] of Object.entries(await status(participants))) {
      expect(s.phase, name).toBe("idle");
      expect(s.retired_rollouts, name).toBe(1);
    }
    const replacement = await request(envUrl)
      .post("/run")
      .send({ episode_id: { rollout_id: "r1", attempt: 1 }, task: TASK });
    expect(replacement.status, JSON.stringify(replacement.body)).toBe(409);
    expect(replacement.body.error.code).toBe("stale_attempt");
    expect(replacement.body.error.detail).toContain("r1-a1");

    // The rollout starts over as the attempt after the retired replacement.
    const next = await request(envUrl)
      .post("/run")
      .send({ episode_id: { rollout_id: "r1", attempt: 2 }, task: TASK });
    expect(next.status, JSON.stringify(next.body).slice(0, 2000)).toBe(200);
    expect(next.body.result.reward).toBe(1);
  });
});
