/**
 * The test kit's `checkpointEvery: "boundary"` mode against small environment servers and
 * agents: every boundary is checkpointed and restored into a fresh instance, the replacement
 * attempt goes on there, and a server whose boundaries or hooks forget state is caught.
 */
import { afterEach, describe, expect, it } from "vitest";
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
  TestKitError,
  startTestServer,
  type TestServer,
  type TestServerOptions,
  type TestableServer,
} from "#sdk/testing/index.js";

const handles: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const handle of handles.splice(0).reverse()) await handle.close();
});

async function start<S extends TestableServer>(
  ServerClass: new (options: ServerOptions) => S,
  options: TestServerOptions = {},
): Promise<TestServer<S>> {
  const handle = await startTestServer(ServerClass, options);
  handles.push(handle);
  return handle;
}

// ---- Environment servers -----------------------------------------------------------------

interface SumBoundary {
  next: number;
  sum?: number;
}

/** Cleanups run by every Adder instance of a test, crashed ones included. */
let cleanups = 0;

/** Adds the task's numbers one stage each; a boundary before every stage holds the sum so far. */
class Adder extends EnvironmentServer {
  static override checkpointBoundaries = true;

  protected boundaryOf(next: number, sum: number): SumBoundary {
    return { next, sum };
  }

  protected override async runEpisode({
    body,
    steps,
    onCleanup,
  }: RunEpisodeInput): Promise<EpisodeOutcome> {
    onCleanup(() => {
      cleanups += 1;
    });
    const numbers = (body.task.task_input as { numbers: number[] }).numbers;
    const restored = steps.continuation() as SumBoundary | null;
    let sum = restored?.sum ?? 0;
    for (let i = restored?.next ?? 0; i < numbers.length; i += 1) {
      await steps.boundary(() => ({ ...this.boundaryOf(i, sum) }));
      sum = await steps.step("wait", () => sum + (numbers[i] ?? 0));
    }
    await steps.boundary({ ...this.boundaryOf(numbers.length, sum) });
    return { result: { sum } };
  }
}

/** Its boundaries forget the sum: a replacement continues from 0. */
class ForgetfulAdder extends Adder {
  protected override boundaryOf(next: number): SumBoundary {
    return { next };
  }
}

/** Never reads its continuation: every replacement starts over, and never finishes. */
class StartingOverAdder extends EnvironmentServer {
  static override checkpointBoundaries = true;
  protected override async runEpisode({ steps }: RunEpisodeInput): Promise<EpisodeOutcome> {
    await steps.boundary({ next: "first" });
    await steps.step("wait", () => null);
    await steps.boundary({ next: "second" });
    return { result: "done" };
  }
}

/** Marks every episode a restart after its first boundary. */
class RestartingAdder extends Adder {
  protected override async runEpisode(input: RunEpisodeInput): Promise<EpisodeOutcome> {
    await input.steps.markRestart();
    return await super.runEpisode(input);
  }
}

/** Declares no boundaries: every episode is a restart. */
class NoBoundaries extends Adder {
  static override checkpointBoundaries = false;
}

const CONFIG = { cleanup_timeout_seconds: 5 };
const task = (numbers: number[]) => ({
  task_id: { taskset: "sums", task_id: "1" },
  task_input: { numbers },
});
const run = (numbers: number[]) => ({ episode_id: { rollout_id: "ep1" }, task: task(numbers) });

interface RunReplyBody {
  episode_id: { rollout_id: string; attempt: number };
  result: { sum: number } | null;
  failure: unknown;
}

