/**
 * The base class of environment servers: owns `/run`, admits each episode with the environment
 * checkpoint participant, and lets the author write the episode as a sequence of steps.
 *
 * @see docs/environment-server.md
 * @module
 */
import { z } from "zod";
import { CheckpointError, ConfigError, EpisodeError, InvalidRequestError } from "../errors.js";
import {
  captureKey,
  episodeIdToWire,
  sameEpisode,
  type EpisodeId,
} from "../identity/episode-id.js";
import { InvalidRunRolloutError, episodeFromRunBody } from "../identity/run-body.js";
import {
  EnvironmentParticipant,
  type AdmittedEpisode,
  type EpisodeHandle,
} from "../participants/environment/environment-participant.js";
import { isRestartReply } from "../participants/environment/checkpoint-headers.js";
import { EpisodeDeadlineError } from "../steps/episode-errors.js";
import { deferred } from "../util/deferred.js";
import { fireAt } from "../util/deadline.js";
import { Semaphore } from "../util/semaphore.js";
import type { JsonValue } from "../json/json-value.js";
import {
  RunReplySchema,
  RunRequestSchema,
  type RunRequest,
  type TaskId,
} from "../wire/environment.js";
import { dataRoute, documentedReply, type DataRoute } from "./data-route.js";
import { Server, type ServerOptions } from "./server.js";

/** The longest timeout a setting takes (a Node timer's range, about 24.8 days), in seconds. */
const MAX_TIMEOUT_S = 2_147_483;

/**
 * The base `config:` of an environment server: the settings that bound an
 * episode's work. Strict; a subclass that declares more settings extends it
 * (`EnvironmentConfigSchema.extend({...})`) in its {@link EnvironmentServer.configSchema}.
 */
export const EnvironmentConfigSchema = z
  .strictObject({
    /** At most this many episodes run at once in this process; null: unlimited. */
    max_concurrent_episodes: z.number().int().positive().nullable().default(null),
    /** How long a `/run` waits for an episode slot (required with `max_concurrent_episodes`). */
    queue_timeout_seconds: z.number().positive().max(MAX_TIMEOUT_S).nullable().default(null),
    /** The episode deadline, from admission to the end of its protocol; null: none. */
    default_episode_timeout_seconds: z
      .number()
      .positive()
      .max(MAX_TIMEOUT_S)
      .nullable()
      .default(null),
    /** The one total budget of an episode's final cleanup. */
    cleanup_timeout_seconds: z.number().positive().max(MAX_TIMEOUT_S),
  })
  .refine(
    (config) => config.max_concurrent_episodes === null || config.queue_timeout_seconds !== null,
    {
      path: ["queue_timeout_seconds"],
      message: "queue_timeout_seconds is required when max_concurrent_episodes is set",
    },
  )
  .meta({ id: "EnvironmentConfig" });
/** The base environment server settings. */
export type EnvironmentConfig = z.infer<typeof EnvironmentConfigSchema>;

/** Why an episode failed. */
export interface EpisodeFailure {
  readonly failure_reason: string;
  /** True: the collector must not retry this rollout. */
  readonly terminal: boolean;
  readonly failure_kind?: string;
  readonly stage?: "admission" | "seed" | "agent" | "verification" | "cleanup";
  readonly [extra: string]: unknown;
}

/** What an episode ends with: exactly one of a result or a failure. */
export type EpisodeOutcome =
  | { readonly result: JsonValue; readonly failure?: undefined }
  | { readonly failure: EpisodeFailure; readonly result?: undefined };

/** The `/run` reply. */
export interface RunReply {
  readonly episode_id: { rollout_id: string; attempt: number };
  readonly task_id: TaskId;
  readonly result: JsonValue | null;
  readonly failure: EpisodeFailure | null;
}

/**
 * Input of {@link EnvironmentServer.runEpisode} on server `S` (write `RunEpisodeInput<this>`).
 * @default S: a server whose `/run` body is a plain {@link RunRequest}
 */
export interface RunEpisodeInput<
  S extends { readonly runRequest: z.ZodType<RunRequest> } = {
    readonly runRequest: z.ZodType<RunRequest>;
  },
> {
  /** The `/run` body as `S`'s {@link EnvironmentServer.runRequest} parsed it. */
  readonly body: z.output<S["runRequest"]>;
  /** The attempt this `/run` runs. */
  readonly episode: EpisodeId;
  /** The episode's steps: boundaries, steps, the restored continuation. */
  readonly steps: EpisodeHandle;
  /** Aborted by retire, the client going away, or shutdown: once it fires, stop. */
  readonly signal: AbortSignal;
  /** Registers a final-cleanup callback; they run last-in first-out before `/run` replies. */
  readonly onCleanup: (callback: () => void | Promise<void>) => void;
}

