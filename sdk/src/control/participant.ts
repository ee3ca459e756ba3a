import type { z } from "zod";
import type { EpisodeId } from "../identity/episode-id.js";
import type {
  ParticipantKind,
  PrepareReport,
  PrepareRequest,
  RestoreRequest,
} from "../wire/control.js";
import type { Manifest, RecordBase } from "../wire/storage.js";
import { validateStored } from "../store/records-reader.js";
import { deferred } from "../util/deferred.js";
import { RetiredAttempts } from "./retired-attempts.js";

/** The request that closes admission: a prepare, or the restore that installs state. */
export type CloseAdmissionRequest = PrepareRequest | RestoreRequest;

/**
 * The state owner inside one server process, driven by the {@link ControlPlane}. Subclass it
 * and implement the abstract hooks; override the optional ones where the defaults do not fit.
 * Nothing here knows about HTTP.
 *
 * ## Rules
 * - `closeAdmission` stops new work and asks running work to park; `openAdmission` lets it go.
 * - `readiness` says whether every live execution is at a committable boundary; call
 *   {@link notify} whenever that may have changed, so a waiting prepare re-checks.
 * - `export` returns frozen records; a retried commit reuses them, so do not mutate the
 *   exported state in place until resume.
 * - `install` validates every record before installing any, each under its next attempt.
 * - `retire` stops this attempt and earlier ones, waits, frees their state; if it throws, what
 *   still runs stays tracked so a retry stops it.
 *
 * @see docs/concepts.md
 */
export abstract class Participant<R extends RecordBase = RecordBase> {
  /** The participant kind: `environment`, `model`, `agent` or `resources`. */
  abstract readonly kind: ParticipantKind;
  /** Validates a stored record (must include `episode_id`; unknown fields refused). */
  abstract readonly recordSchema: z.ZodType<R>;

  /** The retired marks this participant's data plane checks. */
  readonly retired = new RetiredAttempts();

  #changed = deferred<void>();
  /**
   * An observer of every change: called on every {@link notify}, and on changes of readiness or
   * counts a participant does not notify because no prepare can be waiting (admission open). Set
   * from outside (a worker's link forwards them to its coordinator, whose status shows them).
   */
  onChange: (() => void) | null = null;

  /** Stops admitting new work and asks running work to park. */
  abstract closeAdmission(request: CloseAdmissionRequest): void | Promise<void>;
  /** Admits again: parked work continues, held responses are delivered. */
  abstract openAdmission(): void | Promise<void>;
  /** Whether every live execution is at a committable boundary, and which are not. */
  abstract readiness(): PrepareReport;
  /** Stops the work of `episode` and every earlier attempt, waits, frees their state. */
  abstract retire(episode: EpisodeId, signal: AbortSignal): Promise<void>;
  /** The records of a prepared participant within `scope` (null: everything live). */
  abstract export(scope: readonly EpisodeId[] | null, signal: AbortSignal): Promise<R[]>;
  /**
   * Validates all records, then installs each under its next attempt; `scope` is every episode
   * the restore continues, including ones with no record here.
   */
  abstract install(
    records: readonly R[],
    scope: readonly EpisodeId[],
    signal: AbortSignal,
  ): Promise<void>;

  /** Cheap readiness check used while a prepare waits. */
  ready(): boolean {
    return this.readiness().ready;
  }

  /**
   * Refuses these attempts (and earlier ones of their rollouts) from now on. A participant
   * spanning several processes resolves once every process refuses them.
   */
  markRetired(episodes: readonly EpisodeId[]): void | Promise<void> {
    this.retired.mark(episodes);
  }

  /**
   * Throws (a typed error) to refuse a commit request before anything is exported, e.g. one
   * without the scope this participant needs; a retry with other arguments may still commit.
   */
  checkCommit(_scope: readonly EpisodeId[] | null): void {}

  /** Throws to refuse a forget that would make retired state live again. */
  checkForget(_rolloutIds: readonly string[]): void | Promise<void> {}

  /** Drops the retired marks of these rollouts. */
  forget(rolloutIds: readonly string[]): void | Promise<void> {
    this.retired.forget(rolloutIds);
  }

  /** Restored episodes whose replacement has not started here, as the continuing attempts. */
  restoredPending(): EpisodeId[] | Promise<EpisodeId[]> {
    return [];
  }

  /** Frees restored state of a replacement that never started, leaving no refusal mark. */
  async deleteRestored(episode: EpisodeId, signal: AbortSignal): Promise<void> {
    await this.retire(episode, signal);
  }

  /** Extra fields of the commit reply. */
  commitReply(_records: readonly R[]): Record<string, unknown> {
    return {};
  }

  /** Extra fields of the status reply. */
  statusExtra(): Record<string, unknown> {
    return {};
  }

  /** Extra manifest fields, read back by {@link restoreManifest} before install. */
  manifestExtra(): Record<string, unknown> {
    return {};
  }

  /** Reads back {@link manifestExtra} fields before install. */
  restoreManifest(_manifest: Manifest): void | Promise<void> {}

  /**
   * Validates a stored record's decoded value (its `episode_id` already checked) with
   * {@link recordSchema}, as a restore does. A method, so that another copy of this package in
   * the same process (a server's own dependency) validates with its own fast paths.
   * @throws CheckpointStateError (`invalid_checkpoint_state`) naming the episode
   */
  recordFromStored(value: Record<string, unknown>, episode: EpisodeId): R {
    return validateStored(value, episode, this.recordSchema);
  }

  /** Frees out-of-process compute held by exported state after a durable `stop` commit. */
  async parkExported(_records: readonly R[]): Promise<void> {}

  /** Wakes a prepare waiting for readiness. Call it whenever readiness may have changed. */
  notify(): void {
    const previous = this.#changed;
    this.#changed = deferred<void>();
    previous.resolve();
    this.onChange?.();
  }

  /** A promise settled at the next {@link notify}. Take it before checking readiness. */
  nextChange(): Promise<void> {
    return this.#changed.promise;
  }
}
