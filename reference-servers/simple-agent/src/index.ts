/**
 * The Simple Agent: the reference agent with full checkpoint support. Each activation runs a
 * turn loop (model call, then the reply's tool calls, until the model answers) that records a
 * boundary before every model call and after every tool round, so a checkpoint can cut a
 * session mid-loop and a fresh process continues it from there. It also serves the legacy
 * whole-episode `/run` (seed → loop → verify). See README.md and docs/agent.md.
 */
import { z } from "zod";
import {
  ACTIVATION_HEADER,
  TOKEN_CAPTURE_SEGMENT,
  cookieHeader,
  rolloutPath,
  setCookieJar,
  type CookieJar,
} from "gym-participant-sdk/protocol";
import {
  AgentServer,
  CheckpointStateError,
  EpisodeError,
  GymError,
  InvalidRequestError,
  captureKey,
  isMainModule,
  serveMain,
  type AgentCloseResult,
  type AgentSeedRequest,
  type AgentSessionView,
  type ExportAgentSessionsInput,
  type JsonValue,
  type LegacyRunInput,
  type RebuiltAgentSession,
  type RespondInput,
  type RespondResult,
  type RestoreAgentSessionsInput,
  type RolloutContext,
  type RouteInput,
  type TextReply,
} from "gym-participant-sdk";
import {
  SimpleAgentConfigSchema,
  buildSessionState,
  type SimpleAgentConfig,
  type SimpleSessionState,
} from "./config.js";
import { runLegacy, type RunCallReply } from "./legacy-run.js";
import { exportedSessionOf } from "./exported-session.js";
import { McpToolbox } from "./mcp-tools.js";
import { loadLoopState, withTrajectory, type Item } from "./trajectory.js";
import { parseModelReply, runTurnLoop, type ModelReply, type ToolReply } from "./turn-loop.js";

export { SimpleAgentConfigSchema, type SimpleAgentConfig, type SimpleSessionState };
export { LoopBoundarySchema, ObservationBundleSchema } from "./trajectory.js";

/**
 * The reference agent with full checkpoint support: sessions seeded by an
 * environment server, activations that park at turn-loop boundaries, export/restore of every
 * session, and the legacy `/run`.
 *
 * @example
 * const agent = new SimpleAgent({
 *   name: "simple_agent",
 *   config: { model_server: "policy", resources_server: "counter" },
 *   deployment,
 * });
 * await agent.listen({ port: 0 });
 */
export default class SimpleAgent extends AgentServer<SimpleSessionState, SimpleAgentConfig> {
  static override checkpointSessionsSupported = true;

  protected override configSchema(): z.ZodType<SimpleAgentConfig> {
    return SimpleAgentConfigSchema;
  }

  /** The validated settings. */
  get simpleConfig(): SimpleAgentConfig {
    return this.config;
  }

  // ---- Sessions ----------------------------------------------------------------------------

  protected override createSessionState(input: {
    readonly request: AgentSeedRequest;
  }): SimpleSessionState {
    try {
      return buildSessionState(input.request, this.simpleConfig.tool_accesses);
    } catch (error) {
      // A seed asking for what this agent cannot serve is the caller's to fix: 422, not 500.
      throw new InvalidRequestError((error as Error).message, [
        { path: [], message: (error as Error).message },
      ]);
    }
  }

  protected override closeSessionState(input: {
    readonly state: SimpleSessionState | undefined;
  }): AgentCloseResult {
    return {
      agent_observations: (input.state?.observations ?? null) as JsonValue | null,
      resources_cookies: input.state?.resourcesCookies ?? null,
    };
  }

  protected override exportAgentSessions(
    input: ExportAgentSessionsInput,
  ): Map<string, Record<string, unknown>> {
    // What ExportedSessionSchema reads back at restore.
    const out = new Map<string, Record<string, unknown>>();
    for (const key of input.sessionKeys) {
      const view = this.sessionView(key);
      if (view === undefined || view.request === null || view.state === undefined) {
        throw new Error(`the Simple Agent holds no open session ${key}`);
      }
      out.set(key, {
        request: view.request,
        // Kept as is: a session without a direct grant has no jar, and a restore keeps none.
        resources_cookies: view.state.resourcesCookies,
        observations: view.state.observations,
      });
    }
    return out;
  }

