/**
 * The surface every server kind shares: typed `config:` settings on a kind's base schema,
 * `extraRoutes()`, the environment's `runRequest`, and the opt-in in-memory session
 * state of `SessionStateServer` (export, restore, retire and close written for the author).
 */
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { ConfigError } from "#sdk/errors.js";
import { parseEpisodeId } from "#sdk/identity/episode-id.js";
import type { JsonValue } from "#sdk/json/json-value.js";
import { AgentConfigSchema, AgentServer, type AgentConfig } from "#sdk/server/agent-server.js";
import type { RespondResult } from "#sdk/server/agent/agent-hooks.js";
import { dataRoute } from "#sdk/server/data-route.js";
import {
  EnvironmentServer,
  type EpisodeOutcome,
  type RunEpisodeInput,
} from "#sdk/server/environment-server.js";
import { RunRequestSchema } from "#sdk/wire/environment.js";
import type { VerifyInput } from "#sdk/server/resources-server.js";
import { SessionStateServer } from "#sdk/server/resources/session-state-server.js";
import type { Server } from "#sdk/server/server.js";

const TOKEN = "surface-token";
const silent = { logLevel: "silent", shutdownGraceMs: 50 } as const;
const on = { enabled: true, control_auth_token: TOKEN };
const started: Server[] = [];
afterEach(async () => {
  for (const server of started.splice(0)) await server.close();
});
function track<S extends Server>(server: S): S {
  started.push(server);
  return server;
}

// ---- Typed config and extra routes ------------------------------------------------------------

type GreeterConfig = AgentConfig & { greeting: string };

class Greeter extends AgentServer<unknown, GreeterConfig> {
  protected override configSchema() {
    return AgentConfigSchema.extend({ greeting: z.string().min(1) });
  }
  protected override async respond(): Promise<RespondResult> {
    return { response: { output_text: this.config.greeting } };
  }
  protected override extraRoutes() {
    return [
      dataRoute({
        method: "get",
        path: "/settings",
        summary: "The validated settings",
        handler: () => ({
          greeting: this.config.greeting,
          window: this.config.session_close_retry_window_seconds,
        }),
      }),
    ];
  }
}

describe("typed settings and extra routes", () => {
  it("an agent's config extends the kind's base schema (defaults kept) and its extra route is served and documented", async () => {
    const server = track(new Greeter({ name: "greeter", config: { greeting: "hi" }, ...silent }));
    const res = await request(server.app()).get("/settings").expect(200);
    expect(res.body).toEqual({ greeting: "hi", window: 300 });
    const reply = await request(server.app()).post("/v1/responses").send({ input: "x" });
    expect(reply.body).toEqual({ output_text: "hi" });
    expect(Object.keys(server.openApiDocument().paths ?? {})).toContain("/settings");
  });

  it("a bad setting fails the start naming the key", () => {
    const server = track(new Greeter({ name: "greeter", config: { greeting: "" }, ...silent }));
    expect(() => server.app()).toThrow(ConfigError);
    expect(() => server.app()).toThrow(/config\.greeting/);
  });
});

// ---- The environment's run-request schema -----------------------------------------------------

const NumberTask = RunRequestSchema.extend({
  task: z.strictObject({
    task_id: RunRequestSchema.shape.task.shape.task_id,
    task_input: z.strictObject({ n: z.int() }),
  }),
});

class Doubler extends EnvironmentServer {
  readonly runs: number[] = [];
  override readonly runRequest = NumberTask;
  protected override async runEpisode({ body }: RunEpisodeInput<this>): Promise<EpisodeOutcome> {
    const { n } = body.task.task_input;
    this.runs.push(n);
    return { result: n * 2 };
  }
}

describe("runRequest", () => {
  const task = (input: unknown) => ({ task_id: { taskset: "t", task_id: "1" }, task_input: input });

  it("refuses a task the schema refuses with 422 before any episode runs", async () => {
    const server = track(
      new Doubler({ name: "env", config: { cleanup_timeout_seconds: 5 }, ...silent }),
    );
    const bad = await request(server.app())
      .post("/run")
      .send({ episode_id: { rollout_id: "r", attempt: 0 }, task: task({ n: "two" }) });
    expect(bad.status).toBe(422);
    expect(bad.body.error.code).toBe("invalid_request");
    expect(server.runs).toEqual([]);
    const good = await request(server.app())
      .post("/run")
      .send({ episode_id: { rollout_id: "r", attempt: 0 }, task: task({ n: 2 }) })
      .expect(200);
    expect(good.body.result).toBe(4);
    expect(server.runs).toEqual([2]);
  });
});

// ---- SessionStateServer -----------------------------------------------------------------------

