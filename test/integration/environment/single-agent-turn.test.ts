/**
 * The `single_agent_turn` reference environment server over HTTP, against scripted fake
 * resources and agent servers, with the real control routes: the calls of each stage and their
 * correlation, the failure matrix, restarts, checkpoint interplay, continuation from every stage
 * boundary and lazy boundaries (see docs/environment-server.md).
 */
import request from "supertest";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  ConfigError,
  type BoundaryState,
  type EpisodeHandle,
  type EpisodeOutcome,
  type RunEpisodeInput,
} from "gym-participant-sdk";
import { type ResolvedDeployment } from "gym-participant-sdk/controller";
import SingleAgentTurnServer from "../../../reference-servers/single-agent-turn/src/index.js";
import {
  AGENT_COOKIE,
  fakeResponse,
  startFakeAgentServer,
  type FakeAgentServer,
  type FakeSession,
} from "../../support/fake-agent-server.js";
import {
  RESOURCES_COOKIE,
  startFakeResourcesServer,
  type FakeCall,
  type FakeResourcesServer,
} from "../../support/fake-resources-server.js";
import { makeTempDir, removeTempDir } from "../../support/test-participant.js";
import { CONTROL, controlRoutes } from "../../support/control-routes.js";

const TOKEN = "single-agent-turn-token";
const AUTH = `Bearer ${TOKEN}`;
const on = { enabled: true, control_auth_token: TOKEN, lease_grace_seconds: 600 };
const poll = { timeout: 5000, interval: 5 };
const RCP = { input: "What is 2 + 2?", model: "policy" };
const TASK_DATA = { expected_answer: "4", benchmark_field: { level: 1 } };
const TASK = {
  task_id: { taskset: "arith", task_id: "7" },
  task_input: { responses_create_params: RCP, task_data: TASK_DATA },
};
const R0 = { rollout_id: "r", attempt: 0 };

/** The name of each call, as the tests below write them. */
const LABELS: Record<string, string> = {
  "/seed_session": "seed",
  "/v1/agent_sessions": "agent seed",
  "/v1/responses": "activation",
  "/v1/agent_sessions/close": "agent close",
  "/verify": "verify",
  "/close_session": "close_session",
};
const ALL_CALLS = ["seed", "agent seed", "activation", "agent close", "verify", "close_session"];

let resources: FakeResourcesServer;
let agent: FakeAgentServer;
const started: { close(): Promise<void> }[] = [];
const dirs: string[] = [];

beforeEach(async () => {
  resources = await startFakeResourcesServer();
  agent = await startFakeAgentServer();
});

afterEach(async () => {
  // Fakes first: a call still held would keep an environment server's client from closing.
  await Promise.all([resources.close(), agent.close()]);
  await Promise.all(started.splice(0).map((s) => s.close()));
  await Promise.all(dirs.splice(0).map((d) => removeTempDir(d)));
});

type Checkpoint = typeof on | null;

function deploymentFor(checkpoint: Checkpoint): ResolvedDeployment {
  const entry = (kind: "resources" | "agent", port: number) => ({
    kind,
    url: `http://127.0.0.1:${port}`,
    host: "127.0.0.1",
    port,
    num_workers: 1,
    config: {},
  });
  return {
    checkpoint,
    servers: { resources: entry("resources", resources.port), agent: entry("agent", agent.port) },
  };
}

interface ServeOptions {
  readonly checkpoint?: Checkpoint;
  readonly config?: Record<string, unknown>;
  readonly Server?: typeof SingleAgentTurnServer;
}

function create({ checkpoint = on, config = {}, Server = SingleAgentTurnServer }: ServeOptions) {
  return new Server({
    name: "env",
    ...(checkpoint === null ? {} : { checkpoint }),
    deployment: deploymentFor(checkpoint),
    logLevel: "silent",
    shutdownGraceMs: 100,
    config: {
      cleanup_timeout_seconds: 5,
      resources_server: "resources",
      agent_server: "agent",
      ...config,
    },
  });
}

async function serve(options: ServeOptions = {}) {
  const server = create(options);
  started.push(server);
  const { url } = await server.listen({ port: 0 });
  return { server, url };
}

