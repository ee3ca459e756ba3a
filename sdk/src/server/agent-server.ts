/**
 * The base class of agent servers: session seed, activation and close, the legacy `/run`, and
 * direct `/v1/responses` calls, taking part in checkpoints through the agent session
 * participant (agents with session hooks) or the restart-only participant (agents without).
 *
 * @see docs/agent.md
 * @module
 */
import type { Express, Request, Response } from "express";
import { z } from "zod";
import type { Participant } from "../control/participant.js";
import {
  CheckpointError,
  CheckpointStateError,
  ConfigError,
  DetailError,
  EpisodeError,
} from "../errors.js";
import {
  captureKey,
  episodeIdToWire,
  parseEpisodeId,
  sameEpisode,
  type EpisodeId,
} from "../identity/episode-id.js";
import { episodeFromRunBody } from "../identity/run-body.js";
import {
  isLegacySessionKey,
  legacySessionKey,
  type AgentSessionHooks,
  type RestoredAgentSession,
} from "../participants/agent/agent-records.js";
import {
  ActivationCancelledError,
  AgentSessionParticipant,
  type BoundarySnapshot,
  type LegacyRunHandle,
} from "../participants/agent/agent-session-participant.js";
import { RestartOnlyAgentParticipant } from "../participants/agent/restart-only-participant.js";
import type { BoundaryState, StepMode } from "../steps/episode-steps.js";
import { untilSettledOrAborted } from "../util/abortable.js";
import { parseCookieHeader, setCookieLines, type CookieJar } from "../util/cookies.js";
import { deferred, type Deferred } from "../util/deferred.js";
import { Mutex } from "../util/mutex.js";
import { RESTART_HEADER } from "../wire/checkpoint-headers.js";
import type { JsonValue } from "../wire/json-value.js";
import { AgentSessionCookie } from "./agent/agent-session-cookie.js";
import {
  ACTIVATION_HEADER,
  AgentCloseReplySchema,
  AgentCloseRequestSchema,
  AgentRunRequestSchema,
  AgentSeedReplySchema,
  AgentSeedRequestSchema,
  ResponsesCreateRequestSchema,
  agentSeedRequestFromWire,
  parseActivationIndex,
  type AgentCloseReply,
  type AgentRunRequest,
  type AgentSeedRequest,
  type ResponsesCreateRequest,
} from "./agent/agent-wire.js";
import { installRestartTracking } from "./agent/restart-tracking.js";
import { dataRoute, type DataRoute, type RouteInput } from "./data-route.js";
import { rolloutOf, type RolloutContext } from "./rollout-prefix.js";
import { Server, type ServerOptions } from "./server.js";
import { withFields } from "../util/with-fields.js";

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

/** The fields the SDK adds to every exported session object (see docs/agent.md). */
const BOOKKEEPING_FIELDS = ["activations", "completed_activation", "completed_reply"] as const;

/** The reply of a completed activation, kept to answer a repeated request for it. */
export interface StoredActivationReply {
  /** The reply JSON (without `_ng_trajectory`). */
  readonly response: Record<string, unknown>;
  /** Cookies the reply set. */
  readonly cookies: CookieJar;
}

const StoredReplySchema = z.strictObject({
  response: z.record(z.string(), z.unknown()),
  cookies: z.record(z.string(), z.string()),
});

const BookkeepingSchema = z.looseObject({
  activations: z.number().int().min(0),
  completed_activation: z.number().int().min(0),
  completed_reply: StoredReplySchema.nullable(),
});

type Bookkeeping = z.infer<typeof BookkeepingSchema>;

/**
 * The bookkeeping {@link BookkeepingSchema} reads from a stored session without a kept reply,
 * checked by hand (a restore reads thousands in a fresh process); null otherwise, so the schema
 * parses it (and names what is wrong).
 */
function bookkeepingOf(session: unknown): Bookkeeping | null {
  if (typeof session !== "object" || session === null || Array.isArray(session)) return null;
  const s = session as Record<string, unknown>;
  const count = (value: unknown): value is number =>
    typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
  if (!count(s.activations) || !count(s.completed_activation)) return null;
  // A kept reply (rare: an activation that completed) is the schema's to copy and judge.
  return s.completed_reply === null ? (s as Bookkeeping) : null;
}

