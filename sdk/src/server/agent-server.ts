/**
 * The base class of agent servers: session seed, activation and close, the legacy `/run`, and
 * direct `/v1/responses` calls, taking part in checkpoints through the agent session
 * participant (agents with session hooks) or the restart-only participant (agents without).
 * The sessions live in one {@link AgentSessionTable}; this class adapts routes, the session
 * cookie and the author's hooks to it.
 *
 * @see docs/agent.md
 * @module
 */
import type { IncomingMessage } from "node:http";
import type { Express, Request, Response } from "express";
import { z } from "zod";
import { ConfigError, DetailError, EpisodeError } from "../errors.js";
import { captureKey, parseEpisodeId, sameEpisode, type EpisodeId } from "../identity/episode-id.js";
import { episodeFromRunBody } from "../identity/run-body.js";
import {
  isLegacySessionKey,
  legacySessionKey,
  type AgentSessionHooks,
} from "../participants/agent/agent-records.js";
import { AgentSessionParticipant } from "../participants/agent/agent-session-participant.js";
import {
  AgentSessionEntry,
  AgentSessionTable,
  invocationId,
  type StoredActivationReply,
} from "../participants/agent/agent-session-table.js";
import {
  restoredSeedRequest,
  sessionHooks,
  type RebuiltAgentSession,
} from "../participants/agent/session-checkpoint.js";
import { RestartOnlyAgentParticipant } from "../participants/agent/restart-only-participant.js";
import { untilSettledOrAborted } from "../util/abortable.js";
import type { BySession } from "../util/by-session.js";
import { parseCookieHeader, setCookieLines, type CookieJar } from "../util/cookies.js";
import { RESTART_HEADER } from "../wire/checkpoint-headers.js";
import {
  ACTIVATION_HEADER,
  AgentRunReplySchema,
  type AgentCloseReply,
  type AgentCloseRequest,
  type AgentRunRequest,
  type AgentSeedReply,
  type AgentSeedRequest,
  type ResponsesCreateRequest,
} from "../wire/agent.js";
import {
  legacySteps,
  passThroughSteps,
  stopReason,
  untracked,
} from "./agent/activation-contexts.js";
import { agentRoutes } from "./agent/agent-routes.js";
import { AgentSessionCookie } from "./agent/agent-session-cookie.js";
import {
  PartialSessionSetupError,
  type ActivationContext,
  type AgentCloseResult,
  type AgentSessionView,
  type CloseSessionStateInput,
  type CreateSessionStateInput,
  type ExportAgentSessionsInput,
  type LegacyRunInput,
  type RespondInput,
  type RespondResult,
  type RestoreAgentSessionsInput,
  type RetireAgentSessionInput,
} from "./agent/agent-hooks.js";
import { installRestartTracking } from "./agent/restart-tracking.js";
import type { DataRoute, RouteInput } from "./data-route.js";
import { AggregateMetricsReplySchema } from "./resources/aggregate-metrics.js";
import { rolloutOf, type RolloutContext } from "./rollout-prefix.js";
import { Server, type ServerOptions } from "./server.js";

/** The longest setting in seconds a Node timer takes (about 24.8 days). */
const MAX_TIMEOUT_S = 2_147_483;

/** The base `config:` of an agent server (a subclass extends it). */
export const AgentConfigSchema = z
  .strictObject({
    /** How long a close receipt is kept for a retried close, in seconds. */
    session_close_retry_window_seconds: z.number().positive().max(MAX_TIMEOUT_S).default(300),
  })
  .meta({ id: "AgentConfig" });
/** The base agent settings. */
export type AgentConfig = z.infer<typeof AgentConfigSchema>;

/**
 * What {@link AgentServer.exportAgentSessions} returns: one JSON object per session key, as a
 * `Map` or a plain object.
 */
export type AgentSessionsExport = BySession<Readonly<Record<string, unknown>>>;

/**
 * What {@link AgentServer.restoreAgentSessions} returns: each session it was given, rebuilt, by
 * session key, as a `Map` or a plain object.
 */
export type AgentSessionsRestore<State> = BySession<RebuiltAgentSession<State>>;