function run(url: string, episodeId: object = R0, task: object = TASK) {
  return request(url).post("/run").send({ episode_id: episodeId, task });
}

const { control } = controlRoutes(TOKEN);

async function status(url: string) {
  const res = await request(url).get(`${CONTROL}/status`).set("Authorization", AUTH).expect(200);
  return res.body as {
    phase: string;
    report: { ready: boolean; blockers: string[]; restarts: string[] };
  };
}

/** Starts a prepare that has to wait, and resolves once it has closed admission. */
async function startPrepare(url: string, checkpointId = "c1") {
  const prepare = track(control(url, "prepare", { checkpoint_id: checkpointId }));
  await expect.poll(async () => (await status(url)).phase, poll).toBe("preparing");
  expect((await status(url)).report).toMatchObject({ ready: false, blockers: ["r"] });
  return prepare;
}

/** Settles with the outcome of `work` and lets a test check whether it has settled yet. */
function track<T>(work: PromiseLike<T>): { done: () => boolean; value: Promise<T> } {
  let settled = false;
  const value = Promise.resolve(work).finally(() => {
    settled = true;
  });
  value.catch(() => undefined);
  return { done: () => settled, value };
}

/** Every call to both fakes in arrival order (optionally only those of one capture key). */
function allCalls(key?: string): FakeCall[] {
  return [...resources.calls, ...agent.calls]
    .filter((call) => key === undefined || call.captureKey === key)
    .sort((a, b) => a.seq - b.seq);
}

/** The calls, by name (see {@link LABELS}). */
function labels(key?: string): string[] {
  return allCalls(key).map((call) => LABELS[call.route] ?? call.route);
}

function only(server: { callsTo(route: string): FakeCall[] }, route: string): FakeCall {
  const calls = server.callsTo(route);
  expect(calls).toHaveLength(1);
  return calls[0] as FakeCall;
}

/** The boundary the participant would export for `key` now. */
function exported(server: SingleAgentTurnServer, key = "r") {
  return server.participant?.steps.exported().get(key) as Record<string, unknown> | null;
}

