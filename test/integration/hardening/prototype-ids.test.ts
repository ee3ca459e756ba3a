/**
 * IDs named like `Object.prototype` members (`__proto__`, `constructor`, `hasOwnProperty`,
 * `toString`, `valueOf`) go through commit and restore like any other, on every participant
 * kind: as rollout IDs everywhere, as resources session IDs and as agent session IDs. Keyed into a plain
 * object by assignment, `__proto__` sets the prototype instead of a key (the entry vanishes), and
 * a lookup of a missing `constructor` finds `Object.prototype.constructor`.
 */
import { afterEach, describe, expect, it } from "vitest";
import CounterServer from "../../../reference-servers/counter/src/index.js";
import {
  AgentServer,
  EnvironmentServer,
  type AgentCloseResult,
  type EpisodeOutcome,
  type JsonValue,
  type RebuiltAgentSession,
  type RespondInput,
  type RespondResult,
  type RunEpisodeInput,
  type ServerOptions,
} from "#sdk/index.js";
import { type RestoredAgentSession } from "#sdk/participants/agent/agent-records.js";
import {
  startTestServer,
  type TestServer,
  type TestServerOptions,
  type TestableServer,
} from "#sdk/testing/index.js";
import * as policy from "../../support/policy-harness.js";
import * as simple from "../../support/simple-agent-harness.js";

/** Session IDs: any string. */
const NAMES = ["__proto__", "constructor", "hasOwnProperty", "toString"] as const;
/** Rollout IDs start with a letter or digit, so `__proto__` is no rollout ID. */
const ROLLOUTS = ["constructor", "hasOwnProperty", "toString", "valueOf"] as const;
/** The rollout each session of {@link NAMES} runs under. */
const rolloutOf = (name: string): string => (name === "__proto__" ? "valueOf" : name);

const handles: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const handle of handles.splice(0).reverse()) await handle.close();
  await policy.cleanup();
  await simple.cleanup();
});

async function start<S extends TestableServer>(
  ServerClass: new (options: ServerOptions) => S,
  options: TestServerOptions = {},
): Promise<TestServer<S>> {
  const handle = await startTestServer(ServerClass, options);
  handles.push(handle);
  return handle;
}

describe("a resources server (the reference counter)", () => {
  it("restores sessions and rollouts named like prototype members after every request", async () => {
    const counter = await start(CounterServer, { checkpointEvery: "request" });
    // Each session is continued by its replacement attempt through its own cookie jar.
    const jars = new Map<string, Record<string, string>>();
    for (const name of NAMES) {
      const jar: Record<string, string> = {};
      const seeded = await counter.request(
        "/seed_session",
        { resources_session_id: name, task_data: { initial_count: 0, target: 2 } },
        { rollout: rolloutOf(name), cookies: jar },
      );
      expect(seeded.status, JSON.stringify(seeded.body)).toBe(200);
      jars.set(name, jar);
    }
    for (const name of NAMES) {
      for (let i = 0; i < 2; i += 1) {
        const reply = await counter.request(
          "/increment_counter",
          { count: 1 },
          { rollout: rolloutOf(name), cookies: jars.get(name) },
        );
        expect(reply.status, JSON.stringify(reply.body)).toBe(200);
        expect(reply.body).toEqual({ success: true });
      }
    }
    for (const name of NAMES) {
      expect(counter.server.states.get(name)?.count, name).toBe(2);
      const verified = await counter.request(
        "/verify",
        {},
        { rollout: rolloutOf(name), cookies: jars.get(name) },
      );
      expect(verified.body, name).toMatchObject({ reward: 1 });
    }
    expect(counter.attemptOf("valueOf")).toBeGreaterThan(0);
  });
});

// ---- Environment servers -----------------------------------------------------------------

/** Adds the task's numbers one stage each, a boundary before every stage. */
class Adder extends EnvironmentServer {
  static override checkpointBoundaries = true;

