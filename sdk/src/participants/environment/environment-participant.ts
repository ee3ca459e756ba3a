/**
 * The checkpoint participant of an environment server: episodes keyed by capture key on the SDK's
 * {@link EpisodeSteps} runner, their latest boundaries exported, restored boundaries handed to the
 * replacement `/run`. Transport-free.
 *
 * @see docs/environment-server.md
 * @module
 */
import { z } from "zod";
import { AttemptMap } from "../../control/attempt-keys.js";
import { refuseDuplicateRecords } from "../../control/duplicate-records.js";
import { Participant, type CloseAdmissionRequest } from "../../control/participant.js";
import { CheckpointError, EpisodeError } from "../../errors.js";
import {
  captureKey,
  episodeIdToWire,
  fromCaptureKey,
  nextAttempt,
  parseEpisodeId,
  type EpisodeId,
} from "../../identity/episode-id.js";
import { sortedScopeKeys } from "../../identity/scope-keys.js";
import { EpisodeSteps, type BoundaryState, type StepMode } from "../../steps/episode-steps.js";
import type { PrepareReport } from "../../wire/control.js";
import type { JsonValue } from "../../json/json-value.js";
import { JsonPayloadSchema } from "../../json/json-payload-schema.js";
import { recordSchema } from "../../wire/storage.js";
import { isRestartReply, type ReplyHeaders } from "./checkpoint-headers.js";
import { taskDigest } from "./task-digest.js";
import { compareStrings } from "../../util/compare-strings.js";

/** One stored episode of an environment server. */
export const EnvironmentRecordSchema = recordSchema({
  task_digest: z.string().regex(/^[0-9a-f]{64}$/),
  boundary: JsonPayloadSchema.nullable(),
});
/** One stored episode record. */
export type EnvironmentRecord = z.infer<typeof EnvironmentRecordSchema>;

/**
 * What an episode's protocol may do with its episode: record boundaries, run steps, read the
 * restored boundary it continues from. Bound to one episode.
 *
 * @experimental
 * @see docs/environment-server.md
 */
export interface EpisodeHandle {
  /** The attempt this episode runs. */
  readonly episode: EpisodeId;
  /** Its capture key (`<rollout>` or `<rollout>-a<N>`). */
  readonly captureKey: string;
  /** Aborted by retire, the episode deadline, the client going away or shutdown: then stop. */
  readonly signal: AbortSignal;
  /**
   * The restored boundary this attempt continues from: the first call returns it, later calls
   * null. Null too when the episode was not restored (or restored with no boundary): start over.
   */
  continuation(): JsonValue | null;
  /**
   * Records a boundary (an object naming the next stage, or a function building it; called only
   * with checkpointing on). Inside a checkpoint the episode parks here until resume.
   */
  boundary(state: BoundaryState): Promise<void>;
  /** Runs one step in `wait` or `replay` mode (see {@link StepMode}). */
  step<T>(mode: StepMode, fn: (signal: AbortSignal) => T | Promise<T>): Promise<T>;
  /**
   * Makes this episode a restart (it can never be continued), once no checkpoint is open; e.g.
   * when a seed reply carried `x-ng-checkpoint-restart: 1`.
   */
  markRestart(signal?: AbortSignal): Promise<void>;
  /**
   * Makes this episode a restart when a seed reply's headers say so ({@link isRestartReply}:
   * `x-ng-checkpoint-restart: 1`, any name casing), as {@link markRestart} does; resolves to
   * whether they did. Call it right after the seed step, outside any step.
   */
  markRestartFrom(headers: ReplyHeaders | null | undefined, signal?: AbortSignal): Promise<boolean>;
}

/** An admitted episode as the server holds it: the handle plus its end of life. */
export interface AdmittedEpisode extends EpisodeHandle {
  /** Final cleanup starts: a retire now waits for the episode instead of cancelling it. */
  finishing(): void;
  /** The episode has ended (after its final cleanup). Idempotent. */
  end(): void;
}

/** Input of {@link EnvironmentParticipant.begin}. */
export interface BeginEpisodeInput {
  /** The attempt the `/run` names. */
  readonly episode: EpisodeId;
  /** The task in JSON form (`{task_id, task_input}`), digested to match restored records. */
  readonly task: unknown;
  /** The episode can never be continued (a server that records no boundaries). */
  readonly restart: boolean;
  /** Absolute deadline, Unix seconds, or null. @default null */
  readonly deadlineTs?: number | null;
  /** Aborts the episode (client gone, shutdown). */
  readonly signal?: AbortSignal;
}