/** The work of one activation: what the turn loop records and waits on. */
export interface ActivationContext {
  /** Whether the activation is tracked by the checkpoint participant. */
  readonly tracked: boolean;
  /** The restored boundary this activation continues from, or null: start from the input. */
  readonly continuation: JsonValue | null;
  /** Aborted when a close or retire stops the activation, or the client goes away. */
  readonly signal: AbortSignal;
  /** Records a boundary (the snapshot is built only at export); may park until resume. */
  boundary(snapshot: BoundarySnapshot): Promise<void>;
  /** Runs a policy call made right after a boundary (see {@link AgentSessionParticipant}). */
  modelCall<T>(call: (signal: AbortSignal) => Promise<T>): Promise<T>;
}

/** A session as the turn loop sees it. */
export interface AgentSessionView<State> {
  /** The session key (the seed's `agent_session_id`, or `run:<rollout>`). */
  readonly key: string;
  /** The attempt that owns the session now. */
  readonly episode: EpisodeId;
  /** The seed request; null for a legacy `/run` session. */
  readonly request: AgentSeedRequest | null;
  /** The state the agent built at seed (undefined for a legacy `/run` session). */
  readonly state: State | undefined;
}

/** What {@link AgentServer.respond} receives. */
export interface RespondInput<State> {
  /** The create request. */
  readonly body: ResponsesCreateRequest;
  /** The session, or null for a session-less call. */
  readonly session: AgentSessionView<State> | null;
  /** Boundaries and policy calls of this activation. */
  readonly activation: ActivationContext;
  /** `root` for the first activation of a session (and session-less calls), else `activation-<n>`. */
  readonly invocationId: string;
  /** The rollout of the request's prefix, or null. */
  readonly rollout: RolloutContext | null;
  /** The request's cookies (the agent's own session cookie left out). */
  readonly cookies: CookieJar;
  /** Aborted when the activation must stop; equals `activation.signal`. */
  readonly signal: AbortSignal;
  readonly req: Request;
}

/** What {@link AgentServer.respond} returns. */
export interface RespondResult {
  /** The Responses-style reply JSON. */
  readonly response: Record<string, unknown>;
  /** Cookies to set on the reply. @default none */
  readonly cookies?: CookieJar;
}

/** What {@link AgentServer.closeSessionState} returns. */
export interface AgentCloseResult {
  /** The session's observation bundle, or null. */
  readonly agent_observations: JsonValue | null;
  /** The resources cookie jar at close, or null when the session holds none. */
  readonly resources_cookies: CookieJar | null;
}

/** The steps of a legacy `/run` (checkpointing off: boundaries are no-ops, steps just run). */
export interface LegacyRunSteps {
  /** The run's session key, `run:<rollout_id>`. */
  readonly sessionKey: string;
  /** The restored legacy boundary, handed out once; null: start from the input. */
  continuation(): JsonValue | null;
  /** Records a boundary; inside a checkpoint the run parks here until resume. */
  boundary(state: BoundaryState): Promise<void>;
  /** Runs one step in `wait` or `replay` mode. */
  step<T>(mode: StepMode, fn: (signal: AbortSignal) => T | Promise<T>): Promise<T>;
  /** Makes the run a restart (a seed reply said so). */
  markRestart(signal?: AbortSignal): Promise<void>;
  /** Drops the turn loop's kept reply: call it as you record the boundary that holds it. */
  dropKeptReply(): void;
}

/** What {@link AgentServer.legacyRun} receives. */
export interface LegacyRunInput {
  readonly body: AgentRunRequest;
  /** The attempt the body names, or null (checkpointing off, no rollout fields). */
  readonly episode: EpisodeId | null;
  readonly steps: LegacyRunSteps;
  /** The request's cookies. */
  readonly cookies: CookieJar;
  readonly signal: AbortSignal;
  readonly req: Request;
}

/**
 * Thrown by {@link AgentServer.createSessionState} when setup failed part way: the partial
 * state is kept, marked closing, so only a close can use (and free) it.
 */
export class PartialSessionSetupError<State> extends Error {
  override name = "PartialSessionSetupError";
  constructor(
    readonly state: State,
    cause: unknown,
  ) {
    super(`agent session setup failed part way: ${String((cause as Error)?.message ?? cause)}`, {
      cause,
    });
  }
}