describe("the happy path", () => {
  it("makes exactly every stage's calls, in order, under the rollout prefix", async () => {
    const response = fakeResponse("resp-fixed", "4");
    agent.settings.response = response;
    const { url } = await serve();
    const res = await run(url).expect(200);
    expect(labels()).toEqual(ALL_CALLS);
    for (const call of allCalls()) {
      expect(call.captureKey).toBe("r");
      expect(call.path).toBe(`/ng-rollout/r${call.route}`);
    }

    const seed = only(resources, "/seed_session");
    const seedBody = seed.body as Record<string, string>;
    expect(seedBody).toEqual({
      resources_session_id: expect.stringMatching(/^resources-session-[0-9a-f]{32}$/),
      episode_id: R0,
      task_id: TASK.task_id,
      task_data: TASK_DATA,
    });
    expect(seed.headers.cookie).toBeUndefined();
    const sessionId = seedBody.resources_session_id;
    const resourcesJar = { [RESOURCES_COOKIE]: sessionId };

    const agentSeed = only(agent, "/v1/agent_sessions");
    const agentSeedBody = agentSeed.body as Record<string, string>;
    expect(agentSeedBody).toEqual({
      agent_session_id: expect.stringMatching(/^agent-session-[0-9a-f]{32}$/),
      episode_id: R0,
      task_id: TASK.task_id,
      tool_accesses: [],
      sandbox_access: null,
    });
    expect(agentSeed.headers.cookie).toBeUndefined();
    const agentId = agentSeedBody.agent_session_id;

    const activation = only(agent, "/v1/responses");
    expect(activation.body).toEqual(RCP);
    expect(activation.headers["x-ng-agent-activation"]).toBe("1");
    expect(activation.cookies).toEqual({ [AGENT_COOKIE]: agentId });
    for (const call of allCalls().filter((c) => c !== activation)) {
      expect(call.headers["x-ng-agent-activation"]).toBeUndefined();
    }

    const close = only(agent, "/v1/agent_sessions/close");
    expect(close.body).toEqual({ agent_session_id: agentId, episode_id: R0 });
    expect(close.cookies).toEqual({ [AGENT_COOKIE]: agentId });

    const verify = only(resources, "/verify");
    expect(verify.body).toEqual({ ...TASK_DATA, responses_create_params: RCP, response });
    expect(verify.cookies).toEqual(resourcesJar);
    expect(verify.headers["x-ng-checkpoint-close-follows"]).toBeUndefined();

    const closeSession = only(resources, "/close_session");
    expect(closeSession.body).toEqual({ resources_session_id: sessionId, episode_id: R0 });
    expect(closeSession.cookies).toEqual(resourcesJar);

    expect(res.body).toEqual({
      episode_id: R0,
      task_id: TASK.task_id,
      result: {
        ...TASK_DATA,
        responses_create_params: RCP,
        response,
        reward: 1,
        ng_agent_observations: { agent_session_id: agentId, activations: 1 },
      },
      failure: null,
    });
  });

  it("verifies and closes with the cookies the agent's close returned; activation cookies join the agent's", async () => {
    agent.settings.activationCookies = { turn: "one" };
    agent.settings.closeResourcesCookies = { [RESOURCES_COOKIE]: "after-tools", extra: "x" };
    const { url } = await serve();
    await run(url).expect(200);
    const agentId = (only(agent, "/v1/agent_sessions").body as Record<string, string>)
      .agent_session_id;
    expect(only(agent, "/v1/agent_sessions/close").cookies).toEqual({
      [AGENT_COOKIE]: agentId,
      turn: "one",
    });
    const jar = { [RESOURCES_COOKIE]: "after-tools", extra: "x" };
    expect(only(resources, "/verify").cookies).toEqual(jar);
    expect(only(resources, "/close_session").cookies).toEqual(jar);
  });

  it("with checkpointing off makes the same calls without the prefix", async () => {
    const { server, url } = await serve({ checkpoint: null });
    expect(server.participant).toBeNull();
    const res = await run(url).expect(200);
    expect(res.body.result.reward).toBe(1);
    expect(labels()).toEqual(ALL_CALLS);
    for (const call of allCalls()) expect(call.path).toBe(call.route);
  });

  it("grants the resources tools over direct HTTP under the seeding attempt's prefix", async () => {
    const { url } = await serve({ config: { resources_tool_transports: ["direct_http"] } });
    await run(url, { rollout_id: "r", attempt: 2 }).expect(200);
    const sessionId = (only(resources, "/seed_session").body as Record<string, string>)
      .resources_session_id;
    expect(
      (only(agent, "/v1/agent_sessions").body as Record<string, unknown>).tool_accesses,
    ).toEqual([
      {
        kind: "direct_http",
        name: "resources.direct_http",
        required: true,
        base_url: `${resources.url}/ng-rollout/r-a2`,
        cookies: { [RESOURCES_COOKIE]: sessionId },
      },
    ]);
  });

  it("forwards /aggregate_metrics to the resources server", async () => {
    const { url } = await serve();
    const body = { verify_responses: [{ reward: 1 }, { reward: 0 }] };
    const res = await request(url).post("/aggregate_metrics").send(body).expect(200);
    expect(res.body).toEqual({ aggregated: body });
    expect(resources.routes()).toEqual(["/aggregate_metrics"]);
  });
});

describe("validation and startup", () => {
  it("refuses a task input that is not a single_agent_turn one with 422, calling nobody", async () => {
    const { url } = await serve();
    const bad = { ...TASK, task_input: { responses_create_params: RCP } };
    const res = await run(url, R0, bad);
    expect(res.status).toBe(422);
    expect(res.body.error.code).toBe("invalid_request");
    expect(allCalls()).toEqual([]);
  });

  it("refuses settings naming a server the deployment lacks, and a deployment without checkpointing", () => {
    expect(() => create({ config: { agent_server: "nowhere" } }).app()).toThrow(
      /config\.agent_server: names server 'nowhere'/,
    );
    expect(
      () =>
        new SingleAgentTurnServer({
          name: "env",
          checkpoint: on,
          deployment: deploymentFor(null),
          logLevel: "silent",
          config: {},
        }),
    ).toThrow(ConfigError);
  });
});

