/**
 * A server's declared request schemas type its hooks and validate its routes: `verifyRequest`
 * types `verify`'s body, `seedRequest` the seed's, `runRequest` an environment's `runEpisode`,
 * and a state tool's `request` and `reply` its handler. The `expectTypeOf` calls and
 * `@ts-expect-error` lines are checked by the repository's typecheck (each fails it if the
 * typing it pins were missing); the requests check that each hook gets its schema's parse
 * output (defaults filled, transforms applied) and that a body the schema refuses is a 422.
 */
import request from "supertest";
import { afterEach, describe, expect, expectTypeOf, it } from "vitest";
import { z } from "zod";
import {
  EnvironmentServer,
  type EpisodeOutcome,
  type RunEpisodeInput,
} from "#sdk/server/environment-server.js";
import { ResourcesServer, type SeedInput, type VerifyInput } from "#sdk/server/resources-server.js";
import { SessionStateServer } from "#sdk/server/resources/session-state-server.js";
import type { Server } from "#sdk/server/server.js";
import { RunRequestSchema, TaskIdSchema, type RunRequest } from "#sdk/wire/environment.js";

const silent = { logLevel: "silent", shutdownGraceMs: 50 } as const;
const started: Server[] = [];
afterEach(async () => {
  for (const server of started.splice(0)) await server.close();
});
function track<S extends Server>(server: S): S {
  started.push(server);
  return server;
}

// ---- verify ---------------------------------------------------------------------------------

class Judge extends ResourcesServer {
  static override checkpointMode = "stateless";
  override readonly verifyRequest = z.looseObject({
    answer: z.string(),
    tries: z.int().default(1),
  });
  protected override verify({ body }: VerifyInput<this>) {
    // @ts-expect-error a declared string is not a number
    const wrong: number = body.answer;
    void wrong;
    return { reward: body.answer === "42" ? 1 / body.tries : 0 };
  }
}

class Undeclared extends ResourcesServer {
  protected override verify() {
    return { reward: 0 };
  }
}

class WrongReward extends ResourcesServer {
  // @ts-expect-error a reward is a number
  protected override verify() {
    return { reward: "1" };
  }
}

describe("verifyRequest", () => {
  it("types verify's body as the declared schema's parse output, else any JSON object", () => {
    expectTypeOf<VerifyInput<Judge>["body"]>().toEqualTypeOf<{
      [key: string]: unknown;
      answer: string;
      tries: number;
    }>();
    expectTypeOf<VerifyInput<Undeclared>["body"]>().toEqualTypeOf<Record<string, unknown>>();
  });

  it("hands verify the body as its schema parsed it (defaults filled) and refuses what it refuses with 422", async () => {
    const app = track(new Judge({ name: "judge", ...silent })).app();
    const right = await request(app).post("/verify").send({ answer: "42" }).expect(200);
    expect(right.body).toMatchObject({ answer: "42", tries: 1, reward: 1 });
    const bad = await request(app).post("/verify").send({ answer: 42 });
    expect(bad.status).toBe(422);
    expect(bad.body.error.code).toBe("invalid_request");
    expect(bad.body.error.issues[0].path).toEqual(["answer"]);
    expect(new Undeclared({ name: "u", ...silent })).toBeInstanceOf(ResourcesServer);
    expect(WrongReward.name).toBe("WrongReward");
  });
});

// ---- seeds and state tools --------------------------------------------------------------------

const Task = z.looseObject({ start: z.int().default(0) });
/** A native seed carries its task in `task_data`; a legacy seed is the task itself. */
const Seed = z.union([
  z
    .looseObject({ resources_session_id: z.string(), task_data: Task })
    .transform((s) => s.task_data),
  Task,
]);
const Add = z.strictObject({ amount: z.int() });
const Total = z.strictObject({ total: z.int().nullable() });