export {
  isRestartReply,
  verifyModeOf,
  type ReplyHeaders,
} from "../participants/environment/checkpoint-headers.js";

const MAX_REASON = 2000;

/**
 * An environment server: subclass it and implement {@link runEpisode}.
 *
 * ## Rules
 * - `/run` names its episode by `episode_id`, or by the collector's row fields (`_ng_rollout_id`,
 *   `_ng_task_index`, `_ng_rollout_index`, `_ng_attempt_index`); both must agree.
 * - With checkpointing on, each `/run` is admitted by the environment participant (refusals
 *   `stale_attempt`, `admission_closed`, `checkpoint_error` become the 409 envelope and run
 *   nothing). Set `static checkpointBoundaries = true` once the episode records a boundary at the
 *   start of every stage; otherwise every episode is a restart. With checkpointing on,
 *   `num_workers > 1` is refused at startup.
 * - Final cleanup runs before the reply; a retire never interrupts it.
 *
 * @example
 * class Echo extends EnvironmentServer {
 *   static override checkpointBoundaries = true;
 *   override readonly runRequest = RunRequestSchema.extend({
 *     task: z.strictObject({ task_id: TaskIdSchema, task_input: z.string() }),
 *   });
 *   protected override async runEpisode({ body, steps }: RunEpisodeInput<this>) {
 *     await steps.boundary({ next: "echo" });
 *     const result = await steps.step("replay", () => body.task.task_input);
 *     return { result };
 *   }
 * }
 * @experimental
 * @see docs/environment-server.md
 */
export abstract class EnvironmentServer<
  Config extends EnvironmentConfig = EnvironmentConfig,