describe("the failure matrix", () => {
  const upToClose = ["seed", "agent seed", "activation", "agent close"];
  const response = fakeResponse("resp-partial");
  const observations = { transcript: ["closed"] };
  it.each([
    ["resources", "/seed_session", "seed", null, null, ["seed", "close_session"]],
    [
      "agent",
      "/v1/agent_sessions",
      "agent",
      null,
      observations,
      ["seed", "agent seed", "agent close", "close_session"],
    ],
    ["agent", "/v1/responses", "agent", null, observations, [...upToClose, "close_session"]],
    [
      "agent",
      "/v1/agent_sessions/close",
      "cleanup",
      response,
      null,
      [...upToClose, "agent close", "close_session"],
    ],
    [
      "resources",
      "/verify",
      "verification",
      response,
      observations,
      [...upToClose, "verify", "close_session"],
    ],
  ] as const)(
    "a failing %s %s fails stage %s",
    async (which, route, stage, partial, kept, expected) => {
      agent.settings.response = response;
      agent.settings.observations = observations;
      (which === "resources" ? resources : agent).failNext(route, 503);
      const { url } = await serve();
      const res = await run(url).expect(200);
      expect(res.body.result).toBeNull();
      expect(res.body.failure).toEqual({
        failure_reason: expect.stringContaining(`${route} → HTTP 503`),
        terminal: false,
        stage,
        partial_response: partial,
        ng_agent_observations: kept,
      });
      expect(labels()).toEqual(expected);
      for (const call of allCalls()) expect(call.path).toBe(`/ng-rollout/r${call.route}`);
    },
  );

  it("a failing /close_session after success keeps the result and is retried once", async () => {
    resources.failNext("/close_session", 500);
    const { url } = await serve();
    const res = await run(url).expect(200);
    expect(res.body.failure).toBeNull();
    expect(res.body.result.reward).toBe(1);
    expect(labels()).toEqual([...ALL_CALLS, "close_session"]);
  });

  it.each([
    [400, true],
    [404, true],
    [408, false],
    [425, false],
    [429, false],
    [500, false],
    [502, false],
  ])("an HTTP %i is terminal: %s", async (code, terminal) => {
    resources.failNext("/seed_session", code);
    const { url } = await serve();
    const res = await run(url).expect(200);
    expect(res.body.failure).toMatchObject({ stage: "seed", terminal });
  });

  it("a seed reply without a session cookie is a terminal seed failure", async () => {
    resources.settings.cookie = false;
    const { url } = await serve();
    const res = await run(url).expect(200);
    expect(res.body.failure).toEqual({
      failure_reason: "Resources seed did not establish a session cookie",
      terminal: true,
      stage: "seed",
      partial_response: null,
      ng_agent_observations: null,
    });
    expect(labels()).toEqual(["seed", "close_session"]);
  });

  it("an unreachable resources server is a retryable seed failure", async () => {
    await resources.close();
    const { url } = await serve();
    const res = await run(url).expect(200);
    expect(res.body.failure).toMatchObject({ stage: "seed", terminal: false });
  });

  it("the episode deadline during the activation closes the agent, then the resources session", async () => {
    const hold = agent.hold("/v1/responses");
    const { url } = await serve({ config: { default_episode_timeout_seconds: 0.2 } });
    const res = await run(url).expect(200);
    expect(res.body.failure).toEqual({ failure_reason: "Episode timed out", terminal: false });
    expect(labels()).toEqual([...upToClose, "close_session"]);
    hold.release();
  });
});

describe("a retire during the activation", () => {
  it("gets no reply; the unwind closes the agent, then the resources session, before the retire replies", async () => {
    const hold = agent.hold("/v1/responses");
    const { url } = await serve();
    const reply = track(run(url));
    await hold.arrived;
    await control(url, "retire", { checkpoint_id: "x1", episode_ids: [R0] }).expect(200);
    expect(labels()).toEqual(["seed", "agent seed", "activation", "agent close", "close_session"]);
    await expect(reply.value).rejects.toThrow(); // no normal reply
  });
});