class Tally extends SessionStateServer<number> {
  protected override readonly stateSchema = z.int();
  override readonly seedRequest = Seed;
  readonly seeds: unknown[] = [];
  protected override initialState({ body }: SeedInput<this>) {
    this.seeds.push(body);
    return body.start;
  }
  protected override tools() {
    return [
      this.stateTool({
        path: "/add",
        summary: "Add to the total",
        request: Add,
        reply: Total,
        handler: ({ body, state, setState }) => {
          expectTypeOf(body).toEqualTypeOf<{ amount: number }>();
          expectTypeOf(state).toEqualTypeOf<number | undefined>();
          return {
            total:
              state !== undefined && setState(state + body.amount) ? state + body.amount : null,
          };
        },
      }),
      this.stateTool({
        path: "/wrong",
        summary: "A reply its schema refuses",
        reply: Total,
        // @ts-expect-error the reply schema says `total` is a number or null
        handler: () => ({ total: "none" }),
      }),
    ];
  }
  protected override verify({ session }: VerifyInput<this>) {
    return { reward: this.states.get(session.id) === 3 ? 1 : 0 };
  }
  positional() {
    // @ts-expect-error a state tool is declared in one form: one object
    return this.stateTool("/add", "Add to the total", Add, () => ({}));
  }
}

describe("seedRequest and stateTool", () => {
  it("types the seed's body as the declared schema's parse output (the transform's)", () => {
    expectTypeOf<SeedInput<Tally>["body"]>().toEqualTypeOf<z.output<typeof Task>>();
  });

  it("hands initialState the parsed seed, keys a native seed by its resources_session_id, and refuses a bad seed with 422", async () => {
    const server = track(new Tally({ name: "tally", ...silent }));
    const agent = request.agent(server.app());
    const native = await agent
      .post("/seed_session")
      .send({ resources_session_id: "s1", task_data: { start: 3 } })
      .expect(200);
    expect(native.body).toEqual({ resources_session_id: "s1" });
    expect(server.states.get("s1")).toBe(3);
    await request(server.app()).post("/seed_session").send({}).expect(200);
    // The transform's output and the default: no hook parses the seed again.
    expect(server.seeds).toEqual([{ start: 3 }, { start: 0 }]);
    const bad = await request(server.app()).post("/seed_session").send({ start: "three" });
    expect(bad.status).toBe(422);
    expect(bad.body.error.code).toBe("invalid_request");
    const added = await agent.post("/add").send({ amount: 2 }).expect(200);
    expect(added.body).toEqual({ total: 5 });
  });
});

// ---- runEpisode -------------------------------------------------------------------------------

const Multiply = RunRequestSchema.extend({
  task: z.strictObject({
    task_id: TaskIdSchema,
    task_input: z.strictObject({ n: z.int(), times: z.int().default(2) }),
  }),
});

class Multiplier extends EnvironmentServer {
  override readonly runRequest = Multiply;
  protected override async runEpisode({ body }: RunEpisodeInput<this>): Promise<EpisodeOutcome> {
    return { result: body.task.task_input.n * body.task.task_input.times };
  }
}

describe("runRequest", () => {
  const run = (taskInput: unknown) => ({
    episode_id: { rollout_id: "r", attempt: 0 },
    task: { task_id: { taskset: "t", task_id: "1" }, task_input: taskInput },
  });

  it("validates /run with the environment's schema, hands runEpisode its parse output, and documents it", async () => {
    const server = track(
      new Multiplier({ name: "env", config: { cleanup_timeout_seconds: 5 }, ...silent }),
    );
    const good = await request(server.app())
      .post("/run")
      .send(run({ n: 3 }))
      .expect(200);
    expect(good.body.result).toBe(6);
    const bad = await request(server.app())
      .post("/run")
      .send(run({ n: "three" }));
    expect(bad.status).toBe(422);
    expect(bad.body.error.issues[0].path).toEqual(["task", "task_input", "n"]);
    const documented = JSON.stringify(server.openApiDocument().paths?.["/run"]?.post?.requestBody);
    expect(documented).toContain('"times"');
  });

  it("types runEpisode's body as the declared schema's parse output, else a RunRequest", () => {
    expectTypeOf<RunEpisodeInput<Multiplier>["body"]["task"]["task_input"]>().toEqualTypeOf<{
      n: number;
      times: number;
    }>();
    expectTypeOf<RunEpisodeInput["body"]>().toEqualTypeOf<RunRequest>();
  });
});
