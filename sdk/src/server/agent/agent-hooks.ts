/**
 * What an agent server's hooks receive and return: the authoring surface of
 * `AgentServer`, one named input type per hook.
 *
 * @module
 */
import type { Request } from "express";
import type { EpisodeId } from "../../identity/episode-id.js";
import type { BoundarySnapshot } from "../../participants/agent/session-phase.js";
import type { BoundaryState, StepMode } from "../../steps/episode-steps.js";
import type { CookieJar } from "../../util/cookies.js";
import type {
  AgentRunRequest,
  AgentSeedRequest,
  ResponsesCreateRequest,
} from "../../wire/agent.js";
import type { JsonValue } from "../../json/json-value.js";
import type { RolloutContext } from "../rollout-prefix.js";

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
  /** Runs a policy call made right after a boundary (see the agent session participant). */
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

/** What `AgentServer.respond` receives. */
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

/** What `AgentServer.respond` returns. */
export interface RespondResult {
  /** The Responses-style reply JSON. */
  readonly response: Record<string, unknown>;
  /** Cookies to set on the reply. @default none */
  readonly cookies?: CookieJar;
}

/** What `AgentServer.closeSessionState` returns. */
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

/** What `AgentServer.legacyRun` receives. */
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
 * Thrown by `AgentServer.createSessionState` when setup failed part way: the partial
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

/** What `AgentServer.createSessionState` receives. */
export interface CreateSessionStateInput {
  /** The validated seed request. */
  readonly request: AgentSeedRequest;
  readonly signal: AbortSignal;
}

/** What `AgentServer.closeSessionState` receives. */
export interface CloseSessionStateInput<State> {
  readonly sessionKey: string;
  /** The session's state (undefined when the seed built none). */
  readonly state: State | undefined;
  readonly signal: AbortSignal;
}

export type {
  ExportAgentSessionsInput,
  RestoreAgentSessionsInput,
  RetireAgentSessionInput,
} from "../../participants/agent/agent-records.js";
export type { RebuiltAgentSession } from "../../participants/agent/session-checkpoint.js";