class SessionEntry<State> {
  closing = false;
  activations = 0;
  completedActivation = 0;
  completedReply: StoredActivationReply | null = null;
  running: { readonly index: number; readonly reply: Deferred<StoredActivationReply> } | null =
    null;

  constructor(
    readonly key: string,
    public episode: EpisodeId,
    readonly request: AgentSeedRequest | null,
    public state: State | undefined,
  ) {}
}

interface Receipt {
  readonly reply: AgentCloseReply;
  readonly expiresAt: number;
}

interface AgentServerClass {
  readonly name: string;
  readonly checkpointSessionsSupported: boolean;
}

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
 * {@link legacyRun} is implemented, `POST /aggregate_metrics` when {@link aggregateMetrics} is.
 *
 * @see docs/agent.md
 */
export abstract class AgentServer<State = unknown> extends Server {
  /** Whether the agent implements the session hooks. @default false */
  static checkpointSessionsSupported = false;

  readonly #cookie: AgentSessionCookie;
  readonly #sessions = new Map<string, SessionEntry<State>>();
  readonly #receipts = new Map<string, Receipt>();
  readonly #locks = new Map<string, { mutex: Mutex; users: number }>();
  #sessionParticipant: AgentSessionParticipant | null = null;
  #restartOnly: RestartOnlyAgentParticipant | null = null;

  constructor(options: ServerOptions) {
    super(options);
    this.#cookie = new AgentSessionCookie(this.name);
    const cls = this.constructor as unknown as AgentServerClass;
    if (cls.checkpointSessionsSupported) {
      const missing = HOOK_NAMES.filter((hook) => this[hook] === AgentServer.prototype[hook]);
      if (missing.length > 0) {
        throw new ConfigError(
          `${cls.name} sets checkpointSessionsSupported = true but does not implement [${missing.join(", ")}]`,
        );
      }
    }
  }

  /** The session participant, once the app is built with checkpointing on (hooks present). */
  get sessionParticipant(): AgentSessionParticipant | null {
    this.app();
    return this.#sessionParticipant;
  }

  /** The restart-only participant, once the app is built with checkpointing on (no hooks). */
  get restartOnlyParticipant(): RestartOnlyAgentParticipant | null {
    this.app();
    return this.#restartOnly;
  }

  protected override configSchema(): z.ZodType {
    return AgentConfigSchema;
  }

  /** The validated base settings. */
  protected get agentConfig(): AgentConfig {
    return this.config as AgentConfig;
  }

  // ---- What subclasses implement -----------------------------------------------------------

  /** The turn loop of one activation (or a session-less call). */
  protected abstract respond(input: RespondInput<State>): Promise<RespondResult>;

  /**
   * Builds a seeded session's state. Throw {@link PartialSessionSetupError} when setup failed
   * part way, so the partial state is kept for the close. @default no state
   */
  protected createSessionState(_input: {
    readonly request: AgentSeedRequest;
    readonly signal: AbortSignal;
  }): State | Promise<State> {
    return undefined as State;
  }