describe("an agent failure", () => {
  it("closes the agent session at once, so the failure keeps its observations", async () => {
    agent.settings.observations = { transcript: ["kept"] };
    agent.failNext("/v1/responses", 500);
    const { url } = await serve();
    const res = await run(url).expect(200);
    expect(res.body.failure).toMatchObject({
      stage: "agent",
      partial_response: null,
      ng_agent_observations: { transcript: ["kept"] },
    });
    // Closed once, at once: the unwind finds nothing left to close.
    expect(labels()).toEqual(["seed", "agent seed", "activation", "agent close", "close_session"]);
  });

  it("during an open checkpoint is exported with no boundary, and closes only after resume", async () => {
    agent.settings.observations = { transcript: ["kept"] };
    const hold = agent.hold("/v1/responses");
    const { server, url } = await serve();
    const reply = track(run(url));
    await hold.arrived;
    const prepared = await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    expect(prepared.body.phase).toBe("prepared");
    hold.release({ status: 500, body: { error: { code: "boom", detail: "agent broke" } } });
    await expect.poll(() => server.participant?.steps.stateOf("r"), poll).toBe("parked");
    expect(exported(server)).toBeNull();
    expect((await status(url)).report.ready).toBe(true);
    expect(labels()).toEqual(["seed", "agent seed", "activation"]);
    expect(reply.done()).toBe(false);
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    const res = await reply.value;
    expect(res.body.failure).toMatchObject({
      stage: "agent",
      terminal: false,
      ng_agent_observations: { transcript: ["kept"] },
    });
    expect(labels()).toEqual(["seed", "agent seed", "activation", "agent close", "close_session"]);
  });
});

describe("verify modes", () => {
  it("a replayable verify sends close-follows, and a checkpoint does not wait for it", async () => {
    resources.settings.verifyMode = "replay";
    const hold = resources.hold("/verify");
    const { server, url } = await serve();
    const reply = track(run(url));
    const verify = await hold.arrived;
    expect(verify.headers["x-ng-checkpoint-close-follows"]).toBe("1");
    const prepared = await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    expect(prepared.body.phase).toBe("prepared");
    expect(exported(server)).toMatchObject({
      next: "verify",
      handles: { resources_verify: "replay" },
    });
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    hold.release();
    expect((await reply.value).body.result.reward).toBe(1);
  });

  it.each([["wait"], [null]] as const)(
    "verify mode %s sends no close-follows, and a checkpoint waits for the verify, then parks at return",
    async (mode) => {
      resources.settings.verifyMode = mode;
      resources.settings.reward = 0.5;
      const hold = resources.hold("/verify");
      const { server, url } = await serve();
      const reply = track(run(url));
      const verify = await hold.arrived;
      expect(verify.headers["x-ng-checkpoint-close-follows"]).toBeUndefined();
      const prepare = await startPrepare(url);
      hold.release();
      expect((await prepare.value).body.phase).toBe("prepared");
      expect(server.participant?.steps.stateOf("r")).toBe("parked");
      expect(exported(server)).toMatchObject({ next: "return", result: { reward: 0.5 } });
      expect(labels()).not.toContain("close_session");
      await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
      expect((await reply.value).body.result.reward).toBe(0.5);
    },
  );
});