interface RestoredEpisode {
  /** The replacement attempt the record waits for. */
  readonly episode: EpisodeId;
  readonly taskDigest: string;
  readonly boundary: JsonValue | null;
}

/**
 * The environment participant (kind `environment`).
 *
 * ## Rules
 * - **Begin** checks, in order: the retired-attempt fence (`stale_attempt`); admission, closed by
 *   a checkpoint or by a restore until its resume (`admission_closed`; after the resume only the
 *   replacement of a still-unclaimed restored episode is admitted while closed); the restored
 *   task digest (`checkpoint_error`, the record kept); a running duplicate (`checkpoint_error`,
 *   the live episode untouched). Only then is the restored record consumed.
 * - **Export** takes the live episodes parked or in a replay step (not restarts, not retired)
 *   and the unclaimed restored records, both limited to the commit scope when it has one.
 * - **Restore** installs each record under its next attempt, into a participant holding nothing.
 * - **Retire** stops every tracked attempt of the rollout up to the given one and waits until
 *   each has ended, then drops the restored records it covers.
 *
 * @experimental
 * @see docs/environment-server.md
 */
export class EnvironmentParticipant extends Participant<EnvironmentRecord> {
  readonly kind = "environment" as const;
  readonly recordSchema = EnvironmentRecordSchema;
  /** The episode steps runner; exposed read-only for tests and diagnostics. */
  readonly steps = new EpisodeSteps({ onChange: () => this.notify() });
  /**
   * Tracked episodes by capture key (mirrors the runner until `end`), each with its task
   * digest; indexed by rollout, so a retire looks up only its own rollout.
   */
  readonly #live = new AttemptMap<string>();
  /** Replacement capture key → restored record waiting for its `/run`, indexed by rollout. */
  readonly #restored = new AttemptMap<RestoredEpisode>();
  /** Set by a restore; cleared by the resume after it. */
  #awaitingResume = false;

  /**
   * Admits a `/run`'s episode, synchronously.
   *
   * @throws EpisodeError `stale_attempt` or `admission_closed`; CheckpointError
   * `checkpoint_error` (restored task mismatch); EpisodeAlreadyRunningError (duplicate).
   */
  begin(input: BeginEpisodeInput): AdmittedEpisode {
    const { episode } = input;
    this.retired.check(episode);
    const key = captureKey(episode);
    const digest = taskDigest(input.task);
    const restored = this.#restored.get(key);
    if (this.steps.admissionClosed && (restored === undefined || this.#awaitingResume)) {
      throw new EpisodeError(
        "admission_closed",
        `/run of episode ${key} refused: a checkpoint is open or a restore awaits its resume; retry after resume`,
        key,
      );
    }
    if (restored !== undefined && restored.taskDigest !== digest) {
      throw new CheckpointError(
        "checkpoint_error",
        `episode ${key} continues a checkpoint recorded for a different task; send the task it was recorded with`,
      );
    }
    // Throws for a tracked key before anything here changes: the live episode is untouched.
    const signal = this.steps.begin(key, {
      continuation: restored?.boundary ?? null,
      deadlineTs: input.deadlineTs ?? null,
      restart: input.restart,
      ...(input.signal === undefined ? {} : { signal: input.signal }),
    });
    this.#restored.delete(key);
    this.#live.set(episode, digest);
    this.notify();
    let ended = false;
    const steps = this.steps;
    return {
      episode,
      captureKey: key,
      signal,
      continuation: () => steps.continuation(key),
      boundary: (state) => steps.boundary(key, state),
      step: (mode, fn) => steps.step(key, mode, fn),
      markRestart: (markSignal) => steps.markRestart(key, markSignal),
      markRestartFrom: async (headers, markSignal) => {
        if (!isRestartReply(headers)) return false;
        await steps.markRestart(key, markSignal);
        return true;
      },
      finishing: () => {
        if (!ended) steps.finishing(key);
      },
      end: () => {
        if (ended) return;
        ended = true;
        this.#live.delete(key);
        steps.end(key);
        this.notify();
      },
    };
  }

  // ---- Control plane -------------------------------------------------------------------

  override closeAdmission(_request: CloseAdmissionRequest): void {
    this.steps.closeAdmission();
    this.notify();
  }

  override openAdmission(): void {
    this.#awaitingResume = false;
    this.steps.openAdmission();
    this.notify();
  }

  override ready(): boolean {
    return this.steps.ready();
  }

  override readiness(): PrepareReport {
    return this.steps.readiness();
  }

  override async export(
    scope: readonly EpisodeId[] | null,
    _signal: AbortSignal,
  ): Promise<EnvironmentRecord[]> {
    if (scope !== null) return this.#exportScope(scope);
    // Sorted by capture key, each computed once (not twice per comparison).
    const keyed: { key: string; record: EnvironmentRecord }[] = [];
    this.steps.forEachExported((key, boundary) => {
      const digest = this.#live.get(key);
      const episode = this.#live.episode(key);
      if (digest === undefined || episode === undefined) return;
      keyed.push({ key, record: record(episode, digest, boundary) });
    });
    for (const [key, restored] of this.#restored) {
      keyed.push({
        key,
        record: record(restored.episode, restored.taskDigest, restored.boundary),
      });
    }
    return keyed.sort((a, b) => compareStrings(a.key, b.key)).map(({ record: r }) => r);
  }

  /**
   * The records of `scope`, walked in its key order (a controller sends it sorted, so nothing is
   * sorted here): a live episode's record, then a restored one's of the same key.
   */
  #exportScope(scope: readonly EpisodeId[]): EnvironmentRecord[] {
    const records: EnvironmentRecord[] = [];
    for (const key of sortedScopeKeys(scope)) {
      const boundary = this.steps.exportedBoundary(key);
      if (boundary !== undefined) {
        const digest = this.#live.get(key);
        const episode = this.#live.episode(key);
        if (digest !== undefined && episode !== undefined) {
          records.push(record(episode, digest, boundary));
        }
      }
      const restored = this.#restored.get(key);
      if (restored !== undefined) {
        records.push(record(restored.episode, restored.taskDigest, restored.boundary));
      }
    }
    return records;
  }