  /** Closes a session: its observations and final resources cookies. Runs once per session. */
  protected closeSessionState(_input: {
    readonly sessionKey: string;
    readonly state: State | undefined;
    readonly signal: AbortSignal;
  }): AgentCloseResult | Promise<AgentCloseResult> {
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
   * Session hook: describes every named session (never a `run:` key) as a JSON object, as of
   * the checkpoint. Read the state with {@link sessionView}.
   */
  protected exportAgentSessions(_input: {
    readonly sessionKeys: readonly string[];
    readonly signal: AbortSignal;
  }): Promise<Readonly<Record<string, Record<string, JsonValue>>>> {
    return Promise.resolve({});
  }

  /**
   * Session hook, in a fresh process: validates every session, then installs all with
   * {@link installRestoredSession}, or throws having installed none.
   */
  protected restoreAgentSessions(_input: {
    readonly sessions: readonly RestoredAgentSession[];
    readonly signal: AbortSignal;
  }): Promise<void> {
    return Promise.resolve();
  }

  /**
   * Session hook: frees one session's state (stops its sandbox) on retire; the SDK then drops
   * the session without a receipt. Must tolerate a key with no state. @default releases the
   * session through {@link closeSessionState}
   */
  protected async retireAgentSession(input: {
    readonly sessionKey: string;
    readonly signal: AbortSignal;
  }): Promise<void> {
    const entry = this.#sessions.get(input.sessionKey);
    if (entry === undefined || entry.request === null) return;
    await this.closeSessionState({
      sessionKey: input.sessionKey,
      state: entry.state,
      signal: input.signal,
    });
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

  /** Rebuilds a stored seed request for the replacement attempt (validated as a seed is). */
  protected seedRequestFor(request: unknown, episode: EpisodeId): AgentSeedRequest {
    const fast = agentSeedRequestFromWire(request);
    if (fast !== null) return { ...fast, episode_id: episodeIdToWire(episode) as EpisodeId };
    const parsed = AgentSeedRequestSchema.safeParse(request);
    if (!parsed.success) {
      throw new CheckpointStateError(
        `the stored seed request is invalid: ${parsed.error.issues.map((i) => i.message).join("; ")}`,
        captureKey(episode),
      );
    }
    return { ...parsed.data, episode_id: episodeIdToWire(episode) as EpisodeId };
  }

  /** Installs a restored session as a seed of its replacement attempt would (restore hook). */
  protected installRestoredSession(
    sessionKey: string,
    request: AgentSeedRequest,
    state: State,
  ): void {
    const episode = parseEpisodeId(request.episode_id);
    this.#sessions.set(sessionKey, new SessionEntry(sessionKey, episode, request, state));
  }

  // ---- Server wiring -----------------------------------------------------------------------

  protected override createParticipant(): Participant | null {
    const cls = this.constructor as unknown as AgentServerClass;
    const workers = this.deployment.servers[this.name]?.num_workers ?? 1;
    if (workers !== 1) {
      throw new ConfigError(
        `server ${this.name}: agent checkpointing requires num_workers=1: sessions live in one process (got ${workers})`,
      );
    }
    if (cls.checkpointSessionsSupported) {
      this.#sessionParticipant = new AgentSessionParticipant({ hooks: this.#hooks() });
      return this.#sessionParticipant as unknown as Participant;
    }
    this.#restartOnly = new RestartOnlyAgentParticipant({
      freeSession: (input) => this.#retireSession(input.sessionKey, input.signal),
      logger: this.logger,
    });
    return this.#restartOnly as unknown as Participant;
  }