describe("restarts", () => {
  it.each([["resources"], ["agent"]] as const)(
    "a %s seed reply with x-ng-checkpoint-restart makes the episode a restart: reported, not exported",
    async (which) => {
      if (which === "resources") resources.settings.restart = true;
      else agent.settings.restart = true;
      const hold = agent.hold("/v1/responses");
      const { url } = await serve();
      const reply = track(run(url));
      await hold.arrived;
      const prepared = await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
      expect(prepared.body.report).toMatchObject({ ready: true, blockers: [], restarts: ["r"] });
      const dir = await makeTempDir();
      dirs.push(dir);
      const committed = await control(url, "commit", {
        checkpoint_id: "c1",
        checkpoint_dir: dir,
        episode_ids: null,
      }).expect(200);
      expect(committed.body.episode_ids).toEqual([]);
      await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
      hold.release();
      expect((await reply.value).body.result.reward).toBe(1);
    },
  );

  it("a seed reply without the header leaves the episode continuable", async () => {
    const hold = agent.hold("/v1/responses");
    const { url } = await serve();
    const reply = track(run(url));
    await hold.arrived;
    const prepared = await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    expect(prepared.body.report).toMatchObject({ ready: true, restarts: [] });
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    hold.release();
    await reply.value;
  });

  it("an MCP tool grant makes the episode a restart", async () => {
    resources.settings.resourcesTools = {
      server_name: "arith-tools",
      url_path: "/mcp",
      headers: { authorization: "Bearer session-token" },
    };
    const hold = agent.hold("/v1/responses");
    const { url } = await serve({ config: { resources_tool_transports: ["mcp"] } });
    const reply = track(run(url));
    await hold.arrived;
    expect(
      (only(agent, "/v1/agent_sessions").body as Record<string, unknown>).tool_accesses,
    ).toEqual([
      {
        kind: "mcp",
        name: "arith-tools",
        required: true,
        connection: {
          transport: "streamable_http",
          url: `${resources.url}/mcp`,
          headers: { authorization: "Bearer session-token" },
        },
      },
    ]);
    const prepared = await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    expect(prepared.body.report.restarts).toEqual(["r"]);
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    hold.release();
    expect((await reply.value).body.result.reward).toBe(1);
  });

  it("MCP without the seed's metadata is a terminal seed failure that still closes the agent", async () => {
    const { url } = await serve({ config: { resources_tool_transports: ["mcp"] } });
    const res = await run(url).expect(200);
    expect(res.body.failure).toMatchObject({
      failure_reason: "Resources seed did not return requested MCP metadata",
      terminal: true,
      stage: "seed",
    });
    expect(labels()).toEqual(["seed", "agent close", "close_session"]);
  });
});

describe("checkpoint interplay", () => {
  it("opened during seeding: ready at once, exports next seed with empty cookies", async () => {
    const hold = resources.hold("/seed_session");
    const { server, url } = await serve();
    const reply = track(run(url));
    await hold.arrived;
    const prepared = await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    expect(prepared.body.phase).toBe("prepared");
    expect(exported(server)).toEqual({
      next: "seed",
      handles: {
        resources_session_id: expect.stringMatching(/^resources-session-/),
        resources_cookies: {},
        agent_session_id: expect.stringMatching(/^agent-session-/),
        agent_cookies: {},
        resources_verify: "wait",
      },
    });
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    hold.release();
    expect((await reply.value).body.result.reward).toBe(1);
  });

  it("opened while the activation is in flight: ready at once, exports invoke_agent; a reply before resume parks at close_agent, still ready", async () => {
    const hold = agent.hold("/v1/responses");
    const { server, url } = await serve();
    const reply = track(run(url));
    await hold.arrived;
    const prepared = await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    expect(prepared.body.phase).toBe("prepared");
    const agentId = (only(agent, "/v1/agent_sessions").body as Record<string, string>)
      .agent_session_id;
    expect(exported(server)).toMatchObject({
      next: "invoke_agent",
      handles: { agent_cookies: { [AGENT_COOKIE]: agentId } },
    });
    hold.release();
    await expect.poll(() => server.participant?.steps.stateOf("r"), poll).toBe("parked");
    expect(exported(server)).toMatchObject({
      next: "close_agent",
      response: { status: "completed" },
    });
    expect((await status(url)).report).toMatchObject({ ready: true, blockers: [] });
    expect(labels()).toEqual(["seed", "agent seed", "activation"]);
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    expect((await reply.value).body.result.reward).toBe(1);
    expect(labels()).toEqual(ALL_CALLS);
  });

  it("opened during the agent close: prepare waits for it, then the episode parks at verify", async () => {
    agent.settings.observations = { turns: 1 };
    const hold = agent.hold("/v1/agent_sessions/close");
    const { server, url } = await serve();
    const reply = track(run(url));
    await hold.arrived;
    const prepare = await startPrepare(url);
    hold.release();
    expect((await prepare.value).body.phase).toBe("prepared");
    expect(server.participant?.steps.stateOf("r")).toBe("parked");
    expect(exported(server)).toMatchObject({ next: "verify", observations: { turns: 1 } });
    expect(labels()).toEqual(["seed", "agent seed", "activation", "agent close"]);
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    expect((await reply.value).body.result.ng_agent_observations).toEqual({ turns: 1 });
  });
});