> extends Server<Config> {
  /** Whether episodes record boundaries (and so can be continued). @default false */
  static checkpointBoundaries = false;

  readonly checkpointBoundaries: boolean;
  #participant: EnvironmentParticipant | null = null;
  #semaphore: Semaphore | null = null;

  constructor(options: ServerOptions) {
    super(options);
    const declared: unknown = new.target.checkpointBoundaries;
    if (typeof declared !== "boolean") {
      throw new ConfigError(`${new.target.name}.checkpointBoundaries must be true or false`);
    }
    this.checkpointBoundaries = declared;
  }

  /** The environment participant (null with checkpointing off). */
  override get participant(): EnvironmentParticipant | null {
    this.app();
    return this.#participant;
  }

  /**
   * Runs one episode as a sequence of steps and returns its outcome. Record a boundary at the
   * start of every stage; read `steps.continuation()` first to resume at a restored stage.
   */
  protected abstract runEpisode(input: RunEpisodeInput<this>): Promise<EpisodeOutcome>;

  /**
   * The `config:` settings: {@link EnvironmentConfigSchema} unless {@link configSchema} declares
   * an extension of it (`EnvironmentConfigSchema.extend({...})`).
   */
  protected override baseConfigSchema(): z.ZodType<EnvironmentConfig> {
    return EnvironmentConfigSchema;
  }

  /**
   * The schema of the `/run` body: {@link RunRequestSchema}, or a narrowing of it (e.g. a
   * stricter `task_input`), so a bad task is refused with 422 before an episode is admitted. It
   * validates and documents `/run`, and its parse output is the body {@link runEpisode}
   * receives (`RunEpisodeInput<this>`). @default RunRequestSchema
   */
  readonly runRequest: z.ZodType<RunRequest> = RunRequestSchema;

  /** The settings that bound an episode, read from the validated config. */
  #bounds(): { episodeTimeoutS: number | null; cleanupTimeoutS: number | null } {
    return {
      episodeTimeoutS: this.config.default_episode_timeout_seconds ?? null,
      cleanupTimeoutS: this.config.cleanup_timeout_seconds ?? null,
    };
  }

  protected override createParticipant(): EnvironmentParticipant {
    this.#participant = new EnvironmentParticipant();
    return this.#participant;
  }

  protected override routes(): readonly DataRoute[] {
    return [
      dataRoute({
        method: "post",
        path: "/run",
        summary: "Run one episode",
        description:
          "Failures of the agent or resources server are episode failures (200), not 502s. " +
          "A body naming no episode, or a malformed one, is 422.",
        request: this.runRequest,
        // Documents the reply; `RunReply` types it (its episode ID is not branded).
        reply: documentedReply(RunReplySchema),
        errors: ["admission_closed", "stale_attempt", "checkpoint_error"],
        handler: async ({ body, signal, res }) => {
          const reply = await this.#run(body, signal);
          if (reply === null) {
            res.destroy(); // cancelled: no normal reply
            return undefined;
          }
          return reply;
        },
      }),
    ];
  }

  /**
   * Runs the final-cleanup callbacks in order, sequentially, within one total budget of
   * `budgetS` seconds (null: unbounded). A failing callback is logged and the next one runs; a
   * budget overrun stops the unwind (logged) without waiting for the callback in flight.
   */
  async #finalCleanup(
    key: string,
    callbacks: readonly (() => void | Promise<void>)[],
    budgetS: number | null,
  ): Promise<void> {
    if (callbacks.length === 0) return;
    const overrun = deferred<"overrun">();
    const cancelBudget =
      budgetS === null
        ? null
        : fireAt(Date.now() + budgetS * 1000, () => overrun.resolve("overrun"));
    try {
      for (const [index, callback] of callbacks.entries()) {
        const ran = (async (): Promise<"done"> => {
          try {
            await callback();
          } catch (error) {
            this.logger.warn({ err: error, episode: key }, "final cleanup failed");
          }
          return "done";
        })();
        if ((await Promise.race([ran, overrun.promise])) === "overrun") {
          this.logger.warn(
            { episode: key, budgetSeconds: budgetS, skipped: callbacks.length - index - 1 },
            "final cleanup ran past cleanup_timeout_seconds; the rest of the unwind is skipped",
          );
          return;
        }
      }
    } finally {
      cancelBudget?.();
    }
  }

  async #run(body: RunRequest, requestSignal: AbortSignal): Promise<RunReply | null> {
    const episode = episodeOfBody(body);
    const slots = this.#slots();
    if (slots !== null) {
      const timeoutS = this.config.queue_timeout_seconds;
      const got = await slots.acquire(timeoutS === null ? null : timeoutS * 1000, requestSignal);
      if (!got) {
        // No checkpoint state touched and no downstream call made.
        return {
          episode_id: episodeIdToWire(episode),
          task_id: body.task.task_id,
          result: null,
          failure: {
            failure_reason: "Episode admission timed out",
            terminal: false,
            stage: "admission",
          },
        };
      }
    }
    try {
      return await this.#runAdmitted(body, episode, requestSignal);
    } finally {
      slots?.release();
    }
  }

  /** The per-process episode slots, or null when unlimited. */
  #slots(): Semaphore | null {
    const max = this.config.max_concurrent_episodes ?? null;
    if (max === null) return null;
    this.#semaphore ??= new Semaphore(max);
    return this.#semaphore;
  }

  async #runAdmitted(
    body: RunRequest,
    episode: EpisodeId,
    requestSignal: AbortSignal,
  ): Promise<RunReply | null> {
    const task = { task_id: body.task.task_id, task_input: body.task.task_input };
    const bounds = this.#bounds();
    const deadlineTs =
      bounds.episodeTimeoutS === null ? null : Date.now() / 1000 + bounds.episodeTimeoutS;
    // With several workers, a restored episode waits at the coordinator for its replacement.
    await this.workerLink?.claimRestored(captureKey(episode));
    const admitted: AdmittedEpisode =
      this.#participant === null
        ? unmanaged(episode, requestSignal, deadlineTs)
        : this.#participant.begin({
            episode,
            task,
            restart: !this.checkpointBoundaries,
            signal: requestSignal,
            deadlineTs,
          });
    const cleanups: (() => void | Promise<void>)[] = [];
    let outcome: EpisodeOutcome | null = null;
    let thrown: unknown = null;
    try {
      try {
        outcome = await this.runEpisode({
          // `this.runRequest` parsed it: the compiler cannot see that through `this`.
          body: body as z.output<this["runRequest"]>,
          episode,
          steps: admitted,
          signal: admitted.signal,
          onCleanup: (callback) => cleanups.push(callback),
        });
      } catch (error) {
        thrown = error;
      }
      admitted.finishing();
      await this.#finalCleanup(admitted.captureKey, cleanups.reverse(), bounds.cleanupTimeoutS);
    } finally {
      admitted.end();
    }
    if (thrown !== null) {
      // Only the control family propagates as an HTTP error; any other
      // error, typed or not, is the episode's terminal unhandled failure.
      if (thrown instanceof EpisodeError || thrown instanceof CheckpointError) throw thrown;
      if (admitted.signal.aborted) {
        const reason: unknown = admitted.signal.reason;
        if (reason instanceof EpisodeDeadlineError) {
          outcome = { failure: { failure_reason: "Episode timed out", terminal: false } };
        } else {
          return null;
        }
      } else {
        const e = thrown instanceof Error ? thrown : new Error(String(thrown));
        outcome = {
          failure: {
            failure_reason: `Unhandled environment server error: ${e.name}: ${e.message}`.slice(
              0,
              MAX_REASON,
            ),
            terminal: true,
          },
        };
      }
    }
    const done = validOutcome(outcome);
    return {
      episode_id: episodeIdToWire(episode),
      task_id: body.task.task_id,
      result: done.failure === undefined ? (done.result ?? null) : null,
      failure: done.failure ?? null,
    };
  }
}