  protected override installParticipantMiddleware(app: Express): void {
    if (this.#restartOnly !== null) installRestartTracking(app, this.#restartOnly);
  }

  protected override routes(): readonly DataRoute[] {
    const routes: DataRoute[] = [
      dataRoute({
        method: "post",
        path: "/v1/agent_sessions",
        summary: "Seed an agent session",
        request: AgentSeedRequestSchema,
        reply: AgentSeedReplySchema,
        errors: ["stale_attempt"],
        tag: "agent",
        handler: (input) => this.#seed(input),
      }),
      dataRoute({
        method: "post",
        path: "/v1/agent_sessions/close",
        summary: "Close an agent session (idempotent receipt)",
        request: AgentCloseRequestSchema,
        reply: AgentCloseReplySchema,
        errors: ["stale_attempt"],
        tag: "agent",
        handler: (input) => this.#close(input),
      }),
      dataRoute({
        method: "post",
        path: "/v1/responses",
        summary: "Activate a session (with its cookie) or make a direct call",
        description:
          "Also served under /ng-rollout/{capture_key}/ and /ng-rollout/{capture_key}/training-token-capture/. " +
          "With checkpointing on, a session activation needs the prefix; send x-ng-agent-activation to make it idempotent.",
        request: ResponsesCreateRequestSchema,
        errors: [
          "rollout_id_required",
          "stale_attempt",
          "activation_out_of_order",
          "checkpoint_error",
          "upstream_unreachable",
          "upstream_error",
        ],
        rolloutPrefixed: true,
        tag: "agent",
        handler: (input) => this.#responses(input),
      }),
    ];
    if (this.legacyRun !== AgentServer.prototype.legacyRun) {
      routes.push(
        dataRoute({
          method: "post",
          path: "/run",
          summary: "Run a whole episode (legacy)",
          request: AgentRunRequestSchema,
          errors: [
            "rollout_id_required",
            "invalid_rollout_id",
            "stale_attempt",
            "admission_closed",
            "upstream_unreachable",
            "upstream_error",
          ],
          tag: "agent",
          handler: (input) => this.#run(input),
        }),
      );
    }
    if (this.aggregateMetrics !== AgentServer.prototype.aggregateMetrics) {
      routes.push(
        dataRoute({
          method: "post",
          path: "/aggregate_metrics",
          summary: "Aggregate metrics",
          request: z.unknown(),
          errors: ["upstream_unreachable", "upstream_error"],
          handler: (input) => this.aggregateMetrics(input),
        }),
      );
    }
    return routes;
  }

  // ---- Seed --------------------------------------------------------------------------------

  async #seed(input: RouteInput<AgentSeedRequest>): Promise<unknown> {
    const { body, req, res, signal } = input;
    const key = body.agent_session_id;
    const cookieId = this.#readCookie(req);
    if (cookieId !== null && cookieId !== key) {
      throw new DetailError(409, "agent_session_id does not match the session cookie");
    }
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
      await this.#withLock(key, async () => {
        this.#purgeReceipts();
        if (this.#receipts.has(key)) throw new DetailError(409, "Agent session is already closed");
        const existing = this.#sessions.get(key);
        if (existing?.closing === true) throw new DetailError(409, "Agent session is closing");
        if (existing !== undefined) {
          if (JSON.stringify(existing.request) !== JSON.stringify(body)) {
            throw new DetailError(409, "agent_session_id is already bound to another seed request");
          }
          ticket?.register();
          return;
        }
        if (cookieId !== null) throw new DetailError(409, "Agent session cookie has expired");
        const entry = new SessionEntry<State>(key, episode, body, undefined);
        try {
          entry.state = await this.createSessionState({ request: body, signal });
        } catch (error) {
          if (error instanceof PartialSessionSetupError) {
            entry.state = error.state as State;
            entry.closing = true;
            this.#sessions.set(key, entry);
            throw error.cause;
          }
          throw error;
        }
        this.#sessions.set(key, entry);
        try {
          ticket?.register();
        } catch (error) {
          // Retired while building: free what was built before the waiting retire replies.
          if (participant !== null && !participant.has(key)) {
            await this.#retireSession(key, signal);
          }
          throw error;
        }
      });
    } finally {
      ticket?.leave();
    }
    this.#cookie.set(res, key);
    return { agent_session_id: key };
  }

  // ---- Close -------------------------------------------------------------------------------

  async #close(input: RouteInput<z.infer<typeof AgentCloseRequestSchema>>): Promise<unknown> {
    const { body, req, res, signal } = input;
    const key = body.agent_session_id;
    const cookieId = this.#readCookie(req);
    if (cookieId !== null && cookieId !== key) {
      throw new DetailError(409, "agent_session_id does not match the session cookie");
    }
    const episode = parseEpisodeId(body.episode_id);
    const reply = await this.#withLock(key, async () => {
      this.#purgeReceipts();
      const entry = this.#sessions.get(key);
      if (entry !== undefined && !sameEpisode(entry.episode, episode)) {
        throw new DetailError(409, "episode_id does not match the seeded agent session");
      }
      const receipt = this.#receipts.get(key);
      if (receipt !== undefined) return structuredClone(receipt.reply);
      if (entry === undefined) {
        if (cookieId !== null) throw new DetailError(409, "Agent close receipt has expired");
        return this.#storeReceipt(key, {
          agent_session_id: key,
          agent_observations: null,
          resources_cookies: null,
        });
      }
      const participant = this.#sessionParticipant;
      if (participant !== null) {
        await participant.closeSession(key, {
          signal,
          onClosing: () => {
            entry.closing = true;
          },
        });
        this.#requireCurrent(entry);
      } else {
        entry.closing = true;
      }
      const result = await this.closeSessionState({ sessionKey: key, state: entry.state, signal });
      this.#requireCurrent(entry);
      this.#sessions.delete(key);
      this.#restartOnly?.sessionClosed(key);
      return this.#storeReceipt(key, {
        agent_session_id: key,
        agent_observations: result.agent_observations,
        resources_cookies: result.resources_cookies,
      });
    });
    // Re-set the marker: a stale activation with this cookie is refused, not taken session-less.
    this.#cookie.set(res, key);
    return reply;
  }

  #storeReceipt(key: string, reply: AgentCloseReply): AgentCloseReply {
    const windowMs = this.agentConfig.session_close_retry_window_seconds * 1000;
    this.#receipts.set(key, { reply, expiresAt: Date.now() + windowMs });
    return structuredClone(reply);
  }

  /** Drops receipts past their window; receipts expire in insertion order. */
  #purgeReceipts(): void {
    const now = Date.now();
    for (const [key, receipt] of this.#receipts) {
      if (receipt.expiresAt > now) break;
      this.#receipts.delete(key);
    }
  }

  #requireCurrent(entry: SessionEntry<State>): void {
    if (this.#sessions.get(entry.key) !== entry) {
      throw EpisodeError.staleAttempt(captureKey(entry.episode), entry.episode.attempt);
    }
  }

  // ---- Activations and direct calls --------------------------------------------------------

  async #responses(input: RouteInput<ResponsesCreateRequest>): Promise<unknown> {
    const { req } = input;
    const cookieId = this.#readCookie(req);
    const rollout = rolloutOf(req);
    if (cookieId !== null) {
      const entry = this.#sessions.get(cookieId);
      if (entry === undefined || entry.request === null || entry.closing) {
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
    if (participant !== null) {
      if (rollout === null) throw EpisodeError.rolloutIdRequired("a direct /v1/responses call");
      const direct = participant.trackDirect(rollout.episodeId);
      try {
        return await this.#runLoop(input, null, untracked(direct.signal, input.signal), "root");
      } finally {
        direct.done();
      }
    }
    return await this.#runLoop(input, null, untracked(null, input.signal), "root");
  }

  async #sessionActivation(
    entry: SessionEntry<State>,
    input: RouteInput<ResponsesCreateRequest>,
    rollout: RolloutContext | null,
  ): Promise<unknown> {
    const participant = this.#sessionParticipant;
    if (participant === null) {
      entry.activations += 1;
      return await this.#runLoop(
        input,
        entry,
        untracked(null, input.signal),
        invocationId(entry.activations),
      );
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
    const header = input.req.get(ACTIVATION_HEADER);
    let index: number | null = null;
    if (header !== undefined) {
      index = parseActivationIndex(header);
      if (index === null) {
        throw new EpisodeError(
          "activation_out_of_order",
          `${ACTIVATION_HEADER} must be a positive integer, got ${JSON.stringify(header)}`,
          rollout.captureKey,
        );
      }
      const completed = entry.completedActivation;
      if (entry.running !== null && entry.running.index === index) {
        const reply = await untilSettledOrAborted(entry.running.reply.promise, [input.signal]);
        return this.#sendStored(input.res, reply);
      }
      if (index === completed) {
        if (entry.completedReply === null) {
          throw new EpisodeError(
            "activation_out_of_order",
            `activation ${index} of agent session ${entry.key} completed but its reply is not kept`,
            rollout.captureKey,
          );
        }
        participant.claim(entry.key);
        return this.#sendStored(input.res, entry.completedReply);
      }
      if (index !== completed + 1) {
        throw new EpisodeError(
          "activation_out_of_order",
          `activation ${index} of agent session ${entry.key} is out of order: activation ${completed} completed last`,
          rollout.captureKey,
        );
      }
    }
    const activation = participant.startActivation(entry.key, entry.episode, {
      signal: input.signal,
    });
    try {
      if (activation.continuation === null) entry.activations = index ?? entry.activations + 1;
      const context: ActivationContext = {
        tracked: true,
        continuation: activation.continuation,
        signal: activation.signal,
        boundary: (snapshot) => activation.boundary(snapshot),
        modelCall: (call) => activation.modelCall(call),
      };
      return await this.#runLoop(
        input,
        entry,
        context,
        invocationId(entry.activations),
        index !== null,
      );
    } finally {
      activation.end();
    }
  }

  async #runLoop(
    input: RouteInput<ResponsesCreateRequest>,
    entry: SessionEntry<State> | null,
    activation: ActivationContext,
    invocation: string,
    indexed = false,
  ): Promise<unknown> {
    const running =
      entry === null
        ? null
        : { index: entry.activations, reply: deferred<StoredActivationReply>() };
    running?.reply.promise.catch(() => undefined); // waiters see it; nobody else must
    if (entry !== null) entry.running = running;
    try {
      let result: RespondResult;
      try {
        result = await this.respond({
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
      // A native session reports its trajectory through its observations at close; a legacy
      // /run has no bundle, so its loop keeps the trajectory in the reply.
      const native = entry !== null && entry.request !== null;
      const response = indexed && native ? withoutTrajectory(result.response) : result.response;
      const stored: StoredActivationReply = { response, cookies: { ...(result.cookies ?? {}) } };
      if (entry !== null && running !== null) {
        // Recorded before the activation ends, so a checkpoint exports it with the session.
        entry.completedActivation = running.index;
        entry.completedReply = indexed ? stored : null;
        running.reply.resolve(stored);
      }
      return this.#sendStored(input.res, stored);
    } catch (error) {
      running?.reply.reject(error);
      throw error;
    } finally {
      if (entry !== null && entry.running === running) entry.running = null;
    }
  }

  #sendStored(res: Response, reply: StoredActivationReply): unknown {
    for (const line of setCookieLines(reply.cookies)) res.append("Set-Cookie", line);
    return reply.response;
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
      return await this.legacyRun({
        body,
        episode,
        steps: passThroughSteps(episode, signal),
        cookies,
        signal,
        req,
      });
    }
    const handle = participant.beginLegacyRun(episode, { signal });
    const key = handle.sessionKey;
    let entry = this.#sessions.get(key);
    if (entry === undefined) {
      entry = new SessionEntry<State>(key, episode, null, undefined);
      this.#sessions.set(key, entry);
    }
    entry.episode = episode;
    const owned = entry;
    try {
      return await this.legacyRun({
        body,
        episode,
        steps: legacySteps(handle, () => {
          owned.completedReply = null;
        }),
        cookies,
        signal: handle.signal,
        req,
      });
    } catch (error) {
      throw stopReason(handle.signal) ?? error;
    } finally {
      owned.completedReply = null;
      if (this.#sessions.get(key) === owned) this.#sessions.delete(key);
      handle.end();
    }
  }

  // ---- Hooks as the participant sees them --------------------------------------------------

  #hooks(): AgentSessionHooks {
    return {
      exportAgentSessions: async ({ sessionKeys, signal }) => {
        const native = sessionKeys.filter((key) => !isLegacySessionKey(key));
        const exported =
          native.length === 0
            ? {}
            : await this.exportAgentSessions({ sessionKeys: native, signal });
        // Entries, not assignments: an agent session ID such as `__proto__` stays an own key.
        const out: [string, JsonValue][] = [];
        for (const key of sessionKeys) {
          const legacy = isLegacySessionKey(key);
          if (!legacy && !Object.hasOwn(exported, key)) continue;
          const own = legacy ? {} : exported[key];
          if (typeof own !== "object" || own === null || Array.isArray(own)) {
            throw new CheckpointError(
              "checkpoint_error",
              `exportAgentSessions returned a non-object for session ${key}; return a JSON object`,
            );
          }
          const entry = this.#sessions.get(key);
          const session = withFields(own, {
            activations: entry?.activations ?? 0,
            completed_activation: entry?.completedActivation ?? 0,
            completed_reply: (entry?.completedReply ?? null) as JsonValue,
          });
          out.push([key, session]);
        }
        return Object.fromEntries(out);
      },
      restoreAgentSessions: async ({ sessions, signal }) => {
        const books = sessions.map((s) => {
          const fast = bookkeepingOf(s.session);
          if (fast !== null) return fast;
          const parsed = BookkeepingSchema.safeParse(s.session);
          if (!parsed.success) {
            throw new CheckpointStateError(
              `agent session ${s.sessionKey}: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`,
              captureKey(s.episodeId),
            );
          }
          return parsed.data;
        });
        const native = sessions
          .filter((s) => !isLegacySessionKey(s.sessionKey))
          .map((s) => ({ ...s, session: withoutBookkeeping(s.session) }));
        if (native.length > 0) await this.restoreAgentSessions({ sessions: native, signal });
        const missing = native.filter((s) => !this.#sessions.has(s.sessionKey));
        if (missing.length > 0) {
          for (const s of native) this.#sessions.delete(s.sessionKey);
          throw new CheckpointError(
            "checkpoint_error",
            `restoreAgentSessions did not install sessions [${missing.map((s) => s.sessionKey).join(", ")}]; call installRestoredSession for each`,
          );
        }
        sessions.forEach((s, i) => {
          const book = books[i] as z.infer<typeof BookkeepingSchema>;
          let entry = this.#sessions.get(s.sessionKey);
          if (entry === undefined) {
            entry = new SessionEntry<State>(s.sessionKey, s.episodeId, null, undefined);
            this.#sessions.set(s.sessionKey, entry);
          }
          entry.episode = s.episodeId;
          entry.activations = book.activations;
          entry.completedActivation = book.completed_activation;
          entry.completedReply = book.completed_reply;
        });
      },
      retireAgentSession: ({ sessionKey, signal }) => this.#retireSession(sessionKey, signal),
    };
  }

  /** The retire hook, then the session is dropped without a receipt. */
  async #retireSession(sessionKey: string, signal: AbortSignal): Promise<void> {
    const entry = this.#sessions.get(sessionKey);
    if (!isLegacySessionKey(sessionKey)) await this.retireAgentSession({ sessionKey, signal });
    if (entry !== undefined && this.#sessions.get(sessionKey) === entry) {
      this.#sessions.delete(sessionKey);
    }
  }

  // ---- Plumbing ----------------------------------------------------------------------------

  #readCookie(req: Request): string | null {
    const id = this.#cookie.read(req);
    if (id === undefined) throw new DetailError(409, "Invalid agent session marker");
    return id;
  }

  #requestCookies(req: Request): CookieJar {
    const jar = parseCookieHeader(req.headers.cookie);
    delete jar[this.#cookie.name];
    return jar;
  }

  async #withLock<T>(key: string, fn: () => Promise<T>): Promise<T> {
    let lock = this.#locks.get(key);
    if (lock === undefined) this.#locks.set(key, (lock = { mutex: new Mutex(), users: 0 }));
    lock.users += 1;
    try {
      return await lock.mutex.runExclusive(fn);
    } finally {
      lock.users -= 1;
      if (lock.users === 0) this.#locks.delete(key);
    }
  }
}