describe("continuation from each stage boundary", () => {
  interface Source {
    readonly dir: string;
    readonly snapshot: Map<string, FakeSession>;
    readonly seed: FakeCall;
    readonly agentSeed: FakeCall;
    readonly result: Record<string, unknown>;
  }

  /** Commits `r` with its boundary at `stage`, lets it finish, and keeps the agent's state. */
  async function checkpointAt(stage: string): Promise<Source> {
    const dir = await makeTempDir();
    dirs.push(dir);
    const { server, url } = await serve();
    const route = {
      seed: "/seed_session",
      invoke_agent: "/v1/responses",
      close_agent: "/v1/responses",
      verify: "/v1/agent_sessions/close",
      return: "/verify",
    }[stage] as string;
    const hold = (route === "/seed_session" || route === "/verify" ? resources : agent).hold(route);
    const reply = track(run(url));
    await hold.arrived;
    if (stage === "seed" || stage === "invoke_agent") {
      // Replay steps: the checkpoint does not wait for them.
      await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    } else {
      const prepare =
        stage === "close_agent"
          ? track(control(url, "prepare", { checkpoint_id: "c1" }))
          : await startPrepare(url); // a wait step: prepare waits for it
      if (stage === "close_agent") await prepare.value;
      hold.release(); // the episode parks at its next boundary
      expect((await prepare.value).body.phase).toBe("prepared");
      await expect.poll(() => server.participant?.steps.stateOf("r"), poll).toBe("parked");
    }
    expect(exported(server)).toMatchObject({ next: stage });
    const committed = await control(url, "commit", {
      checkpoint_id: "c1",
      checkpoint_dir: dir,
      episode_ids: null,
    }).expect(200);
    expect(committed.body.episode_ids).toEqual(["r"]);
    let snapshot = agent.snapshotSessions();
    // At invoke_agent the agent's state is taken after its reply, as when the agent's checkpoint
    // follows the reply the environment's did not see: the restore must not run the turn again.
    const closeHold = stage === "invoke_agent" ? agent.hold("/v1/agent_sessions/close") : null;
    hold.release();
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    if (closeHold !== null) {
      await closeHold.arrived;
      snapshot = agent.snapshotSessions();
      closeHold.release();
    }
    const res = await reply.value;
    expect(res.body.failure).toBeNull();
    return {
      dir,
      snapshot,
      seed: only(resources, "/seed_session"),
      agentSeed: only(agent, "/v1/agent_sessions"),
      result: res.body.result as Record<string, unknown>,
    };
  }

  /** Restores `dir` into a fresh server (the other servers restored too) and runs `r-a1`. */
  async function continueFrom(source: Source) {
    agent.restoreSessions(source.snapshot);
    resources.clearCalls();
    agent.clearCalls();
    const { server, url } = await serve();
    const restored = await control(url, "restore", {
      checkpoint_id: "c2",
      checkpoint_dir: source.dir,
      episode_ids: [R0],
    }).expect(200);
    expect(restored.body.restored).toEqual(["r-a1"]);
    await control(url, "resume", { checkpoint_id: "c2" }).expect(200);
    const res = await run(url, { rollout_id: "r", attempt: 1 }).expect(200);
    return { server, res };
  }

  it.each([
    ["seed", ALL_CALLS],
    ["invoke_agent", ["activation", "agent close", "verify", "close_session"]],
    ["close_agent", ["agent close", "verify", "close_session"]],
    ["verify", ["verify", "close_session"]],
    ["return", ["close_session"]],
  ])("restored at %s, the replacement makes exactly %j", async (stage, expected) => {
    if (stage === "verify") resources.settings.verifyMode = "replay";
    agent.settings.observations = { from: "the first attempt" };
    const source = await checkpointAt(stage);
    agent.settings.observations = { from: "the replacement" };
    resources.settings.verifyMode = null; // a replacement that does not seed keeps the recorded mode
    const { res } = await continueFrom(source);

    expect(labels()).toEqual(expected);
    for (const call of allCalls()) {
      expect(call.captureKey).toBe("r-a1");
      expect(call.path).toBe(`/ng-rollout/r-a1${call.route}`);
    }
    // The same sessions, whatever the entry stage.
    const sessionId = (source.seed.body as Record<string, string>).resources_session_id;
    const agentId = (source.agentSeed.body as Record<string, string>).agent_session_id;
    for (const call of allCalls()) {
      const body = call.body as Record<string, unknown>;
      if (call.route === "/verify") {
        expect(call.cookies).toEqual({ [RESOURCES_COOKIE]: sessionId });
      } else if (call.route === "/seed_session" || call.route === "/close_session") {
        expect(body.resources_session_id).toBe(sessionId);
      } else if (call.route !== "/v1/responses") {
        expect(body.agent_session_id).toBe(agentId);
      }
    }
    const activation = agent.callsTo("/v1/responses")[0];
    if (activation !== undefined) {
      expect(activation.headers["x-ng-agent-activation"]).toBe("1");
      expect(activation.cookies).toEqual({ [AGENT_COOKIE]: agentId });
    }
    if (stage === "invoke_agent") expect(agent.replayed).toHaveLength(1); // the stored reply

    expect(res.body.episode_id).toEqual({ rollout_id: "r", attempt: 1 });
    expect(res.body.failure).toBeNull();
    const { ng_agent_observations: firstObservations, ...firstVerdict } = source.result;
    const { ng_agent_observations: observations, ...verdict } = res.body.result;
    // From invoke_agent on, the first attempt's response is the one verified.
    expect(verdict).toEqual(
      stage === "seed" ? { ...firstVerdict, response: expect.any(Object) } : firstVerdict,
    );
    const closedHere = stage === "seed" || stage === "invoke_agent" || stage === "close_agent";
    expect(observations).toEqual(closedHere ? { from: "the replacement" } : firstObservations);
    if (stage === "verify") {
      expect(only(resources, "/verify").headers["x-ng-checkpoint-close-follows"]).toBe("1");
    }
  });
});