  override async install(
    records: readonly EnvironmentRecord[],
    _scope: readonly EpisodeId[],
    _signal: AbortSignal,
  ): Promise<void> {
    if (this.#live.size > 0 || this.#restored.size > 0) {
      throw new CheckpointError(
        "checkpoint_error",
        "environment restore requires a participant holding no episodes; restore into a fresh process",
      );
    }
    refuseDuplicateRecords(records, (r) => captureKey(parseEpisodeId(r.episode_id)), "episode");
    const installed = records.map((r): RestoredEpisode => {
      const next = nextAttempt(parseEpisodeId(r.episode_id));
      return { episode: next, taskDigest: r.task_digest, boundary: r.boundary };
    });
    for (const restored of installed) this.#restored.set(restored.episode, restored);
    this.#awaitingResume = true;
    this.notify();
  }

  /** An episode record is claimed by its replacement's `/run`. */
  claimKey(stored: EnvironmentRecord): string {
    return captureKey(nextAttempt(parseEpisodeId(stored.episode_id)));
  }

  async adoptRestored(stored: EnvironmentRecord, _signal: AbortSignal): Promise<void> {
    const next = nextAttempt(parseEpisodeId(stored.episode_id));
    this.#restored.set(next, {
      episode: next,
      taskDigest: stored.task_digest,
      boundary: stored.boundary,
    });
    this.notify();
    return Promise.resolve();
  }

  override restoredPending(): EpisodeId[] {
    return [...this.#restored.keys()].sort(compareStrings).map((key) => fromCaptureKey(key));
  }

  override async deleteRestored(episode: EpisodeId, _signal: AbortSignal): Promise<void> {
    this.#dropRestored(episode);
    this.notify();
    return Promise.resolve();
  }

  override async retire(episode: EpisodeId, signal: AbortSignal): Promise<void> {
    const covered = this.#live.covered(episode);
    try {
      await Promise.all(covered.map((key) => this.steps.retire(key, signal)));
    } finally {
      this.#dropRestored(episode);
      this.notify();
    }
  }

  override statusExtra(): Record<string, unknown> {
    return { restored_pending: [...this.#restored.keys()].sort(compareStrings) };
  }

  #dropRestored(episode: EpisodeId): void {
    this.#restored.deleteCovered(episode);
  }
}

/**
 * One episode's record. The boundary is not walked here: the records writer checks every record
 * once as it encodes it, and a boundary that is not JSON fails the commit with 422
 * `invalid_checkpoint_state` naming the episode and the path (`$.boundary…`; docs/storage.md).
 * Walking it here too was a second walk of every boundary at each commit.
 */
function record(episode: EpisodeId, digest: string, boundary: JsonValue | null): EnvironmentRecord {
  return Object.freeze({
    episode_id: episodeIdToWire(episode) as EnvironmentRecord["episode_id"],
    task_digest: digest,
    boundary,
  });
}