  /** Rebuilds every session as a seed would, grant checks included; a throw restores none. */
  protected override restoreAgentSessions(
    input: RestoreAgentSessionsInput,
  ): Map<string, RebuiltAgentSession<SimpleSessionState>> {
    const out = new Map<string, RebuiltAgentSession<SimpleSessionState>>();
    for (const session of input.sessions) {
      const parsed = exportedSessionOf(session.session);
      if (!parsed.success) {
        throw new CheckpointStateError(
          `agent session ${session.sessionKey}: ${parsed.error.issues
            .slice(0, 3)
            .map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`)
            .join("; ")}`,
          captureKey(session.episodeId),
        );
      }
      const request = this.seedRequestFor(parsed.data.request, session.episodeId);
      const state = buildSessionState(request, this.simpleConfig.tool_accesses);
      out.set(session.sessionKey, {
        request,
        state: {
          ...state,
          resourcesCookies: parsed.data.resources_cookies,
          observations: parsed.data.observations,
        },
      });
    }
    return out;
  }

  /** Nothing outside the process to free; the SDK drops the session. */
  protected override retireAgentSession(): Promise<void> {
    return Promise.resolve();
  }

  // ---- The turn loop -----------------------------------------------------------------------

  protected override async respond(
    input: RespondInput<SimpleSessionState>,
  ): Promise<RespondResult> {
    const config = this.simpleConfig;
    // A legacy `/run` session has no seed request: its loop is session-less.
    const seeded = input.session !== null && input.session.request !== null ? input.session : null;
    const state = seeded?.state ?? null;
    if (seeded === null && !config.execute_tools) {
      throw new Error("execute_tools: false is only allowed for agent session activations");
    }
    const continuation =
      input.activation.continuation === null ? null : loadLoopState(input.activation.continuation);
    const modelPath = modelPathOf(input.rollout);
    // Connected on first use and closed with the activation: a session keeps only its grants.
    const mcp =
      state === null || state.mcpGrants.length === 0
        ? null
        : new McpToolbox({
            grants: state.mcpGrants,
            urlOf: (grant) => this.#mcpUrl(grant.connection.url, input.rollout),
            optionalFailed: (grant, error) =>
              this.logger.warn(
                { err: error, grant: grant.name },
                "optional MCP grant unreachable: its tools are not offered",
              ),
          });
    let result: Awaited<ReturnType<typeof runTurnLoop>>;
    try {
      result = await runTurnLoop({
        body: input.body,
        activation: input.activation,
        continuation,
        resourcesCookies: seeded === null ? input.cookies : (state?.resourcesCookies ?? {}),
        executeTools: seeded === null || config.execute_tools,
        maxSteps: config.max_steps,
        collectTrajectory: config.collect_trajectory && input.rollout !== null,
        invocationId: input.invocationId,
        callModel: async (body, cookies, signal) =>
          await this.#callModel(
            modelPath,
            mcp === null ? body : await mcp.offer(body, signal),
            cookies,
            signal,
          ),
        callTool: async (name, args, jar, signal) =>
          (await mcp?.call(name, args, signal)) ??
          (await this.#callTool(seeded, input.rollout, name, args, jar, signal)),
      });
    } finally {
      await mcp?.close();
    }
    if (seeded !== null && state !== null) {
      this.setSessionState(seeded.key, {
        ...state,
        resourcesCookies: state.resourcesCookies === null ? null : result.resourcesCookies,
        observations:
          result.trajectory === null
            ? state.observations
            : withTrajectory(state.observations, result.trajectory),
      });
    }
    const response: Item =
      result.trajectory === null
        ? result.response
        : { ...result.response, _ng_trajectory: result.trajectory };
    // A session's resources cookies stay with the agent; a session-less caller gets them back.
    const cookies =
      seeded === null
        ? { ...result.resourcesCookies, ...result.modelCookies }
        : { ...result.modelCookies };
    return { response, cookies };
  }

  async #callModel(
    path: string,
    body: Item,
    cookies: CookieJar,
    signal: AbortSignal,
  ): Promise<ModelReply> {
    const server = this.simpleConfig.model_server;
    const reply = await this.client.postText(server, path, body, {
      headers: cookieHeaders(cookies),
      signal,
    });
    // The model found the request invalid: the input and parameters are the caller's own, so
    // it is the caller's mistake (422 with the model's issues), not the model server's failure.
    const invalid = reply.status === 422 ? invalidRequestOf(reply.body) : null;
    if (invalid !== null) {
      throw new InvalidRequestError(
        `the model server refused the request built from this input: ${invalid.detail}`,
        invalid.issues,
      );
    }
    // The model has this attempt retired (a retire reached it first): the caller's attempt is
    // stale here too, and must hear so (409), not that the model failed.
    const refused = reply.status === 409 ? refusalOf(reply.body) : null;
    if (refused?.code === "stale_attempt") {
      throw new EpisodeError("stale_attempt", `the model server refused it: ${refused.detail}`);
    }
    // Any other refusal or a garbled reply is the model server's failure: 502, naming it.
    if (reply.status < 200 || reply.status >= 300) {
      throw new GymError(
        "upstream_error",
        `model server ${server} answered HTTP ${reply.status} at ${path}: ${reply.body.slice(0, 500)}`,
      );
    }
    let response: Item;
    try {
      response = parseModelReply(reply.body);
    } catch (error) {
      throw new GymError(
        "upstream_error",
        `model server ${server} at ${path}: ${(error as Error).message}`,
      );
    }
    return { response, cookies: setCookieJar(reply.headers["set-cookie"]) };
  }

  async #callTool(
    seeded: AgentSessionView<SimpleSessionState> | null,
    rollout: RolloutContext | null,
    name: string,
    args: unknown,
    jar: CookieJar,
    signal: AbortSignal,
  ): Promise<ToolReply> {
    if (seeded !== null) {
      const grant = seeded.state?.toolAccess ?? null;
      if (grant === null) {
        throw new Error(
          `agent session ${seeded.key} has no direct HTTP tool grant: it cannot call tool ${name}`,
        );
      }
      const url = grantUrl(grant.base_url, rollout, name);
      return await this.#postUrl(url, args, { ...grant.headers, ...cookieHeaders(jar) }, signal);
    }
    const resources = this.simpleConfig.resources_server;
    if (resources === null) {
      throw new Error(`tool ${name}: no resources_server is configured for session-less calls`);
    }
    const path = rollout === null ? `/${name}` : rolloutPath(rollout.captureKey, `/${name}`);
    return withCookies(
      await this.client.postText(resources, path, args, { headers: cookieHeaders(jar), signal }),
    );
  }

  /**
   * Where an activation reaches an MCP grant: a server of the deployment under the
   * activation's own `/ng-rollout/<key>` (replacing one the URL names), so a restored session's
   * calls name the replacement attempt as its direct HTTP calls do; any other URL as granted.
   */
  #mcpUrl(granted: string, rollout: RolloutContext | null): URL {
    const bases = Object.values(this.deployment.servers).map((entry) => entry.url);
    return mcpGrantUrl(granted, rollout, bases);
  }

  /** POSTs JSON to a URL: through the deployment's client when a server lives there. */
  async #postUrl(
    url: URL,
    body: unknown,
    headers: Record<string, string>,
    signal: AbortSignal,
  ): Promise<RunCallReply> {
    const server = Object.entries(this.deployment.servers).find(
      ([, entry]) => new URL(entry.url).origin === url.origin,
    )?.[0];
    if (server !== undefined) {
      const path = `${url.pathname}${url.search}`;
      return withCookies(await this.client.postText(server, path, body, { headers, signal }));
    }
    // A grant may name a host outside the deployment.
    const reply = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify(body ?? null),
      signal,
      redirect: "manual",
    });
    return {
      status: reply.status,
      headers: Object.fromEntries(reply.headers),
      body: await reply.text(),
      cookies: setCookieJar(reply.headers.getSetCookie()),
    };
  }

  // ---- Legacy /run -------------------------------------------------------------------------

  protected override async legacyRun(input: LegacyRunInput): Promise<unknown> {
    const config = this.simpleConfig;
    if (!config.execute_tools) throw new Error("a legacy /run needs execute_tools: true");
    const resources = config.resources_server;
    if (resources === null) throw new Error("a legacy /run needs a resources_server");
    const key = input.episode === null ? null : captureKey(input.episode);
    const under = (path: string): string => (key === null ? path : rolloutPath(key, path));
    return await runLegacy({
      ...input,
      captureKey: key,
      skipVerification: config.skip_verification,
      skipVerificationReward: config.skip_verification_reward,
      resources: async (path, body, jar, headers, signal) =>
        withCookies(
          await this.client.postText(resources, under(path), body, {
            headers: { ...headers, ...cookieHeaders(jar) },
            signal,
          }),
        ),
      dispatch: async (body, jar, signal) => {
        if (!Object.hasOwn(this.deployment.servers, this.name)) {
          throw new Error(
            `a legacy /run sends its turn loop to this agent: the deployment has no server ${this.name}`,
          );
        }
        const capture = config.token_id_capture ? TOKEN_CAPTURE_SEGMENT : "";
        const path = key === null ? "/v1/responses" : rolloutPath(key, `${capture}/v1/responses`);
        return withCookies(
          await this.client.postText(this.name, path, body, {
            // Activation 1 of the run's session: a restored run gets the kept reply back.
            headers: { [ACTIVATION_HEADER]: "1", ...cookieHeaders(jar) },
            signal,
          }),
        );
      },
      closeFailed: (error) =>
        this.logger.warn(
          { err: error, rollout: key },
          "legacy /run: closing the resources session failed; the verdict stands",
        ),
    });
  }

  // ---- Metrics -----------------------------------------------------------------------------

  protected override async aggregateMetrics(input: RouteInput<unknown>): Promise<unknown> {
    const resources = this.simpleConfig.resources_server;
    if (resources === null) return {};
    return await this.client.post(resources, "/aggregate_metrics", input.body ?? {}, {
      signal: input.signal,
    });
  }
}

/** The model path of an activation: `/v1/responses` under the inbound prefix. */
function modelPathOf(rollout: RolloutContext | null): string {
  if (rollout === null) return "/v1/responses";
  const capture = rollout.tokenCapture ? TOKEN_CAPTURE_SEGMENT : "";
  return rolloutPath(rollout.captureKey, `${capture}/v1/responses`);
}

/**
 * A direct grant's tool URL: the grant's base URL with its trailing `/ng-rollout/<key>`
 * replaced by the activation's own, so a restored session's calls name the replacement attempt.
 */
export function grantUrl(baseUrl: string, rollout: RolloutContext | null, name: string): URL {
  const url = new URL(baseUrl);
  let path = url.pathname.replace(/\/+$/, "");
  if (rollout !== null) {
    path = `${path.replace(/\/ng-rollout\/[^/]+$/, "")}/ng-rollout/${rollout.captureKey}`;
  }
  url.pathname = `${path}/${name}`;
  return url;
}

/**
 * An MCP grant's URL for an activation: when it lies under one of `bases` (the deployment's
 * servers), the activation's `/ng-rollout/<key>` goes right after that base, replacing a
 * prefix the URL already has; otherwise (another host, or no rollout) the URL as granted.
 *
 * @example
 * const rollout = { captureKey: "r-a1", episodeId: fromCaptureKey("r-a1"), tokenCapture: false };
 * mcpGrantUrl("http://h:1/mcp", rollout, ["http://h:1"]).href; // "http://h:1/ng-rollout/r-a1/mcp"
 */
export function mcpGrantUrl(
  granted: string,
  rollout: RolloutContext | null,
  bases: readonly string[],
): URL {
  const url = new URL(granted);
  if (rollout === null) return url;
  for (const base of bases) {
    const at = new URL(base);
    const root = at.pathname.replace(/\/+$/, "");
    if (at.origin !== url.origin || !url.pathname.startsWith(`${root}/`)) continue;
    const rest = url.pathname.slice(root.length).replace(/^\/ng-rollout\/[^/]+(?=\/)/, "");
    url.pathname = `${root}/ng-rollout/${rollout.captureKey}${rest}`;
    return url;
  }
  return url;
}

function cookieHeaders(jar: CookieJar): Record<string, string> {
  const header = cookieHeader(jar);
  return header === undefined ? {} : { cookie: header };
}

function withCookies(reply: TextReply): RunCallReply {
  return { ...reply, cookies: setCookieJar(reply.headers["set-cookie"]) };
}

if (isMainModule(import.meta.url)) await serveMain(SimpleAgent);

/** A refusal's error envelope: its code, detail and issues; null when the body is none. */
function refusalOf(body: string): {
  code: string;
  detail: string;
  issues: { path: (string | number)[]; message: string }[];
} | null {
  try {
    const parsed = JSON.parse(body) as {
      error?: { code?: unknown; detail?: unknown; issues?: unknown };
    };
    if (typeof parsed.error?.code !== "string") return null;
    const issues = Array.isArray(parsed.error.issues)
      ? (parsed.error.issues as { path: (string | number)[]; message: string }[])
      : [];
    return { code: parsed.error.code, detail: String(parsed.error.detail ?? ""), issues };
  } catch {
    return null;
  }
}

/** The model's `invalid_request` envelope (detail and issues), or null for anything else. */
function invalidRequestOf(
  body: string,
): { detail: string; issues: { path: (string | number)[]; message: string }[] } | null {
  const refused = refusalOf(body);
  return refused?.code === "invalid_request" ? refused : null;
}