describe("lazy boundaries", () => {
  interface Recorded {
    readonly lazy: boolean;
    built: number;
    next?: unknown;
  }

  /** Records every boundary the protocol gives: eager or a builder, and how often built. */
  class Spying extends SingleAgentTurnServer {
    readonly boundaries: Recorded[] = [];

    protected override runEpisode(input: RunEpisodeInput<this>): Promise<EpisodeOutcome> {
      const { steps } = input;
      const spy: EpisodeHandle = {
        episode: steps.episode,
        captureKey: steps.captureKey,
        signal: steps.signal,
        continuation: () => steps.continuation(),
        boundary: (state: BoundaryState) => {
          if (typeof state !== "function") {
            this.boundaries.push({
              lazy: false,
              built: 0,
              next: (state as { next?: unknown }).next,
            });
            return steps.boundary(state);
          }
          const recorded: Recorded = { lazy: true, built: 0 };
          this.boundaries.push(recorded);
          return steps.boundary(() => {
            recorded.built += 1;
            const built = state();
            recorded.next = (built as { next?: unknown }).next;
            return built;
          });
        },
        step: (mode, fn) => steps.step(mode, fn),
        markRestart: (signal) => steps.markRestart(signal),
        markRestartFrom: (headers, signal) => steps.markRestartFrom(headers, signal),
      };
      return super.runEpisode({ ...input, steps: spy });
    }
  }

  it("with checkpointing off, the verify result is never serialized: no later boundary is built", async () => {
    const { server, url } = await serve({ checkpoint: null, Server: Spying });
    await run(url).expect(200);
    const spying = server as Spying;
    expect(spying.boundaries).toEqual([
      { lazy: false, built: 0, next: "seed" },
      { lazy: false, built: 0, next: "invoke_agent" },
      { lazy: true, built: 0 },
      { lazy: true, built: 0 },
      { lazy: true, built: 0 },
    ]);
  });

  it("with checkpointing on, each is built once, when recorded", async () => {
    const { server, url } = await serve({ Server: Spying });
    await run(url).expect(200);
    expect((server as Spying).boundaries.filter((b) => b.lazy)).toEqual([
      { lazy: true, built: 1, next: "close_agent" },
      { lazy: true, built: 1, next: "verify" },
      { lazy: true, built: 1, next: "return" },
    ]);
  });
});
