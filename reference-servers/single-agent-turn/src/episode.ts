/**
 * One `single_agent_turn` episode (see docs/environment-server.md): seed → invoke_agent →
 * close_agent → verify → return, each stage starting with its boundary, every call made through the
 * deployment's `ServerClient` for the episode's capture key.
 */
import { randomUUID } from "node:crypto";
import {
  ACTIVATION_HEADER,
  CLOSE_FOLLOWS_HEADER,
  ROLLOUT_SEGMENT,
  cookieHeader,
  isRestartReply,
  setCookieJar,
  verifyModeOf,
  type CookieJar,
} from "gym-participant-sdk/protocol";
import {
  CheckpointError,
  EpisodeError,
  ServerReplyError,
  ServerUnreachableError,
  type CallReply,
  type EpisodeFailure,
  type EpisodeHandle,
  type EpisodeId,
  type EpisodeOutcome,
  type JsonValue,
  type ServerClient,
  type StepMode,
  type TaskId,
} from "gym-participant-sdk";
import type { z } from "zod";
import { CleanupEntry } from "./cleanup-entry.js";
import {
  ActivationReplySchema,
  AgentCloseReplySchema,
  AgentSeedReplySchema,
  ResourcesSeedReplySchema,
  STAGES,
  StageBoundarySchema,
  VerifyReplySchema,
  type JsonObject,
  type SessionHandles,
  type SingleAgentTurnConfig,
  type Stage,
  type StageBoundary,
  type TaskInput,
} from "./wire.js";

/** The index of the one activation of a single-turn agent session. */
const ACTIVATION_INDEX = "1";
/** Longest `failure_reason`. */
const MAX_REASON = 2000;
/** Statuses a caller may retry besides 5xx. */
const RETRYABLE_STATUSES = new Set([408, 425, 429]);

/** The failure stages of `single_agent_turn`. */
type FailureStage = "seed" | "agent" | "verification" | "cleanup";

/** What an episode needs from its server. */
export interface EpisodeDeps {
  readonly client: ServerClient;
  readonly config: SingleAgentTurnConfig;
  readonly logger: { warn(details: object, message: string): void };
}

/** What an episode runs. */
export interface EpisodeInput {
  readonly episode: EpisodeId;
  readonly taskId: TaskId;
  readonly taskInput: TaskInput;
  readonly steps: EpisodeHandle;
  readonly signal: AbortSignal;
  readonly onCleanup: (callback: () => Promise<void>) => void;
}

/** A protocol failure of one stage, carrying the error that caused it. */
class StageError extends Error {
  override readonly name = "StageError";
  constructor(
    readonly stage: FailureStage,
    readonly error: unknown,
  ) {
    super(error instanceof Error ? error.message : String(error), { cause: error });
  }
}

/** A reply that broke the contract (a terminal failure of its stage). */
class ProtocolError extends Error {
  override readonly name = "ProtocolError";
}

/**
 * Runs `work` as part of `stage`: any error but a control error becomes a {@link StageError}.
 */
async function inStage<T>(stage: FailureStage, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    if (error instanceof StageError) throw error;
    if (error instanceof EpisodeError || error instanceof CheckpointError) throw error;
    throw new StageError(stage, error);
  }
}

/** Whether the collector may retry a rollout that failed with `error`. */
export function isRetryable(error: unknown): boolean {
  if (error instanceof ServerReplyError) {
    return RETRYABLE_STATUSES.has(error.status) || error.status >= 500;
  }
  return error instanceof ServerUnreachableError;
}

/** Parses a reply body with `schema`, or fails with `what` named. */
function parseReply<S extends z.ZodType>(schema: S, body: unknown, what: string): z.infer<S> {
  const parsed = schema.safeParse(body);
  if (parsed.success) return parsed.data;
  const problems = parsed.error.issues
    .map((issue) => `${issue.path.join(".") || "body"}: ${issue.message}`)
    .join("; ");
  throw new ProtocolError(`${what} is invalid: ${problems}`);
}

/** The cookies a reply set. */
function replyCookies(reply: CallReply<unknown>): CookieJar {
  return setCookieJar(reply.headers["set-cookie"]);
}

/** The `cookie` request header of a jar, as extra headers (none for an empty jar). */
function withCookies(jar: CookieJar, headers: Record<string, string> = {}): Record<string, string> {
  const cookie = cookieHeader(jar);
  return cookie === undefined ? headers : { ...headers, cookie };
}

