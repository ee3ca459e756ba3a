/**
 * The agent's sessions at a checkpoint, on the SDK's side of the author's hooks: the
 * participant's session hooks over the author's (legacy `run:` sessions kept from the author),
 * the session object an export stores (the agent's fields and the table's bookkeeping), and the
 * install of what a restore rebuilt into the session table, all or nothing.
 *
 * @module
 */
import { CheckpointError, CheckpointStateError } from "../../errors.js";
import { captureKey, episodeIdToWire, type EpisodeId } from "../../identity/episode-id.js";
import type { JsonValue } from "../../json/json-value.js";
import { ABSENT, sessionValue, type BySession } from "../../util/by-session.js";
import { withFields } from "../../util/with-fields.js";
import {
  AgentSeedRequestSchema,
  agentSeedRequestFromWire,
  type AgentSeedRequest,
} from "../../wire/agent.js";
import { parseBookkeeping, withoutBookkeeping, type Bookkeeping } from "./agent-bookkeeping.js";
import {
  isLegacySessionKey,
  type AgentSessionHooks,
  type ExportAgentSessionsInput,
  type RestoreAgentSessionsInput,
  type RestoredAgentSession,
  type RetireAgentSessionInput,
} from "./agent-records.js";
import { AgentSessionEntry, frozenCopy, type AgentSessionTable } from "./agent-session-table.js";

/** One session an agent's restore hook rebuilt, as the SDK installs it. */
export interface RebuiltAgentSession<State> {
  /**
   * The session's seed request as exported (e.g. the `request` field your export wrote): the
   * SDK validates it as a seed and rebinds it to the replacement attempt, so it need not be
   * rebuilt first; one that is not a seed request refuses the restore with 422
   * `invalid_checkpoint_state` naming the episode.
   */
  readonly request: unknown;
  /** The session's state, as `createSessionState` would have built it. */
  readonly state: State;
}

/**
 * The author's session hooks, as the session participant's hooks take them: an export is an
 * object of values (checked as the commit encodes them) per session, and a restore returns the
 * sessions it rebuilt, both by session key as a `Map` or a plain object.
 */
export interface AuthorSessionHooks<State> {
  exportAgentSessions(
    input: ExportAgentSessionsInput,
  ): Promise<BySession<Readonly<Record<string, unknown>>>>;
  restoreAgentSessions(
    input: RestoreAgentSessionsInput,
  ): Promise<BySession<RebuiltAgentSession<State>>>;
  retireAgentSession(input: RetireAgentSessionInput): Promise<void>;
}

/**
 * The participant's session hooks over the author's: legacy `run:` sessions are the SDK's own
 * (the author never sees them), every exported session carries the table's bookkeeping, and
 * the sessions a restore rebuilt are installed here, all or nothing.
 */
export function sessionHooks<State>(
  table: AgentSessionTable<State>,
  author: AuthorSessionHooks<State>,
): AgentSessionHooks {
  return {
    exportAgentSessions: async ({ sessionKeys, signal }) => {
      const native = sessionKeys.filter((key) => !isLegacySessionKey(key));
      const exported =
        native.length === 0
          ? new Map<string, never>()
          : await author.exportAgentSessions({ sessionKeys: native, signal });
      const out = new Map<string, JsonValue>();
      for (const key of sessionKeys) {
        const own = isLegacySessionKey(key) ? {} : sessionValue(exported, key);
        if (own === ABSENT) continue;
        if (typeof own !== "object" || own === null || Array.isArray(own)) {
          throw new CheckpointError(
            "checkpoint_error",
            `exportAgentSessions returned a non-object for session ${key}; return a JSON object`,
          );
        }
        out.set(key, exportedSession(table, key, own));
      }
      return out;
    },
    restoreAgentSessions: async ({ sessions, signal }) => {
      const books = parseBookkeeping(sessions);
      const native = sessions
        .filter((s) => !isLegacySessionKey(s.sessionKey))
        .map((s) => ({ ...s, session: withoutBookkeeping(s.session) }));
      const rebuilt =
        native.length === 0
          ? new Map<string, never>()
          : await author.restoreAgentSessions({ sessions: native, signal });
      installRestored(table, sessions, books, rebuilt);
    },
    retireAgentSession: (input) => author.retireAgentSession(input),
  };
}