class Tally extends SessionStateServer<number> {
  protected override readonly stateSchema = z.number().int().min(0);
  protected override initialState() {
    return 0;
  }
  protected override tools() {
    const add = z.strictObject({ amount: z.number() });
    return [
      this.stateTool({
        path: "/add",
        summary: "Add to the total",
        request: add,
        handler: ({ body, state, setState }) => ({
          kept: state !== undefined && setState(state + body.amount),
          total: state === undefined ? null : state + body.amount,
        }),
      }),
    ];
  }
  override readonly verifyRequest = z.looseObject({ target: z.number().optional() });
  protected override verify({ body, session }: VerifyInput<this>) {
    return { reward: this.states.get(session.id) === body.target ? 1 : 0 };
  }
}

const tally = () => track(new Tally({ name: "tally", checkpoint: on, ...silent }));
const signal = () => new AbortController().signal;

describe("SessionStateServer", () => {
  it("keys a seeded session by its resources_session_id, keeps its state and frees it at close", async () => {
    const server = tally();
    const agent = request.agent(server.app());
    const seeded = await agent
      .post("/ng-rollout/r/seed_session")
      .send({ resources_session_id: "s1" })
      .expect(200);
    expect(seeded.body).toEqual({ resources_session_id: "s1" });
    await agent.post("/ng-rollout/r/add").send({ amount: 2 }).expect(200);
    expect(server.states.get("s1")).toBe(2);
    const closed = await agent.post("/ng-rollout/r/close_session").send({}).expect(200);
    expect(closed.body).toEqual({ resources_session_id: "s1" });
    expect(server.states.size).toBe(0);
  });

  it("refuses a state its schema refuses with 422 and keeps the old one; keeps nothing for an unseeded session", async () => {
    const server = tally();
    const agent = request.agent(server.app());
    await agent.post("/ng-rollout/r/seed_session").send({}).expect(200);
    const res = await agent.post("/ng-rollout/r/add").send({ amount: -5 });
    expect(res.status).toBe(422);
    expect([...server.states.values()]).toEqual([0]);
    const stranger = await request(server.app())
      .post("/ng-rollout/q/add")
      .send({ amount: 1 })
      .expect(200);
    expect(stranger.body).toEqual({ kept: false, total: null });
    expect(server.states.size).toBe(1);
  });

  it("exports every held state and a fresh server restores them; a retire frees one", async () => {
    const server = tally();
    const agent = request.agent(server.app());
    await agent.post("/ng-rollout/r/seed_session").send({ resources_session_id: "s" }).expect(200);
    await agent.post("/ng-rollout/r/add").send({ amount: 7 }).expect(200);
    const records = await server.participant!.export(null, signal());
    expect(records.map((r) => [r.session_id, r.state])).toEqual([["s", 7]]);

    const fresh = tally();
    await fresh.participant!.install(
      records,
      [parseEpisodeId({ rollout_id: "r", attempt: 0 })],
      signal(),
    );
    expect(fresh.states.get("s")).toBe(7);
    await fresh.participant!.retire(parseEpisodeId({ rollout_id: "r", attempt: 1 }), signal());
    expect(fresh.states.size).toBe(0);
  });

  it("parses each restored state once and installs it as its schema parsed it", async () => {
    let parses = 0;
    const Labelled = z
      .object({ count: z.number(), label: z.string().default("none") })
      .transform((state) => {
        parses += 1;
        return state;
      });
    class LabelledTally extends SessionStateServer<z.infer<typeof Labelled>> {
      protected override readonly stateSchema = Labelled;
      protected override initialState() {
        return { count: 0, label: "none" };
      }
      protected override verify() {
        return { reward: 0 };
      }
    }
    const fresh = track(new LabelledTally({ name: "labelled", checkpoint: on, ...silent }));
    const episode = (rollout: string) => parseEpisodeId({ rollout_id: rollout, attempt: 0 });
    const record = (rollout: string, session: string, state: JsonValue) => ({
      episode_id: episode(rollout),
      session_id: session,
      owner: null,
      state,
    });
    await fresh.participant!.install(
      [record("r1", "s1", { count: 3, extra: true }), record("r2", "s2", { count: 5 })],
      [episode("r1"), episode("r2")],
      signal(),
    );
    expect(parses).toBe(2);
    expect(fresh.states.get("s1")).toEqual({ count: 3, label: "none" });
    expect(fresh.states.get("s2")).toEqual({ count: 5, label: "none" });
  });

  it("refuses a restored state its schema refuses, installing nothing", async () => {
    const server = tally();
    const agent = request.agent(server.app());
    await agent.post("/ng-rollout/r/seed_session").send({ resources_session_id: "s" }).expect(200);
    const [record] = await server.participant!.export(null, signal());
    const fresh = tally();
    const bad = { ...record!, state: -1 };
    await expect(
      fresh.participant!.install(
        [bad],
        [parseEpisodeId({ rollout_id: "r", attempt: 0 })],
        signal(),
      ),
    ).rejects.toThrow();
    expect(fresh.states.size).toBe(0);
  });
});
