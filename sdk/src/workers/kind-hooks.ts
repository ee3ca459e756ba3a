/**
 * What a kind's participant may add for a server with several workers. The kinds implement
 * these methods where they apply (each is optional); the control layer's `Participant` does not
 * declare them, as one process never calls them.
 *
 * @see docs/workers.md
 */
import type { Participant } from "../control/participant.js";
import type { RecordBase } from "../wire/storage.js";

/** A thing a checkpoint of the participant holds at most once: its name in a refusal, its key. */
export interface RecordIdentity {
  readonly what: string;
  readonly key: string;
}

/** The multi-worker hooks of a participant, each optional. */
export interface MultiWorkerHooks<R extends RecordBase = RecordBase> {
  /**
   * The capture key of the replacement attempt that claims `record`, for state that belongs to
   * one request (an environment episode, a legacy agent `/run`): the coordinator holds it until
   * the worker receiving that request claims it. Null or absent: the record belongs to a
   * session its cookies route to.
   */
  claimKey?(record: R): string | null;
  /**
   * What a checkpoint holds at most once, read from a record or from a stored record's decoded
   * value (not validated yet), e.g. `{ what: "resources session", key: session_id }`; null when
   * the record names none or cannot be read (its validation refuses it then). The coordinator
   * refuses a checkpoint holding one twice before it hands any worker its share, as each worker
   * sees only its own. Absent: several records of one episode may be installed.
   */
  recordIdentity?(record: R): RecordIdentity | null;
  /** Installs one claimed restored record into this (serving) participant. */
  adoptRestored?(record: R, signal: AbortSignal): Promise<void>;
}

/** A participant as the workers adapter sees it: the control hooks and the multi-worker ones. */
export type WorkerParticipant = Participant & MultiWorkerHooks;

/** The claim key of `record` (null when the kind has none). */
export function claimKeyOf(participant: WorkerParticipant, record: RecordBase): string | null {
  return typeof participant.claimKey === "function" ? participant.claimKey(record) : null;
}

/** What of `record` a checkpoint holds once (null when the kind names nothing). */
export function identityOf(
  participant: WorkerParticipant,
  record: RecordBase,
): RecordIdentity | null {
  return typeof participant.recordIdentity === "function"
    ? participant.recordIdentity(record)
    : null;
}

/**
 * Installs a claimed restored record into `participant`.
 * @throws Error when the kind holds no request-scoped records (it has no claim key either)
 */
export async function adoptRestored(
  participant: WorkerParticipant,
  record: RecordBase,
  signal: AbortSignal,
): Promise<void> {
  if (typeof participant.adoptRestored !== "function") {
    throw new Error(`a ${participant.kind} participant holds no request-scoped records to adopt`);
  }
  await participant.adoptRestored(record, signal);
}