  protected override async runEpisode({ body, steps }: RunEpisodeInput): Promise<EpisodeOutcome> {
    const numbers = (body.task.task_input as { numbers: number[] }).numbers;
    const restored = steps.continuation() as { next: number; sum: number } | null;
    let sum = restored?.sum ?? 0;
    for (let i = restored?.next ?? 0; i < numbers.length; i += 1) {
      await steps.boundary({ next: i, sum });
      sum = await steps.step("wait", () => sum + (numbers[i] ?? 0));
    }
    return { result: { sum } };
  }
}

describe("an environment server", () => {
  it.each(ROLLOUTS)("continues rollout %s from every boundary", async (name) => {
    const env = await start(Adder, {
      config: { cleanup_timeout_seconds: 5 },
      checkpointEvery: "boundary",
    });
    const reply = await env.request("/run", {
      episode_id: { rollout_id: name },
      task: { task_id: { taskset: "sums", task_id: "1" }, task_input: { numbers: [1, 2, 3] } },
    });
    expect(reply.status, JSON.stringify(reply.body)).toBe(200);
    expect(reply.body).toMatchObject({
      episode_id: { rollout_id: name, attempt: 3 },
      result: { sum: 6 },
    });
  });
});

// ---- Agents ------------------------------------------------------------------------------

interface Notes {
  readonly notes: readonly string[];
}

/** Upper-cases its input, one model call per word with a boundary before each; notes replies. */
class Shouter extends AgentServer<Notes> {
  static override checkpointSessionsSupported = true;

  protected override createSessionState(): Notes {
    return { notes: [] };
  }

  protected override async respond({
    body,
    session,
    activation,
  }: RespondInput<Notes>): Promise<RespondResult> {
    const words = String(body.input).split(" ");
    const restored = activation.continuation as { next: number; said: string[] } | null;
    let said = restored?.said ?? [];
    for (let i = restored?.next ?? 0; i < words.length; i += 1) {
      const snapshot = { next: i, said };
      await activation.boundary(() => ({ ...snapshot }) as JsonValue);
      const word = await activation.modelCall(async () => (words[i] ?? "").toUpperCase());
      said = [...said, word];
    }
    const notes = [...(session?.state?.notes ?? []), said.join(" ")];
    if (session !== null) this.setSessionState(session.key, { notes });
    return { response: { object: "response", status: "completed", output: [], notes } };
  }

  protected override closeSessionState({ state }: { state: Notes | undefined }): AgentCloseResult {
    return { agent_observations: [...(state?.notes ?? [])], resources_cookies: null };
  }

  protected override async exportAgentSessions({
    sessionKeys,
  }: {
    sessionKeys: readonly string[];
  }): Promise<Record<string, Record<string, JsonValue>>> {
    // Assigned into `{}`, as an author writes it: the SDK reads a `__proto__` key back.
    const out: Record<string, Record<string, JsonValue>> = {};
    for (const key of sessionKeys) {
      const view = this.sessionView(key);
      const notes = [...(view?.state?.notes ?? [])];
      out[key] = { request: view?.request as unknown as JsonValue, notes };
    }
    return out;
  }

  protected override async restoreAgentSessions({
    sessions,
  }: {
    sessions: readonly RestoredAgentSession[];
  }): Promise<Record<string, RebuiltAgentSession<Notes>>> {
    const out: Record<string, RebuiltAgentSession<Notes>> = {};
    for (const s of sessions) {
      const saved = s.session as { request: unknown; notes: string[] };
      out[s.sessionKey] = { request: saved.request, state: { notes: saved.notes } };
    }
    return out;
  }

  protected override async retireAgentSession(): Promise<void> {}
}

describe("an agent with session hooks", () => {
  it.each(NAMES)("restores session and rollout %s at every boundary", async (name) => {
    const agent = await start(Shouter, { checkpointEvery: "boundary" });
    const seeded = await agent.request(
      "/v1/agent_sessions",
      {
        agent_session_id: name,
        episode_id: agent.episodeOf(rolloutOf(name)),
        task_id: { taskset: "t", task_id: "1" },
      },
      { rollout: rolloutOf(name) },
    );
    expect(seeded.status, JSON.stringify(seeded.body)).toBe(200);
    for (const [index, input] of [
      [1, "a b"],
      [2, "c"],
    ] as const) {
      const reply = await agent.request(
        "/v1/responses",
        { input },
        { rollout: rolloutOf(name), headers: { "x-ng-agent-activation": String(index) } },
      );
      expect(reply.status, JSON.stringify(reply.body)).toBe(200);
    }
    const closed = await agent.request(
      "/v1/agent_sessions/close",
      { agent_session_id: name, episode_id: agent.episodeOf(rolloutOf(name)) },
      { rollout: rolloutOf(name) },
    );
    expect(closed.status, JSON.stringify(closed.body)).toBe(200);
    expect(closed.body).toMatchObject({ agent_observations: ["A B", "C"] });
    expect(agent.attemptOf(rolloutOf(name))).toBeGreaterThan(0);
  });
});