/** Either agent participant: with session hooks, or restart-only. */
export type AgentParticipant = AgentSessionParticipant | RestartOnlyAgentParticipant;

const HOOK_NAMES = ["exportAgentSessions", "restoreAgentSessions", "retireAgentSession"] as const;

/**
 * The base class of agent servers. Subclass it, implement {@link respond} (the turn loop), and
 * optionally {@link createSessionState}, {@link closeSessionState}, {@link legacyRun} and
 * {@link aggregateMetrics}. Set `static checkpointSessionsSupported = true` and implement the
 * three session hooks to have sessions continued after a crash; without them, with
 * checkpointing on, the agent's rollouts are restarts.
 *
 * Routes: `POST /v1/agent_sessions` (seed), `POST /v1/agent_sessions/close`, `POST
 * /v1/responses` (also under `/ng-rollout/<key>[/training-token-capture]`), `POST /run` when
 * {@link legacyRun} is implemented, `POST /aggregate_metrics` when {@link aggregateMetrics} is,
 * and any {@link extraRoutes}.
 *
 * @typeParam State - what {@link createSessionState} builds for a session
 * @typeParam Config - the validated `config:` (declare it with {@link configSchema})
 *
 * @example
 * // One model call per activation: forward the input to the policy model, answer its reply.
 * class OneShotAgent extends AgentServer {
 *   protected override async respond({ body, rollout, activation, signal }: RespondInput<unknown>) {
 *     // "policy": the policy model server's name in the deployment.
 *     const response = await activation.modelCall(() =>
 *       this.client.post<Record<string, unknown>>("policy", "/v1/responses", body, {
 *         rollout: rollout?.captureKey ?? null,
 *         signal,
 *       }),
 *     );
 *     return { response };
 *   }
 * }
 * if (isMainModule(import.meta.url)) await serveMain(OneShotAgent);
 *
 * @see docs/agent.md
 */
export abstract class AgentServer<
  State = unknown,
  Config extends AgentConfig = AgentConfig,
