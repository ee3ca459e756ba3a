/**
 * The fields the SDK adds to every exported agent session object: how many activations ran,
 * which completed last and its kept reply. They travel inside the session's JSON so a restored
 * session answers a repeated activation exactly as the crashed process would have.
 *
 * @module
 */
import { z } from "zod";
import { CheckpointStateError } from "../../errors.js";
import { captureKey } from "../../identity/episode-id.js";
import type { JsonValue } from "../../json/json-value.js";
import type { RestoredAgentSession } from "./agent-records.js";

/** The bookkeeping field names, removed before a session reaches the agent's restore hook. */
const BOOKKEEPING_FIELDS = ["activations", "completed_activation", "completed_reply"] as const;

const StoredReplySchema = z.strictObject({
  response: z.record(z.string(), z.unknown()),
  cookies: z.record(z.string(), z.string()),
});

const BookkeepingSchema = z.looseObject({
  activations: z.number().int().min(0),
  completed_activation: z.number().int().min(0),
  completed_reply: StoredReplySchema.nullable(),
});

/** A session's bookkeeping as stored. */
export type Bookkeeping = z.infer<typeof BookkeepingSchema>;

/**
 * The bookkeeping read from a stored session without a kept reply, checked by hand (a restore
 * reads thousands in a fresh process); null otherwise, so the schema parses it (and names what
 * is wrong).
 */
function fastBookkeeping(session: unknown): Bookkeeping | null {
  if (typeof session !== "object" || session === null || Array.isArray(session)) return null;
  const s = session as Record<string, unknown>;
  const count = (value: unknown): value is number =>
    typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
  if (!count(s.activations) || !count(s.completed_activation)) return null;
  // A kept reply (rare: an activation that completed) is the schema's to copy and judge.
  return s.completed_reply === null ? (s as Bookkeeping) : null;
}

/**
 * The bookkeeping of every restored session, validated before anything is installed.
 * @throws CheckpointStateError naming the session and the field at fault
 */
export function parseBookkeeping(sessions: readonly RestoredAgentSession[]): Bookkeeping[] {
  return sessions.map((s) => {
    const fast = fastBookkeeping(s.session);
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
}

/** The session object the agent exported, without the SDK's fields. */
export function withoutBookkeeping(session: JsonValue): JsonValue {
  if (typeof session !== "object" || session === null || Array.isArray(session)) return session;
  const rest: Record<string, JsonValue> = { ...session };
  for (const field of BOOKKEEPING_FIELDS) delete rest[field];
  return rest;
}