describe('checkpointEvery: "boundary" with an environment server', () => {
  it("restores at every boundary and finishes as the last replacement attempt", async () => {
    cleanups = 0;
    const env = await start(Adder, { config: CONFIG, checkpointEvery: "boundary" });
    const first = env.server;
    const reply = await env.request("/run", run([1, 2, 3]));
    expect(reply.status).toBe(200);
    const body = reply.body as RunReplyBody;
    expect(body.result).toEqual({ sum: 6 });
    // Four boundaries (before each number, then the end): four restores, so attempt 4 ends.
    expect(body.episode_id).toEqual({ rollout_id: "ep1", attempt: 4 });
    expect(env.attemptOf("ep1")).toBe(4);
    expect(env.server).not.toBe(first);
    // A crashed instance runs no final cleanup: only the attempt that finished ran it.
    expect(cleanups).toBe(1);
  });

  it("sends the replacement as a controller does when the body names the episode by row fields", async () => {
    const env = await start(Adder, { config: CONFIG, checkpointEvery: "boundary" });
    const reply = await env.request("/run", {
      task: task([5, 5]),
      _ng_task_index: 3,
      _ng_rollout_index: 0,
    });
    expect(reply.body).toMatchObject({
      episode_id: { rollout_id: "3-0", attempt: 3 },
      result: { sum: 10 },
    });
  });

  it("catches boundaries that forget the sum: the episode ends with the wrong result", async () => {
    const plain = await start(ForgetfulAdder, { config: CONFIG });
    expect((await plain.request("/run", run([1, 2, 3]))).body).toMatchObject({
      result: { sum: 6 },
    });
    const every = await start(ForgetfulAdder, { config: CONFIG, checkpointEvery: "boundary" });
    const body = (await every.request("/run", run([1, 2, 3]))).body as RunReplyBody;
    expect(body.result).not.toEqual({ sum: 6 });
  });

  it("gives up on a server that never gets past its restored boundary, naming the bound", async () => {
    const env = await start(StartingOverAdder, {
      config: CONFIG,
      checkpointEvery: "boundary",
      maxRestores: 5,
    });
    const failed = await env.request("/run", run([])).catch((error: unknown) => error);
    expect(failed).toBeInstanceOf(TestKitError);
    expect((failed as TestKitError).operation).toBe("POST /run");
    expect((failed as TestKitError).message).toMatch(/made no progress: 5 restores/);
  });

  it("lets a restart episode run to its end in place: nothing continues it elsewhere", async () => {
    const env = await start(RestartingAdder, { config: CONFIG, checkpointEvery: "boundary" });
    const body = (await env.request("/run", run([1, 2]))).body as RunReplyBody;
    expect(body).toMatchObject({ episode_id: { attempt: 0 }, result: { sum: 3 } });
    expect(env.lastCommit?.records).toEqual([]);
  });

  it("refuses a server without checkpointBoundaries, and the request mode, at start", async () => {
    await expect(
      startTestServer(NoBoundaries, { config: CONFIG, checkpointEvery: "boundary" }),
    ).rejects.toThrow(/without static checkpointBoundaries = true/);
    await expect(
      startTestServer(Adder, { config: CONFIG, checkpointEvery: "request" }),
    ).rejects.toThrow(/use checkpointEvery: "boundary"/);
  });
});

// ---- Agents ------------------------------------------------------------------------------

interface Notes {
  readonly notes: readonly string[];
}
interface LoopBoundary {
  next: number;
  said?: string[];
}

/**
 * Upper-cases each word of the input, one "model call" per word, with a boundary before each;
 * the session keeps a note of every activation, and the reply lists them all.
 */
class Shouter extends AgentServer<Notes> {
  static override checkpointSessionsSupported = true;

  protected override createSessionState(): Notes {
    return { notes: [] };
  }

  protected loopState(next: number, said: string[]): LoopBoundary {
    return { next, said };
  }

  protected exported(state: Notes): Record<string, JsonValue> {
    return { notes: [...state.notes] };
  }

  protected override async respond({
    body,
    session,
    activation,
  }: RespondInput<Notes>): Promise<RespondResult> {
    const words = String(body.input).split(" ");
    const restored = activation.continuation as LoopBoundary | null;
    let said = restored?.said ?? [];
    for (let i = restored?.next ?? 0; i < words.length; i += 1) {
      const snapshot = this.loopState(i, said);
      await activation.boundary(() => ({ ...snapshot }) as JsonValue);
      const word = await activation.modelCall(async () => (words[i] ?? "").toUpperCase());
      said = [...said, word];
    }
    const notes = [...(session?.state?.notes ?? []), said.join(" ")];
    if (session !== null) this.setSessionState(session.key, { notes });
    const text = notes.join(" | ");
    return {
      response: {
        object: "response",
        status: "completed",
        output: [{ type: "message", role: "assistant", content: [{ type: "output_text", text }] }],
      },
    };
  }

  protected override closeSessionState({ state }: { state: Notes | undefined }): AgentCloseResult {
    return { agent_observations: [...(state?.notes ?? [])], resources_cookies: null };
  }

  protected override async exportAgentSessions({
    sessionKeys,
  }: {
    sessionKeys: readonly string[];
  }): Promise<Record<string, Record<string, JsonValue>>> {
    const out: Record<string, Record<string, JsonValue>> = {};
    for (const key of sessionKeys) {
      const view = this.sessionView(key);
      if (view?.request == null || view.state === undefined) continue;
      out[key] = { request: view.request as unknown as JsonValue, ...this.exported(view.state) };
    }
    return out;
  }

