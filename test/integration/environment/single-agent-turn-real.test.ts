/**
 * `single_agent_turn` against real SDK servers instead of fakes: the reference counter
 * (resources, `exported`) and a minimal restart-only agent, all with checkpointing on, so the
 * wire shapes, cookies and rollout prefixes are the ones the SDK servers accept.
 */
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import { AgentServer, type RespondInput, type RespondResult } from "gym-participant-sdk";
import { type ResolvedDeployment } from "gym-participant-sdk/controller";
import CounterServer from "../../../reference-servers/counter/src/index.js";
import SingleAgentTurnServer from "../../../reference-servers/single-agent-turn/src/index.js";
import { deferred, type Deferred } from "#sdk/util/deferred.js";
import { CONTROL } from "../../support/control-routes.js";

const TOKEN = "real-token";
const on = { enabled: true, control_auth_token: TOKEN, lease_grace_seconds: 600 };
const TASK = {
  task_id: { taskset: "counter", task_id: "1" },
  task_input: {
    responses_create_params: { input: "Leave the counter at 0." },
    task_data: { initial_count: 0, target: 0 },
  },
};

/** Answers every activation with one assistant message (once `gate` opens, if set). */
class EchoAgent extends AgentServer {
  readonly seen: { input: unknown; rollout: string | null }[] = [];
  readonly arrived = deferred<void>();
  gate: Deferred<void> | null = null;

  protected override async respond({
    body,
    rollout,
  }: RespondInput<unknown>): Promise<RespondResult> {
    this.seen.push({ input: body.input, rollout: rollout?.captureKey ?? null });
    this.arrived.resolve();
    await this.gate?.promise;
    return {
      response: {
        id: `resp-${this.seen.length}`,
        object: "response",
        status: "completed",
        output: [
          {
            type: "message",
            role: "assistant",
            content: [{ type: "output_text", text: "0" }],
          },
        ],
      },
    };
  }
}

const started: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map((s) => s.close()));
});

/** Starts `server` and returns its entry in the resolved deployment. */
async function listen(server: CounterServer | EchoAgent, kind: "resources" | "agent") {
  started.push(server);
  const { port } = await server.listen({ port: 0 });
  const url = `http://127.0.0.1:${port}`;
  return { kind, url, host: "127.0.0.1", port, num_workers: 1, config: {} };
}

async function deploy() {
  const common = { checkpoint: on, logLevel: "silent" as const };
  const counter = new CounterServer({ name: "counter", ...common });
  const agent = new EchoAgent({ name: "agent", ...common });
  const deployment: ResolvedDeployment = {
    checkpoint: on,
    servers: {
      counter: await listen(counter, "resources"),
      agent: await listen(agent, "agent"),
    },
  };
  const env = new SingleAgentTurnServer({
    name: "env",
    ...common,
    deployment,
    config: {
      cleanup_timeout_seconds: 5,
      resources_server: "counter",
      agent_server: "agent",
      resources_tool_transports: ["direct_http"],
    },
  });
  started.push(env);
  const { url } = await env.listen({ port: 0 });
  return { url, counter, agent };
}

describe("single_agent_turn with real SDK servers", () => {
  it("runs an episode end to end and closes both sessions", async () => {
    const { url, counter, agent } = await deploy();
    const res = await request(url)
      .post("/run")
      .send({ episode_id: { rollout_id: "r", attempt: 1 }, task: TASK })
      .expect(200);
    expect(res.body.failure).toBeNull();
    expect(res.body.result).toMatchObject({
      reward: 1,
      initial_count: 0,
      target: 0,
      response: { id: "resp-1" },
      ng_agent_observations: null,
    });
    expect(agent.seen).toEqual([{ input: "Leave the counter at 0.", rollout: "r-a1" }]);
    // Both sessions were closed: nothing is left tracked anywhere.
    expect(counter.states.size).toBe(0);
    const status = await request(url)
      .get(`${CONTROL}/status`)
      .set("Authorization", `Bearer ${TOKEN}`)
      .expect(200);
    expect(status.body.report).toMatchObject({ ready: true, restarts: [] });
  });

  it("an agent without session hooks makes the episode a restart through its seed reply", async () => {
    const { url, agent } = await deploy();
    agent.gate = deferred<void>();
    const reply = Promise.resolve(
      request(url)
        .post("/run")
        .send({ episode_id: { rollout_id: "r" }, task: TASK }),
    );
    await agent.arrived.promise;
    const prepared = await request(url)
      .post(`${CONTROL}/prepare`)
      .set("Authorization", `Bearer ${TOKEN}`)
      .send({ checkpoint_id: "c1", deadline_ts: Date.now() / 1000 + 30 })
      .expect(200);
    expect(prepared.body.report).toMatchObject({ ready: true, restarts: ["r"] });
    await request(url)
      .post(`${CONTROL}/resume`)
      .set("Authorization", `Bearer ${TOKEN}`)
      .send({ checkpoint_id: "c1", deadline_ts: Date.now() / 1000 + 30 })
      .expect(200);
    agent.gate.resolve();
    expect((await reply).body.result.reward).toBe(1);
  });
});
