/**
 * The stored record of an agent session and the session hooks an agent with checkpoint support
 * implements (see docs/agent.md).
 *
 * @module
 */
import { z } from "zod";
import type { EpisodeId } from "../../identity/episode-id.js";
import type { JsonValue } from "../../json/json-value.js";
import { JsonPayloadSchema } from "../../json/json-payload-schema.js";
import { recordSchema } from "../../wire/storage.js";

/** The participant kind of every agent server. */
export const AGENT_KIND = "agent" as const;

/** One stored agent session (`gym/agent/<instance>/records-*.jsonl`). */
export const AgentSessionRecordSchema = recordSchema({
  /** The session key: the seed's `agent_session_id`, or `run:<rollout_id>` for a legacy `/run`. */
  session_key: z.string().min(1),
  /** What the agent's export hook returned for the key (opaque JSON). */
  session: JsonPayloadSchema,
  /** The turn loop's latest boundary, or the unconsumed restored one; null: start over. */
  boundary: JsonPayloadSchema.nullable(),
  /** Legacy `/run` only: the run's latest episode boundary; null for native sessions. */
  episode: JsonPayloadSchema.nullable(),
  /**
   * The worker of a multi-worker server whose cookies name this native session (a restore
   * places the session with its owner's others); null for one process and for legacy runs.
   */
  owner: z.string().nullable().default(null),
});
/** One stored agent session. */
export type AgentSessionRecord = z.infer<typeof AgentSessionRecordSchema>;

/** The key prefix of a legacy `/run`'s turn-loop session. */
export const LEGACY_SESSION_PREFIX = "run:";

/** The session key of a legacy `/run` of `rolloutId` (no attempt suffix). */
export function legacySessionKey(rolloutId: string): string {
  return `${LEGACY_SESSION_PREFIX}${rolloutId}`;
}

/** Whether a session key names a legacy `/run` session. */
export function isLegacySessionKey(key: string): boolean {
  return key.startsWith(LEGACY_SESSION_PREFIX);
}

/** One session handed to {@link AgentSessionHooks.restoreAgentSessions}. */
export interface RestoredAgentSession {
  readonly sessionKey: string;
  /** The replacement (next) attempt that owns the session from now on. */
  readonly episodeId: EpisodeId;
  /** What the export hook returned for the key at the checkpoint. */
  readonly session: JsonValue;
}

/** The session hooks of an agent with checkpoint support. */
export interface AgentSessionHooks {
  /**
   * Describes every named session at once, as of the checkpoint (every session is parked): an
   * entry for each key, describing how to rebuild the state, not a live handle. A map, not an
   * object: a commit exports thousands, and an object keyed by session goes into dictionary mode.
   */
  exportAgentSessions(input: ExportAgentSessionsInput): Promise<ReadonlyMap<string, JsonValue>>;
  /** In a fresh process: validates every session, then installs all of them or throws. */
  restoreAgentSessions(input: RestoreAgentSessionsInput): Promise<void>;
  /** Frees one session's state (stops its sandbox); tolerates a key with no state. */
  retireAgentSession(input: RetireAgentSessionInput): Promise<void>;
}

/** What the export session hook receives. */
export interface ExportAgentSessionsInput {
  /** The named sessions to describe (never a legacy `run:` key, on the author's side). */
  readonly sessionKeys: readonly string[];
  readonly signal: AbortSignal;
}

/** What the restore session hook receives. */
export interface RestoreAgentSessionsInput {
  /** Every restored session, each under its continuing attempt. */
  readonly sessions: readonly RestoredAgentSession[];
  readonly signal: AbortSignal;
}

/** What the retire session hook receives. */
export interface RetireAgentSessionInput {
  readonly sessionKey: string;
  readonly signal: AbortSignal;
}