  protected override async restoreAgentSessions({
    sessions,
  }: {
    sessions: readonly RestoredAgentSession[];
  }): Promise<Map<string, RebuiltAgentSession<Notes>>> {
    const out = new Map<string, RebuiltAgentSession<Notes>>();
    for (const s of sessions) {
      const saved = s.session as { request: unknown; notes?: string[] };
      out.set(s.sessionKey, { request: saved.request, state: { notes: saved.notes ?? [] } });
    }
    return out;
  }

  protected override async retireAgentSession(): Promise<void> {}
}

/** Its export forgets the notes of earlier activations. */
class NoteDroppingShouter extends Shouter {
  protected override exported(): Record<string, JsonValue> {
    return {};
  }
}

/** Its loop boundaries forget the words said so far. */
class WordDroppingShouter extends Shouter {
  protected override loopState(next: number): LoopBoundary {
    return { next };
  }
}

/** No session hooks: a restart-only agent. */
class RestartOnlyShouter extends AgentServer {
  protected override async respond(): Promise<RespondResult> {
    return { response: {} };
  }
}

const ep1 = { rollout: "ep1" };

/** Seed, two activations ("a b", then "c"), close: the reply texts and the observations. */
async function conversation(agent: TestServer<Shouter>): Promise<{
  texts: string[];
  observations: unknown;
}> {
  const seed = (episode: unknown) => ({
    agent_session_id: "s1",
    episode_id: episode,
    task_id: { taskset: "t", task_id: "1" },
  });
  expect(
    (await agent.request("/v1/agent_sessions", seed(agent.episodeOf("ep1")), ep1)).status,
  ).toBe(200);
  const texts: string[] = [];
  for (const [index, input] of [
    [1, "a b"],
    [2, "c"],
  ] as const) {
    const reply = await agent.request(
      "/v1/responses",
      { input },
      { ...ep1, headers: { "x-ng-agent-activation": String(index) } },
    );
    expect(reply.status, JSON.stringify(reply.body)).toBe(200);
    const output = (reply.body as { output: { content: { text: string }[] }[] }).output;
    texts.push(output[0]?.content[0]?.text ?? "");
  }
  const closed = await agent.request(
    "/v1/agent_sessions/close",
    { agent_session_id: "s1", episode_id: agent.episodeOf("ep1") },
    ep1,
  );
  expect(closed.status, JSON.stringify(closed.body)).toBe(200);
  return {
    texts,
    observations: (closed.body as { agent_observations: unknown }).agent_observations,
  };
}

describe('checkpointEvery: "boundary" with an agent', () => {
  it("restores at every loop boundary and between requests, the session whole", async () => {
    const agent = await start(Shouter, { checkpointEvery: "boundary" });
    const { texts, observations } = await conversation(agent);
    expect(texts).toEqual(["A B", "A B | C"]);
    expect(observations).toEqual(["A B", "C"]);
    // Restores: seed 1, activation 1 (two word boundaries, then the request) 3, activation 2
    // (one boundary, then the request) 2; the closed session is not exported, so none after it.
    expect(agent.attemptOf("ep1")).toBe(6);
  });

  it("catches an export that forgets the session's notes", async () => {
    expect((await conversation(await start(NoteDroppingShouter))).texts).toEqual([
      "A B",
      "A B | C",
    ]);
    const every = await start(NoteDroppingShouter, { checkpointEvery: "boundary" });
    expect((await conversation(every)).texts[1]).not.toBe("A B | C");
  });

  it("catches loop boundaries that forget the words said so far", async () => {
    expect((await conversation(await start(WordDroppingShouter))).texts[0]).toBe("A B");
    const every = await start(WordDroppingShouter, { checkpointEvery: "boundary" });
    expect((await conversation(every)).texts[0]).not.toBe("A B");
  });

  it("also checkpoints between requests only, with the request mode", async () => {
    const agent = await start(Shouter, { checkpointEvery: "request" });
    expect((await conversation(agent)).texts).toEqual(["A B", "A B | C"]);
    expect(agent.attemptOf("ep1")).toBe(3);
  });

  it("refuses a restart-only agent at start", async () => {
    await expect(
      startTestServer(RestartOnlyShouter, { checkpointEvery: "boundary" }),
    ).rejects.toThrow(/without session hooks/);
  });

  it("refuses a second call while one runs", async () => {
    const agent = await start(Shouter, { checkpointEvery: "boundary" });
    const seed = {
      agent_session_id: "s1",
      episode_id: agent.episodeOf("ep1"),
      task_id: { taskset: "t", task_id: "1" },
    };
    const first = agent.request("/v1/agent_sessions", seed, ep1);
    await expect(agent.request("/v1/agent_sessions", seed, ep1)).rejects.toThrow(
      /while another call of this handle runs/,
    );
    expect((await first).status).toBe(200);
  });
});