/**
 * What `runEpisode` returned, when it is exactly one of `{ result }` or `{ failure }`; anything
 * else is an author mistake reported as the episode's terminal unhandled failure, not a 500.
 */
function validOutcome(outcome: unknown): EpisodeOutcome {
  const candidate = outcome as { result?: unknown; failure?: unknown } | null;
  const hasResult =
    candidate !== null && typeof candidate === "object" && candidate.result !== undefined;
  const hasFailure =
    candidate !== null && typeof candidate === "object" && candidate.failure != null;
  if (hasResult !== hasFailure) return candidate as EpisodeOutcome;
  return {
    failure: {
      failure_reason:
        "Unhandled environment server error: runEpisode must return exactly one of { result } or { failure }",
      terminal: true,
    },
  };
}

/**
 * The episode a `/run` body names; `episode_id` and the row fields must agree. A body naming
 * no episode, or a malformed or conflicting one, fails validation: 422 `invalid_request` naming
 * the field.
 */
function episodeOfBody(body: RunRequest): EpisodeId {
  let fromRow: EpisodeId | null;
  try {
    fromRow = episodeFromRunBody(body);
  } catch (error) {
    if (!(error instanceof InvalidRunRolloutError)) throw error;
    throw runBodyRefusal(error.reason, error.field);
  }
  const explicit = body.episode_id ?? null;
  if (explicit !== null && fromRow !== null && !sameEpisode(explicit, fromRow)) {
    throw runBodyRefusal(
      `episode_id names ${captureKey(explicit)} but the row fields name ${captureKey(fromRow)}; send one of them`,
      "episode_id",
    );
  }
  const episode = explicit ?? fromRow;
  if (episode === null) {
    throw runBodyRefusal(
      "the /run body names no episode: send episode_id, _ng_rollout_id, or _ng_task_index with _ng_rollout_index",
      "episode_id",
    );
  }
  return episode;
}

function runBodyRefusal(reason: string, field: string): InvalidRequestError {
  return new InvalidRequestError(reason, [{ path: [field], message: reason }]);
}

/**
 * Checkpointing off: boundaries are no-ops (builders never called), steps just run. The signal
 * follows the request's and, with a deadline, aborts with an {@link EpisodeDeadlineError} when it
 * passes (until final cleanup starts).
 */
function unmanaged(
  episode: EpisodeId,
  requestSignal: AbortSignal,
  deadlineTs: number | null,
): AdmittedEpisode {
  const controller = new AbortController();
  const signal = controller.signal;
  const onAbort = (): void => controller.abort(requestSignal.reason);
  if (requestSignal.aborted) onAbort();
  else requestSignal.addEventListener("abort", onAbort, { once: true });
  let cancelDeadline: (() => void) | null =
    deadlineTs === null
      ? null
      : fireAt(deadlineTs * 1000, () =>
          controller.abort(new EpisodeDeadlineError(captureKey(episode), deadlineTs)),
        );
  const stopDeadline = (): void => {
    cancelDeadline?.();
    cancelDeadline = null;
  };
  return {
    episode,
    captureKey: captureKey(episode),
    signal,
    continuation: () => null,
    boundary: () => {
      signal.throwIfAborted();
      return Promise.resolve();
    },
    step: async (_mode, fn) => {
      signal.throwIfAborted();
      return await fn(signal);
    },
    markRestart: () => Promise.resolve(),
    markRestartFrom: (headers) => Promise.resolve(isRestartReply(headers)),
    finishing: stopDeadline,
    end: () => {
      stopDeadline();
      requestSignal.removeEventListener("abort", onAbort);
    },
  };
}