/** Resolves with `work`, or rejects with the signal's reason once it fires (`work` goes on). */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason as Error);
    signal.addEventListener("abort", onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/** Fresh handles: both session ids assigned here, before any call. */
function newHandles(): SessionHandles {
  const hex = (): string => randomUUID().replaceAll("-", "");
  return {
    resources_session_id: `resources-session-${hex()}`,
    resources_cookies: {},
    agent_session_id: `agent-session-${hex()}`,
    agent_cookies: {},
    resources_verify: "wait",
  };
}

/**
 * One episode. State lives in fields that are replaced, never mutated, so a boundary recorded
 * earlier keeps what it held when it was recorded.
 */
export class SingleAgentTurnEpisode {
  readonly #deps: EpisodeDeps;
  readonly #input: EpisodeInput;
  readonly #key: string;
  readonly #entry: Stage;
  #handles: SessionHandles;
  #response: JsonObject | null = null;
  #observations: JsonValue = null;
  #result: JsonObject | null = null;
  #agentSession: CleanupEntry | null = null;

  constructor(deps: EpisodeDeps, input: EpisodeInput) {
    this.#deps = deps;
    this.#input = input;
    this.#key = input.steps.captureKey;
    const restored = SingleAgentTurnEpisode.#restored(input.steps.continuation());
    this.#entry = restored?.next ?? "seed";
    this.#handles = restored?.handles ?? newHandles();
    if (restored !== null && "response" in restored) this.#response = restored.response;
    if (restored !== null && "observations" in restored) {
      this.#observations = restored.observations;
    }
    if (restored?.next === "return") this.#result = restored.result;
  }

  static #restored(continuation: JsonValue | null): StageBoundary | null {
    if (continuation === null) return null;
    const parsed = StageBoundarySchema.safeParse(continuation);
    if (!parsed.success) {
      throw new Error(`the restored boundary is not a single_agent_turn boundary: ${parsed.error}`);
    }
    return parsed.data;
  }

  /** Runs the stages from the entry stage on; returns the result or the protocol failure. */
  async run(): Promise<EpisodeOutcome> {
    const { steps, onCleanup } = this.#input;
    const resources = new CleanupEntry(
      "resources session",
      (timeoutMs) => this.#closeResources(timeoutMs),
      this.#cleanupTimeoutMs(),
    );
    // Registered first, before any call, so the unwind (LIFO) closes it last on every path.
    onCleanup(() => resources.close());
    if (this.#entry === "invoke_agent" || this.#entry === "close_agent") this.#registerAgent();
    try {
      if (this.#reaches("seed")) {
        await steps.boundary({ next: "seed", handles: this.#handles });
        await steps.step("replay", (signal) => this.#seed(signal));
      }
      if (this.#reaches("invoke_agent")) {
        await steps.boundary({ next: "invoke_agent", handles: this.#handles });
        this.#response = await steps.step("replay", (signal) => this.#activate(signal));
      }
      if (this.#reaches("close_agent")) {
        const { handles, response } = this.#snapshot();
        await steps.boundary(() => ({ next: "close_agent", handles, response }));
        // A wait step: the close reply (observations, final cookies) comes exactly once.
        await steps.step("wait", (signal) =>
          inStage("cleanup", () => untilAborted(this.#agent().close(), signal)),
        );
      }
      if (this.#reaches("verify")) {
        const { handles, response, observations } = this.#snapshot();
        await steps.boundary(() => ({ next: "verify", handles, response, observations }));
        const mode: StepMode = this.#handles.resources_verify;
        this.#result = await steps.step(mode, (signal) => this.#verify(signal));
      }
      // An extra bounded close that a failure cannot turn into a lost verdict.
      onCleanup(() => resources.close());
      const { handles, result, observations } = this.#snapshot();
      await steps.boundary(() => ({ next: "return", handles, result, observations }));
      return { result: { ...result, ng_agent_observations: observations } };
    } catch (error) {
      if (this.#input.signal.aborted || !(error instanceof StageError)) throw error;
      if (error.stage === "agent") await this.#closeAgentNow();
      return { failure: this.#failure(error) };
    }
  }

  #reaches(stage: Stage): boolean {
    return STAGES.indexOf(this.#entry) <= STAGES.indexOf(stage);
  }

  /**
   * The current state, pinned for a boundary built later (fields are replaced, never mutated).
   * `response` is set from `close_agent` on, `result` at `return`.
   */
  #snapshot(): {
    handles: SessionHandles;
    response: JsonObject;
    observations: JsonValue;
    result: JsonObject;
  } {
    return {
      handles: this.#handles,
      response: this.#response as JsonObject,
      observations: this.#observations,
      result: this.#result as JsonObject,
    };
  }

  #cleanupTimeoutMs(): number {
    return this.#deps.config.cleanup_timeout_seconds * 1000;
  }

  #registerAgent(): void {
    const agent = new CleanupEntry(
      "agent session",
      (timeoutMs) => this.#closeAgent(timeoutMs),
      this.#cleanupTimeoutMs(),
    );
    this.#agentSession = agent;
    this.#input.onCleanup(() => agent.close());
  }

  #agent(): CleanupEntry {
    if (this.#agentSession === null) throw new Error("the agent session was never registered");
    return this.#agentSession;
  }

  /** After an agent failure: close the agent session now, so its observations are kept. */
  async #closeAgentNow(): Promise<void> {
    if (this.#agentSession === null) return;
    try {
      await this.#agentSession.close();
    } catch (error) {
      // Still active: the final unwind tries again.
      this.#deps.logger.warn(
        { err: error, episode: this.#key },
        "closing the agent session after an agent failure failed",
      );
    }
  }

  #failure(error: StageError): EpisodeFailure {
    return {
      failure_reason: error.message.slice(0, MAX_REASON),
      terminal: !isRetryable(error.error),
      stage: error.stage,
      partial_response: error.stage === "seed" || error.stage === "agent" ? null : this.#response,
      ng_agent_observations: this.#observations,
    };
  }

  // ---- Calls ---------------------------------------------------------------------------

  #wireEpisode(): { rollout_id: string; attempt: number } {
    const { episode } = this.#input;
    return { rollout_id: episode.rollout_id, attempt: episode.attempt };
  }

  async #post(
    server: string,
    path: string,
    body: unknown,
    options: { signal?: AbortSignal; timeoutMs?: number; headers?: Record<string, string> },
  ): Promise<CallReply<unknown>> {
    return await this.#deps.client.postWithReply(server, path, body, {
      ...options,
      rollout: this.#key,
    });
  }

  /** Stage `seed`: the resources seed, then the agent seed. */
  async #seed(signal: AbortSignal): Promise<void> {
    const { config } = this.#deps;
    const { steps, taskId, taskInput } = this.#input;
    const seed = await inStage("seed", async () => {
      const reply = await this.#post(
        config.resources_server,
        "/seed_session",
        {
          resources_session_id: this.#handles.resources_session_id,
          episode_id: this.#wireEpisode(),
          task_id: taskId,
          task_data: taskInput.task_data,
        },
        { signal },
      );
      const cookies = replyCookies(reply);
      this.#handles = {
        ...this.#handles,
        resources_cookies: cookies,
        resources_verify: verifyModeOf(reply.headers),
      };
      if (isRestartReply(reply.headers)) await steps.markRestart(signal);
      if (Object.keys(cookies).length === 0) {
        throw new ProtocolError("Resources seed did not establish a session cookie");
      }
      const body = parseReply(ResourcesSeedReplySchema, reply.body, "the resources seed reply");
      if (body.resources_session_id !== this.#handles.resources_session_id) {
        throw new ProtocolError("Resources seed returned a different resources_session_id");
      }
      return body;
    });
    this.#registerAgent();
    const toolAccesses = await inStage("seed", () => this.#toolAccesses(seed, signal));
    await inStage("agent", async () => {
      const reply = await this.#post(
        config.agent_server,
        "/v1/agent_sessions",
        {
          agent_session_id: this.#handles.agent_session_id,
          episode_id: this.#wireEpisode(),
          task_id: taskId,
          tool_accesses: toolAccesses,
          sandbox_access: seed.sandbox_access ?? null,
        },
        { signal },
      );
      const body = parseReply(AgentSeedReplySchema, reply.body, "the agent seed reply");
      if (body.agent_session_id !== this.#handles.agent_session_id) {
        throw new ProtocolError("Agent seed returned a different agent_session_id");
      }
      this.#handles = { ...this.#handles, agent_cookies: replyCookies(reply) };
      if (isRestartReply(reply.headers)) await steps.markRestart(signal);
    });
  }

  /**
   * The grants of the resources server's tools. An MCP grant makes the
   * episode a restart: no checkpoint continues an agent holding an MCP token past its seed.
   */
  async #toolAccesses(
    seed: z.infer<typeof ResourcesSeedReplySchema>,
    signal: AbortSignal,
  ): Promise<JsonObject[]> {
    const { client, config } = this.#deps;
    const transports = config.resources_tool_transports;
    const base = client.server(config.resources_server).url.replace(/\/+$/, "");
    const accesses: JsonObject[] = [];
    if (transports.includes("direct_http")) {
      // With checkpointing on the base names the seeding attempt: the resources server binds
      // calls on a session to the attempt in the prefix.
      const prefix = client.checkpointEnabled ? `/${ROLLOUT_SEGMENT}/${this.#key}` : "";
      accesses.push({
        kind: "direct_http",
        name: `${config.resources_server}.direct_http`,
        required: true,
        base_url: `${base}${prefix}`,
        cookies: this.#handles.resources_cookies,
      });
    }
    if (transports.includes("mcp")) {
      const tools = seed.resources_tools;
      if (tools === null || tools === undefined) {
        throw new ProtocolError("Resources seed did not return requested MCP metadata");
      }
      if (tools.transport !== "http") {
        throw new ProtocolError(`Unsupported resources MCP transport: ${tools.transport}`);
      }
      accesses.push({
        kind: "mcp",
        name: tools.server_name,
        required: true,
        connection: {
          transport: "streamable_http",
          url: `${base}/${tools.url_path.replace(/^\/+/, "")}`,
          headers: tools.headers,
        },
      });
      await this.#input.steps.markRestart(signal);
    }
    return accesses;
  }

  /** Stage `invoke_agent`: the one activation, with its index (see docs/environment-server.md). */
  async #activate(signal: AbortSignal): Promise<JsonObject> {
    const { config } = this.#deps;
    return await inStage("agent", async () => {
      const reply = await this.#post(
        config.agent_server,
        "/v1/responses",
        this.#input.taskInput.responses_create_params,
        {
          signal,
          // A restored episode sends the same index, so an agent that already completed this
          // activation answers with its stored reply instead of running it again.
          headers: withCookies(this.#handles.agent_cookies, {
            [ACTIVATION_HEADER]: ACTIVATION_INDEX,
          }),
        },
      );
      const response = parseReply(ActivationReplySchema, reply.body, "the agent response");
      const cookies = replyCookies(reply);
      if (Object.keys(cookies).length > 0) {
        this.#handles = {
          ...this.#handles,
          agent_cookies: { ...this.#handles.agent_cookies, ...cookies },
        };
      }
      return response as JsonObject;
    });
  }

  /** The agent session's close: keeps its observations and final resources cookies. */
  async #closeAgent(timeoutMs: number): Promise<void> {
    const reply = await this.#post(
      this.#deps.config.agent_server,
      "/v1/agent_sessions/close",
      { agent_session_id: this.#handles.agent_session_id, episode_id: this.#wireEpisode() },
      { timeoutMs, headers: withCookies(this.#handles.agent_cookies) },
    );
    const body = parseReply(AgentCloseReplySchema, reply.body, "the agent close reply");
    if (body.agent_session_id !== this.#handles.agent_session_id) {
      throw new ProtocolError("Agent close returned a different agent_session_id");
    }
    this.#observations = body.agent_observations ?? null;
    const cookies = body.resources_cookies;
    if (cookies !== null && cookies !== undefined) {
      this.#handles = { ...this.#handles, resources_cookies: cookies };
    }
  }

  /** Stage `verify`. */
  async #verify(signal: AbortSignal): Promise<JsonObject> {
    const { taskInput } = this.#input;
    return await inStage("verification", async () => {
      // A replayable verify whose session is closed afterwards says so, so the resources
      // server keeps the session tracked (and exported) until that close.
      const follows: Record<string, string> =
        this.#handles.resources_verify === "replay" ? { [CLOSE_FOLLOWS_HEADER]: "1" } : {};
      const reply = await this.#post(
        this.#deps.config.resources_server,
        "/verify",
        {
          ...taskInput.task_data,
          responses_create_params: taskInput.responses_create_params,
          response: this.#response,
        },
        { signal, headers: withCookies(this.#handles.resources_cookies, follows) },
      );
      return parseReply(VerifyReplySchema, reply.body, "the verify reply") as JsonObject;
    });
  }

  /** The resources session's close. */
  async #closeResources(timeoutMs: number): Promise<void> {
    await this.#post(
      this.#deps.config.resources_server,
      "/close_session",
      {
        resources_session_id: this.#handles.resources_session_id,
        episode_id: this.#wireEpisode(),
      },
      { timeoutMs, headers: withCookies(this.#handles.resources_cookies) },
    );
  }
}