function view<State>(entry: SessionEntry<State>): AgentSessionView<State> {
  return { key: entry.key, episode: entry.episode, request: entry.request, state: entry.state };
}

function invocationId(activations: number): string {
  return activations <= 1 ? "root" : `activation-${activations}`;
}

/** The context of an activation nothing tracks: boundaries are free, calls just run. */
function untracked(stop: AbortSignal | null, request: AbortSignal): ActivationContext {
  const signal = stop === null ? request : AbortSignal.any([stop, request]);
  return {
    tracked: false,
    continuation: null,
    signal,
    boundary: () => Promise.resolve(),
    modelCall: (call) => call(signal),
  };
}

/** The wire error for work a close or retire stopped, or null when it was not stopped. */
function stopReason(signal: AbortSignal): Error | null {
  if (!signal.aborted) return null;
  const reason: unknown = signal.reason;
  if (reason instanceof ActivationCancelledError) {
    return reason.why === "retired"
      ? new EpisodeError("stale_attempt", reason.message)
      : new DetailError(409, "Agent session was closed while the activation ran");
  }
  if (reason instanceof EpisodeError) return reason;
  if (reason instanceof Error && reason.name === "EpisodeRetiredError") {
    return new EpisodeError("stale_attempt", reason.message);
  }
  return null;
}