/** The session object of `key` as stored: the agent's own fields and the table's bookkeeping. */
export function exportedSession<State>(
  table: AgentSessionTable<State>,
  key: string,
  own: Readonly<Record<string, unknown>>,
): JsonValue {
  const entry = table.get(key);
  const session = withFields(own, {
    activations: entry?.activations ?? 0,
    completed_activation: entry?.completedActivation ?? 0,
    completed_reply: entry?.completedReply ?? null,
  });
  // The one place an author's session becomes a record's JSON: the records writer checks
  // every record as it encodes it, and a value that is not JSON fails the commit with 422
  // naming the episode and the path (docs/storage.md).
  return session as JsonValue;
}

/**
 * Installs into `table` what the agent's restore hook rebuilt, all or nothing: every named
 * session must have an entry (its seed request rebound to the replacement attempt, its state),
 * else nothing is installed; then each session gets its attempt and bookkeeping, and a legacy
 * session an entry of its own.
 * @throws CheckpointError `checkpoint_error` naming the sessions the hook returned none for
 * @throws CheckpointStateError `invalid_checkpoint_state` for a seed request that is not one
 */
export function installRestored<State>(
  table: AgentSessionTable<State>,
  sessions: readonly RestoredAgentSession[],
  books: readonly Bookkeeping[],
  rebuilt: BySession<RebuiltAgentSession<State>>,
): void {
  const entries: AgentSessionEntry<State>[] = [];
  const missing: string[] = [];
  for (const s of sessions) {
    if (isLegacySessionKey(s.sessionKey)) {
      const held = table.get(s.sessionKey);
      entries.push(
        held ?? new AgentSessionEntry<State>(s.sessionKey, s.episodeId, null, undefined),
      );
      continue;
    }
    const session = sessionValue(rebuilt, s.sessionKey);
    if (session === ABSENT || typeof session !== "object" || session === null) {
      missing.push(s.sessionKey);
      continue;
    }
    const request = frozenCopy(restoredSeedRequest(session.request, s.episodeId));
    entries.push(new AgentSessionEntry(s.sessionKey, s.episodeId, request, session.state));
  }
  if (missing.length > 0) {
    throw new CheckpointError(
      "checkpoint_error",
      `restoreAgentSessions returned no session for [${missing.join(", ")}]; return a {request, state} for every session it is given`,
    );
  }
  entries.forEach((entry, i) => {
    const book = books[i] as Bookkeeping;
    entry.episode = (sessions[i] as RestoredAgentSession).episodeId;
    entry.activations = book.activations;
    entry.completedActivation = book.completed_activation;
    entry.completedReply = book.completed_reply;
    table.add(entry);
  });
}

/**
 * A stored seed request rebound to `episode` (the replacement attempt), validated as a seed is.
 * @throws CheckpointStateError `invalid_checkpoint_state` naming the episode when it is not a
 *   seed request
 */
export function restoredSeedRequest(request: unknown, episode: EpisodeId): AgentSeedRequest {
  const episode_id = episodeIdToWire(episode) as EpisodeId;
  const fast = agentSeedRequestFromWire(request);
  if (fast !== null) return { ...fast, episode_id };
  const parsed = AgentSeedRequestSchema.safeParse(request);
  if (!parsed.success) {
    throw new CheckpointStateError(
      `the stored seed request is invalid: ${parsed.error.issues.map((i) => i.message).join("; ")}`,
      captureKey(episode),
    );
  }
  return { ...parsed.data, episode_id };
}