> extends Server<Config> {
  /** Whether the agent implements the session hooks. @default false */
  static checkpointSessionsSupported = false;

  readonly #cookie: AgentSessionCookie;
  readonly #sessions: AgentSessionTable<State>;
  readonly #hooksDeclared: boolean;
  #sessionParticipant: AgentSessionParticipant | null = null;
  #restartOnly: RestartOnlyAgentParticipant | null = null;

  constructor(options: ServerOptions) {
    super(options);
    this.#cookie = new AgentSessionCookie(
      this.name,
      (cookieName) => this.sessionCookieKey(cookieName),
      this.workerRoutingId,
    );
    this.#sessions = new AgentSessionTable<State>({
      receiptWindowMs: () => this.config.session_close_retry_window_seconds * 1000,
    });
    this.#hooksDeclared = new.target.checkpointSessionsSupported;
    if (this.#hooksDeclared) {
      const missing = HOOK_NAMES.filter((hook) => this[hook] === AgentServer.prototype[hook]);
      if (missing.length > 0) {
        throw new ConfigError(
          `${new.target.name} sets checkpointSessionsSupported = true but does not implement [${missing.join(", ")}]`,
        );
      }
    }
  }

  /**
   * The agent's participant once the app is built with checkpointing on: the session
   * participant (hooks declared) or the restart-only one; null otherwise.
   */
  override get participant(): AgentParticipant | null {
    this.app();
    return this.#sessionParticipant ?? this.#restartOnly;
  }

  /** {@link AgentConfigSchema}, unless {@link configSchema} declares an extension of it. */
  protected override baseConfigSchema(): z.ZodType<AgentConfig> {
    return AgentConfigSchema;
  }

  // ---- What subclasses implement -----------------------------------------------------------

  /** The turn loop of one activation (or a session-less call). */
  protected abstract respond(input: RespondInput<State>): Promise<RespondResult>;

  /**
   * Builds a seeded session's state. Throw {@link PartialSessionSetupError} when setup failed
   * part way, so the partial state is kept for the close. @default no state
   */
  protected createSessionState(
    _input: CreateSessionStateInput,
  ): State | Promise<State | undefined> {
    return Promise.resolve(undefined);
  }

  /** Closes a session: its observations and final resources cookies. Runs once per session. */
  protected closeSessionState(
    _input: CloseSessionStateInput<State>,
  ): AgentCloseResult | Promise<AgentCloseResult> {
    return { agent_observations: null, resources_cookies: null };
  }

  /** The legacy whole-episode `/run`; the route exists only when a subclass implements it. */
  protected legacyRun(_input: LegacyRunInput): Promise<unknown> {
    return Promise.reject(new Error("legacyRun is not implemented"));
  }

  /** `/aggregate_metrics`; the route exists only when a subclass implements it. */
  protected aggregateMetrics(_input: RouteInput<unknown>): unknown {
    return undefined;
  }

  /**
   * The schema of what {@link legacyRun} answers, shown as the `/run` reply in the server's
   * OpenAPI document (not checked at run time). @default {@link AgentRunReplySchema}: the
   * verify response, at least `reward`
   */
  protected legacyRunReplySchema(): z.ZodType {
    return AgentRunReplySchema;
  }

  /**
   * The schema of what {@link aggregateMetrics} answers, shown as the `/aggregate_metrics`
   * reply in the server's OpenAPI document (not checked at run time).
   * @default {@link AggregateMetricsReplySchema}, a resources server's aggregation
   */
  protected aggregateMetricsReplySchema(): z.ZodType {
    return AggregateMetricsReplySchema;
  }

  /**
   * Session hook: describes every named session (never a `run:` key) as an object of JSON
   * values, as of the checkpoint; every session is parked. Read the state with
   * {@link sessionView}. Return a `Map` or a plain object by session key (a key such as
   * `__proto__` is safe in either: the SDK reads own keys and guards the prototype). The values
   * are checked as the commit writes them: one that is not JSON fails the commit with 422 naming
   * the episode and the path.
   *
   * @example
   * protected override exportAgentSessions({ sessionKeys }: ExportAgentSessionsInput) {
   *   const out = new Map<string, Record<string, unknown>>();
   *   for (const key of sessionKeys) {
   *     const view = this.sessionView(key);
   *     if (view !== undefined) out.set(key, { request: view.request, turns: view.state?.turns });
   *   }
   *   return out;
   * }
   */
  protected exportAgentSessions(
    _input: ExportAgentSessionsInput,
  ): AgentSessionsExport | Promise<AgentSessionsExport> {
    return new Map();
  }

  /**
   * Session hook, in a fresh process: rebuilds every session it is given and returns them by
   * session key, each as its seed request (as exported) and state; the SDK rebinds each request
   * to the replacement attempt and installs them all. Throw to install none; a session left out
   * refuses the restore with 409 `checkpoint_error` naming it. Legacy `run:` sessions are the
   * SDK's and never reach it.
   *
   * @example
   * protected override restoreAgentSessions({ sessions }: RestoreAgentSessionsInput) {
   *   const out = new Map<string, RebuiltAgentSession<Conversation>>();
   *   for (const s of sessions) {
   *     const saved = ExportedSchema.parse(s.session);
   *     out.set(s.sessionKey, { request: saved.request, state: { turns: saved.turns } });
   *   }
   *   return out;
   * }
   */
  protected restoreAgentSessions(
    _input: RestoreAgentSessionsInput,
  ): AgentSessionsRestore<State> | Promise<AgentSessionsRestore<State>> {
    return new Map();
  }

  /**
   * Session hook: frees one session's state (stops its sandbox) on retire; the SDK then drops
   * the session without a receipt. Must tolerate a key with no state. @default releases the
   * session through {@link closeSessionState}
   */
  protected async retireAgentSession(input: RetireAgentSessionInput): Promise<void> {
    const entry = this.#sessions.get(input.sessionKey);
    if (entry === undefined || !entry.native) return;
    await this.closeSessionState({ ...input, state: entry.state });
  }

  // ---- Helpers for subclasses --------------------------------------------------------------

  /** A tracked session, or undefined. */
  protected sessionView(sessionKey: string): AgentSessionView<State> | undefined {
    const entry = this.#sessions.get(sessionKey);
    return entry === undefined ? undefined : view(entry);
  }

  /** Replaces a session's state (e.g. its resources cookie jar after a tool call). */
  protected setSessionState(sessionKey: string, state: State): void {
    const entry = this.#sessions.get(sessionKey);
    if (entry !== undefined) entry.state = state;
  }

  /**
   * A stored seed request rebound to the replacement attempt, validated as a seed is: for a
   * restore hook that builds the state from the request (the SDK does the same to what the hook
   * returns, so returning the stored request as it is suffices).
   * @throws CheckpointStateError `invalid_checkpoint_state` naming the episode
   */
  protected seedRequestFor(request: unknown, episode: EpisodeId): AgentSeedRequest {
    return restoredSeedRequest(request, episode);
  }

  // ---- Server wiring -----------------------------------------------------------------------

  protected override createParticipant(): AgentParticipant {
    if (this.#hooksDeclared) {
      this.#sessionParticipant = new AgentSessionParticipant({
        hooks: this.#hooks(),
        sessions: this.#sessions,
        owner: this.workerRoutingId,
      });
      return this.#sessionParticipant;
    }
    this.#restartOnly = new RestartOnlyAgentParticipant({
      freeSession: (input) => this.#retireSession(input.sessionKey, input.signal),
      logger: this.logger,
    });
    return this.#restartOnly;
  }

  protected override installKindMiddleware(app: Express): void {
    if (this.#restartOnly !== null) installRestartTracking(app, this.#restartOnly);
  }

  protected override routes(): readonly DataRoute[] {
    return agentRoutes({
      seed: (input) => this.#seed(input),
      close: (input) => this.#close(input),
      responses: (input) => this.#responses(input),
      run: this.legacyRun === AgentServer.prototype.legacyRun ? null : (input) => this.#run(input),
      aggregateMetrics:
        this.aggregateMetrics === AgentServer.prototype.aggregateMetrics
          ? null
          : (input) => this.aggregateMetrics(input),
      runReply: this.legacyRunReplySchema(),
      aggregateMetricsReply: this.aggregateMetricsReplySchema(),
    });
  }

  // ---- Seed and close ----------------------------------------------------------------------

  async #seed(input: RouteInput<AgentSeedRequest>): Promise<AgentSeedReply> {
    const { body, req, res, signal } = input;
    const key = body.agent_session_id;
    const cookieId = this.#cookieMatching(req, key);
    const episode = parseEpisodeId(body.episode_id);
    const participant = this.#sessionParticipant;
    let ticket: { register(): void; leave(): void } | null = null;
    if (this.#restartOnly !== null) {
      ticket = await this.#restartOnly.enterSeed(key, episode, signal);
      res.setHeader(RESTART_HEADER, "1");
    } else if (participant !== null) {
      ticket = await participant.enterSeed(key, episode, signal);
    }
    try {
      await this.#sessions.seed({
        key,
        episode,
        request: body,
        hadCookie: cookieId !== null,
        build: async () => {
          try {
            return { state: await this.createSessionState({ request: body, signal }) };
          } catch (error) {
            if (!(error instanceof PartialSessionSetupError)) throw error;
            // Kept, marked closing, so only a close can use (and free) it.
            return { state: error.state as State, failure: error.cause };
          }
        },
        register: () => ticket?.register(),
        // Retired while building: free what was built before the waiting retire replies.
        retiredWhileBuilding: async () => {
          if (participant !== null && !participant.has(key)) await this.#retireSession(key, signal);
        },
      });
    } finally {
      ticket?.leave();
    }
    this.#cookie.set(res, key);
    return { agent_session_id: key };
  }

  async #close(input: RouteInput<AgentCloseRequest>): Promise<AgentCloseReply> {
    const { body, req, res, signal } = input;
    const key = body.agent_session_id;
    const cookieId = this.#cookieMatching(req, key);
    const participant = this.#sessionParticipant;
    const reply = await this.#sessions.close({
      key,
      episode: parseEpisodeId(body.episode_id),
      hadCookie: cookieId !== null,
      // The participant marks the session closing once admission is open, so an activation
      // that arrives during a checkpoint is not refused.
      markClosing: async (entry) => {
        if (participant !== null) await participant.closeSession(key, { signal });
        else entry.closing = true;
      },
      closeState: (entry) =>
        this.closeSessionState({ sessionKey: key, state: entry.state, signal }),
      closed: () => this.#restartOnly?.sessionClosed(key),
    });
    // Re-set the marker: a stale activation with this cookie is refused, not taken session-less.
    this.#cookie.set(res, key);
    return reply;
  }

  // ---- Activations and direct calls --------------------------------------------------------

  async #responses(input: RouteInput<ResponsesCreateRequest>): Promise<unknown> {
    const cookieId = this.#readCookie(input.req);
    const rollout = rolloutOf(input.req);
    if (cookieId !== null) {
      const entry = this.#sessions.get(cookieId);
      if (entry === undefined || !entry.native || entry.closing) {
        throw new DetailError(409, "Unknown or closing agent_session_id");
      }
      return await this.#sessionActivation(entry, input, rollout);
    }
    const participant = this.#sessionParticipant;
    if (participant !== null && rollout !== null) {
      const key = legacySessionKey(rollout.episodeId.rollout_id);
      const entry = this.#sessions.get(key);
      const owner = participant.episodeOf(key);
      if (entry !== undefined && owner !== null && sameEpisode(owner, rollout.episodeId)) {
        return await this.#sessionActivation(entry, input, rollout);
      }
    }
    if (participant === null) {
      return await this.#runLoop(input, null, untracked(null, input.signal), "root", false);
    }
    if (rollout === null) throw EpisodeError.rolloutIdRequired("a direct /v1/responses call");
    const direct = participant.trackDirect(rollout.episodeId);
    try {
      const context = untracked(direct.signal, input.signal);
      return await this.#runLoop(input, null, context, "root", false);
    } finally {
      direct.done();
    }
  }

  async #sessionActivation(
    entry: AgentSessionEntry<State>,
    input: RouteInput<ResponsesCreateRequest>,
    rollout: RolloutContext | null,
  ): Promise<unknown> {
    const participant = this.#sessionParticipant;
    if (participant === null) {
      entry.activations += 1;
      const context = untracked(null, input.signal);
      return await this.#runLoop(input, entry, context, invocationId(entry.activations), false);
    }
    if (rollout === null) throw EpisodeError.rolloutIdRequired("an agent session activation");
    participant.retired.check(rollout.episodeId);
    if (!sameEpisode(rollout.episodeId, entry.episode)) {
      throw new EpisodeError(
        "stale_attempt",
        `agent session ${entry.key} belongs to attempt ${captureKey(entry.episode)}, not ${rollout.captureKey}`,
        rollout.captureKey,
      );
    }
    const turn = this.#sessions.turnOf(entry, input.req.get(ACTIVATION_HEADER), rollout.captureKey);
    if (turn.kind === "join") {
      return sendStored(input.res, await untilSettledOrAborted(turn.reply, [input.signal]));
    }
    if (turn.kind === "replay") {
      participant.claim(entry.key);
      return sendStored(input.res, turn.reply);
    }
    const activation = participant.startActivation(entry.key, entry.episode, {
      signal: input.signal,
    });
    try {
      if (activation.continuation === null) entry.activations = turn.index ?? entry.activations + 1;
      const context: ActivationContext = {
        tracked: true,
        continuation: activation.continuation,
        signal: activation.signal,
        boundary: (snapshot) => activation.boundary(snapshot),
        modelCall: (call) => activation.modelCall(call),
      };
      const invocation = invocationId(entry.activations);
      return await this.#runLoop(input, entry, context, invocation, turn.index !== null);
    } finally {
      activation.end();
    }
  }

  async #runLoop(
    input: RouteInput<ResponsesCreateRequest>,
    entry: AgentSessionEntry<State> | null,
    activation: ActivationContext,
    invocation: string,
    indexed: boolean,
  ): Promise<unknown> {
    const stored = await this.#sessions.runActivation(entry, indexed, async () => {
      try {
        return await this.respond({
          body: input.body,
          session: entry === null ? null : view(entry),
          activation,
          invocationId: invocation,
          rollout: rolloutOf(input.req),
          cookies: this.#requestCookies(input.req),
          signal: activation.signal,
          req: input.req,
        });
      } catch (error) {
        throw stopReason(activation.signal) ?? error;
      }
    });
    return sendStored(input.res, stored);
  }

  // ---- Legacy /run -------------------------------------------------------------------------

  async #run(input: RouteInput<AgentRunRequest>): Promise<unknown> {
    const { body, req, signal } = input;
    const episode = episodeFromRunBody(body);
    const cookies = this.#requestCookies(req);
    const participant = this.#sessionParticipant;
    if (this.checkpointEnabled && episode === null) {
      throw EpisodeError.rolloutIdRequired("a /run");
    }
    if (participant === null || episode === null) {
      const steps = passThroughSteps(episode, signal);
      return await this.legacyRun({ body, episode, steps, cookies, signal, req });
    }
    // With several workers, a restored run waits at the coordinator for its replacement.
    await this.workerLink?.claimRestored(captureKey(episode));
    const handle = participant.beginLegacyRun(episode, { signal });
    const key = handle.sessionKey;
    let entry = this.#sessions.get(key);
    if (entry === undefined) {
      entry = new AgentSessionEntry<State>(key, episode, null, undefined);
      this.#sessions.add(entry);
    }
    entry.episode = episode;
    const owned = entry;
    try {
      const steps = legacySteps(handle, () => {
        owned.completedReply = null;
      });
      return await this.legacyRun({ body, episode, steps, cookies, signal: handle.signal, req });
    } catch (error) {
      throw stopReason(handle.signal) ?? error;
    } finally {
      owned.completedReply = null;
      this.#sessions.remove(owned);
      handle.end();
    }
  }

  // ---- Hooks as the participant sees them --------------------------------------------------

  #hooks(): AgentSessionHooks {
    return sessionHooks(this.#sessions, {
      exportAgentSessions: async (input) => await this.exportAgentSessions(input),
      restoreAgentSessions: async (input) => await this.restoreAgentSessions(input),
      retireAgentSession: ({ sessionKey, signal }) => this.#retireSession(sessionKey, signal),
    });
  }

  /** The retire hook, then the session is dropped without a receipt. */
  async #retireSession(sessionKey: string, signal: AbortSignal): Promise<void> {
    const entry = this.#sessions.get(sessionKey);
    if (!isLegacySessionKey(sessionKey)) await this.retireAgentSession({ sessionKey, signal });
    if (entry !== undefined) this.#sessions.remove(entry);
  }

  // ---- Cookies -----------------------------------------------------------------------------

  /** The owner the session marker names, else the `x-ng-session-owner` header's. */
  protected override sessionOwnerOf(req: IncomingMessage): string | null {
    return this.#cookie.ownerOf(req.headers.cookie) ?? super.sessionOwnerOf(req);
  }

  #readCookie(req: Request): string | null {
    const id = this.#cookie.read(req);
    if (id === undefined) throw new DetailError(409, "Invalid agent session marker");
    return id;
  }

  /** The session cookie's ID, which must name `key` when present. */
  #cookieMatching(req: Request, key: string): string | null {
    const cookieId = this.#readCookie(req);
    if (cookieId !== null && cookieId !== key) {
      throw new DetailError(409, "agent_session_id does not match the session cookie");
    }
    return cookieId;
  }

  #requestCookies(req: Request): CookieJar {
    const jar = parseCookieHeader(req.headers.cookie);
    delete jar[this.#cookie.name];
    return jar;
  }
}

function view<State>(entry: AgentSessionEntry<State>): AgentSessionView<State> {
  return { key: entry.key, episode: entry.episode, request: entry.request, state: entry.state };
}

function sendStored(res: Response, reply: StoredActivationReply): unknown {
  for (const line of setCookieLines(reply.cookies)) res.append("Set-Cookie", line);
  return reply.response;
}