function withoutTrajectory(response: Record<string, unknown>): Record<string, unknown> {
  if (!Object.hasOwn(response, "_ng_trajectory")) return response;
  const { _ng_trajectory: _dropped, ...rest } = response;
  return rest;
}

function withoutBookkeeping(session: JsonValue): JsonValue {
  if (typeof session !== "object" || session === null || Array.isArray(session)) return session;
  const rest: Record<string, JsonValue> = { ...session };
  for (const field of BOOKKEEPING_FIELDS) delete rest[field];
  return rest;
}

function legacySteps(handle: LegacyRunHandle, dropKeptReply: () => void): LegacyRunSteps {
  return {
    sessionKey: handle.sessionKey,
    continuation: () => handle.continuation(),
    boundary: (state) => handle.boundary(state),
    step: (mode, fn) => handle.step(mode, fn),
    markRestart: (signal) => handle.markRestart(signal),
    dropKeptReply,
  };
}

function passThroughSteps(episode: EpisodeId | null, signal: AbortSignal): LegacyRunSteps {
  return {
    sessionKey: legacySessionKey(episode?.rollout_id ?? "unknown"),
    continuation: () => null,
    boundary: () => Promise.resolve(),
    step: async (_mode, fn) => await fn(signal),
    markRestart: () => Promise.resolve(),
    dropKeptReply: () => undefined,
  };
}