describe("the Simple Agent", () => {
  it("commits and restores sessions and rollouts named like prototype members", async () => {
    const stack = new simple.Stack({ checkpoint: true });
    await stack.model();
    const first = await stack.agent();
    const cookies = new Map<string, string>();
    for (const name of NAMES) {
      const cookie = await simple.seed(first.url, name, simple.ep(rolloutOf(name)));
      cookies.set(name, cookie);
      await simple
        .activate(first.url, cookie, rolloutOf(name), { input: `hello ${name}` }, 1)
        .expect(200);
    }
    const scope = NAMES.map((name) => simple.ep(rolloutOf(name)));
    const dir = await simple.checkpoint([first.url], "c1", scope);
    expect((await simple.agentRecords(dir)).map((r) => r.session_key).sort()).toEqual(
      [...NAMES].sort(),
    );

    const second = await stack.agent();
    await simple.restoreAndResume(second.url, "c2", dir, scope);
    for (const name of NAMES) {
      const closed = await simple.closeSession(second.url, name, simple.ep(rolloutOf(name), 1));
      expect(closed.status, JSON.stringify(closed.body)).toBe(200);
      expect(closed.body.agent_observations, name).toMatchObject({ records: [{}] });
    }
  });
});

// ---- Policy model servers ----------------------------------------------------------------

describe("a policy model server", () => {
  it("commits and restores the captured calls of rollouts named like prototype members", async () => {
    const fake = await policy.startFake();
    // A script per rollout: the fake backend looks a rollout's script up by plain indexing.
    await policy.setScript(fake, {
      per_rollout: Object.fromEntries(
        ROLLOUTS.map((name) => [name, policy.WEATHER_SCRIPT.default]),
      ),
    });
    const captureDir = await policy.tempDir();
    const first = await policy.startPolicy(fake, { captureDir });
    const replies = new Map<string, policy.ResponseBody>();
    for (const name of ROLLOUTS) {
      const reply = await policy.respond(first.url, name, {
        input: policy.firstInput(),
        tools: policy.TOOLS,
      });
      expect(reply.status, JSON.stringify(reply.body)).toBe(200);
      replies.set(name, reply.body as policy.ResponseBody);
    }
    await policy.prepare(first.url, "c1");
    const { dir, body, records } = await policy.commit(first, "c1", ROLLOUTS);
    expect(records.map((r) => r.episode_id.rollout_id).sort()).toEqual([...ROLLOUTS].sort());
    // Every episode keeps its own entry in the reply, `__proto__` included.
    expect(Object.keys(body.staging_keys_by_episode).sort()).toEqual([...ROLLOUTS].sort());
    await policy.resume(first.url, "c1");
    await policy.crash(first);

    const second = await policy.startPolicy(fake, { captureDir });
    const restored = await policy.restore(second, "c1", dir, ROLLOUTS);
    expect(restored.status, JSON.stringify(restored.body)).toBe(200);
    expect([...(restored.body.restored as string[])].sort()).toEqual(
      ROLLOUTS.map((name) => `${name}-a1`).sort(),
    );
    await policy.resume(second.url, "c1");
    for (const name of ROLLOUTS) {
      const input = policy.echo(policy.firstInput(), replies.get(name) as policy.ResponseBody);
      const next = await policy.respond(second.url, `${name}-a1`, { input, tools: policy.TOOLS });
      expect(next.status, JSON.stringify(next.body)).toBe(200);
      expect(policy.replyText(next.body as policy.ResponseBody), name).toBe(policy.ANSWER);
    }
  });
});
