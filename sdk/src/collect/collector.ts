/**
 * Rollout collection over a dataset, checkpointed with rows in flight: the controller side of a
 * long evaluation or data-generation run that must survive preemption. {@link Collection} sends
 * every row's `/run`, writes one output row per rollout as it ends, checkpoints on request, and
 * resumes a previous run from its checkpoint directory so that every row ends exactly once.
 *
 * @see docs/collect.md
 */
import { randomBytes } from "node:crypto";
import { mkdir, truncate } from "node:fs/promises";
import path from "node:path";
import { pino, type Logger } from "pino";
import {
  commit,
  forget,
  prepare,
  restore,
  resume,
  retire,
  status,
  CoordinationError,
  UnreachableParticipantsError,
  type Participants,
} from "../client/coordination.js";
import { locateServer, locatedName } from "../client/host-loss.js";
import type { ServerClient } from "../client/server-client.js";
import { checkCommitShared, checkRestoreShared, writersOf } from "../client/shared-storage.js";
import { episodeId, nextAttempt, type EpisodeId } from "../identity/episode-id.js";
import { deferred, type Deferred } from "../util/deferred.js";
import { didYouMean } from "../util/did-you-mean.js";
import { Mutex } from "../util/mutex.js";
import { ATTR } from "../telemetry/names.js";
import { inSpan } from "../telemetry/spans.js";
import { CollectionDir, type CollectionManifest, type RowEpisode } from "./collection-dir.js";
import { DispatchLog } from "./dispatch-log.js";
import { DEFAULT_MAX_FAILURES, FailureWatch, type FailureStreak } from "./failure-streak.js";
import { Fencer } from "./fencer.js";
import { planResume, rowRolloutId } from "./resume-plan.js";
import {
  OutputFile,
  rolloutRow,
  runOutcome,
  type RolloutRow,
  type RowFailure,
} from "./rollout-row.js";
import {
  checkTaskFile,
  readTaskRows,
  scanTaskFile,
  type TaskFileSummary,
  type TaskRow,
  type TaskRowOptions,
} from "./task-rows.js";

/** The `gym collect` exit status of a run stopped by a preemption notice: requeue and resume. */
export const EXIT_PREEMPTED = 75;

/**
 * The `gym collect` exit status of a run stopped because its rows kept failing the same way
 * ({@link CollectOptions.maxFailures}): requeueing would fail again; fix the input or the
 * servers first.
 */
export const EXIT_FAILING = 3;

/** Options of {@link collect} and {@link Collection.start}. */
export interface CollectOptions {
  readonly client: ServerClient;
  /**
   * The deployment's participants (from `discover`), or null when it does not checkpoint: then
   * there are no checkpoints and no fencing, and a row whose `/run` got no reply is sent again
   * unfenced.
   */
  readonly participants: Participants | null;
  /** The JSON Lines file of tasks. */
  readonly input: string;
  /** The JSON Lines file rows are appended to as they end. */
  readonly output: string;
  /** Rows in flight at once. @default 16 */
  readonly concurrency?: number;
  /** Rollouts per task, each with its own rollout ID. @default 1 */
  readonly repeats?: number;
  /** The environment server of rows that name none. @default the deployment's only one */
  readonly environment?: string;
  /** The row field naming a row's environment server. @default "environment" */
  readonly routeField?: string;
  /** The task set of rows whose `task_id` is not an object. @default the input's base name */
  readonly taskset?: string;
  /** Where checkpoints, the dispatch log and the run file live; none: no checkpoints. */
  readonly checkpointDir?: string;
  /** Checkpoint this often while rows are in flight (ms). @default never */
  readonly checkpointEveryMs?: number;
  /** Continue the run `checkpointDir` holds (a new run when it holds none). */
  readonly resume?: boolean;
  /** Discard the run `checkpointDir` holds, and the output, and start over. */
  readonly reset?: boolean;
  /** Sends of a row that get no reply before it ends as a `no_reply` failure. @default 3 */
  readonly maxAttempts?: number;
  /**
   * Stop the run (status `failing`) once this many rollouts in a row, in the order they ended,
   * failed the same way (same failure kind and error code): the dataset or the deployment is
   * wrong, and going on would only write a failure row per row. Lowered to the run's rollouts
   * when it has fewer. The rollouts of the streak get no output row, so a resume sends them
   * again; failure rows are held back until the streak breaks. 0 turns the check off.
   * @default 20
   */
  readonly maxFailures?: number;
  /** Bound on each coordination step (prepare, commit, restore...), in ms. @default 60_000 */
  readonly stepTimeoutMs?: number;
  /** Bound on one `/run`, in ms. @default the client's data timeout */
  readonly runTimeoutMs?: number;
  readonly logger?: Logger;
  /** Told about checkpoints, restores and fences as they happen. */
  readonly onEvent?: (event: CollectEvent) => void;
}

/** Something the run did that a display may show. */
export type CollectEvent =
  | { readonly type: "checkpoint"; readonly outcome: CheckpointOutcome }
  | { readonly type: "restored"; readonly checkpointId: string; readonly rows: number }
  | { readonly type: "restore_failed"; readonly checkpointId: string; readonly error: string }
  | { readonly type: "fenced"; readonly rows: number }
  | { readonly type: "recovered"; readonly checkpointIds: readonly string[] }
  /**
   * Participants that had not answered since a checkpoint failed answered its resume: the host
   * is back, and checkpoints are taken again.
   */
  | { readonly type: "reachable"; readonly servers: readonly string[] };

/** How one checkpoint ended. */
export type CheckpointOutcome =
  | {
      readonly status: "published";
      readonly checkpointId: string;
      readonly continued: number;
      readonly restarted: number;
      /** Dispatch paused, prepare through resume, in ms. */
      readonly pauseMs: number;
    }
  | {
      readonly status: "missed";
      readonly checkpointId: string;
      /** Server → episodes still busy at the deadline. */
      readonly blockers: Readonly<Record<string, readonly string[]>>;
      readonly pauseMs: number;
    }
  | {
      readonly status: "failed";
      readonly checkpointId: string;
      readonly error: string;
      readonly pauseMs: number;
    }
  | { readonly status: "unavailable"; readonly reason: string };

/** Where a run stands. */
export interface CollectProgress {
  readonly runId: string;
  readonly session: number;
  /** Rollouts in the run: rows × repeats. */
  readonly total: number;
  /** Rollouts with an output row (this session and earlier ones). */
  readonly ended: number;
  readonly finished: number;
  readonly failed: number;
  readonly inFlight: number;
  /** Rows fenced after a lost reply, waiting for the retire before they are sent again. */
  readonly fencing: number;
  /** Rollouts ended per second in this session. */
  readonly rate: number;
  /** Seconds to the end at that rate, or null before any rollout ended. */
  readonly etaSeconds: number | null;
  /** Mean reward over every output row with a reward, or null. */
  readonly meanReward: number | null;
  readonly checkpoints: {
    readonly published: number;
    readonly missed: number;
    readonly failed: number;
  };
  readonly lastCheckpoint: (CheckpointOutcome & { readonly at: string }) | null;
  readonly elapsedSeconds: number;
}

/** How a run ended. */
export interface CollectSummary extends CollectProgress {
  /**
   * `complete`: every rollout has its row; `stopped`: stopped by {@link Collection.stop};
   * `failing`: stopped because rollouts kept failing the same way ({@link failureStreak}).
   */
  readonly status: "complete" | "stopped" | "failing";
  /** How the rollouts that stopped a `failing` run failed; null otherwise. */
  readonly failureStreak: FailureStreak | null;
  readonly output: string;
  readonly checkpointDir: string | null;
  /** Rows restored from the latest checkpoint at the start of this session. */
  readonly restored: number;
  /** Rows fenced and sent again (at the start and after lost replies). */
  readonly fenced: number;
  /** Whether the stop published a checkpoint. */
  readonly stopCheckpoint: boolean | null;
}

/** A usage problem found before anything was sent. */
export class CollectError extends Error {
  override readonly name = "CollectError";
  constructor(
    message: string,
    /** What to do about it. */
    readonly hint?: string,
  ) {
    super(message);
  }
}

/** A rollout waiting to be sent (again). */
interface Pending {
  readonly row: TaskRow;
  readonly repeat: number;
  readonly episode: EpisodeId;
  /** Restored and not yet sent: checkpoints name it at its replacement attempt. */
  readonly restored: boolean;
  /** Sends that got no reply so far. */
  readonly lost: number;
}

const DEFAULT_STEP_TIMEOUT_MS = 60_000;
/** Rollouts per retire or forget call. */
const CONTROL_BATCH = 1_000;

/** A collection run; {@link Collection.start} opens one, {@link done} is its end. */
export class Collection {
  readonly #options: CollectOptions;
  readonly #log: Logger;
  readonly #dir: CollectionDir | null;
  readonly #participants: Participants | null;
  readonly #concurrency: number;
  readonly #repeats: number;
  readonly #maxAttempts: number;
  readonly #maxFailures: number;
  readonly #stepMs: number;
  readonly #rowOptions: TaskRowOptions;
  readonly #defaultEnvironment: string;
  #runId = "";
  #session = 1;
  #total = 0;
  #output!: OutputFile;
  #watch = new FailureWatch(0);
  #failing: FailureStreak | null = null;
  #dispatch: DispatchLog | null = null;
  #source: AsyncGenerator<TaskRow> | null = null;
  #sourceRow: TaskRow | null = null;
  #sourceRepeat = 0;
  #sourceDone = false;
  #pulling: Promise<Pending | null> | null = null;
  readonly #queue: Pending[] = [];
  /** Rollouts restored or fenced at the start: the input's pass skips them. */
  readonly #claimed = new Set<string>();
  readonly #inFlight = new Map<string, Pending & { readonly startedAt: number }>();
  readonly #restoredWaiting = new Map<string, Pending>();
  readonly #forget = new Set<string>();
  #fencer: Fencer<Pending> | null = null;
  #changed: Deferred<void> = deferred();
  #paused = false;
  #resumed: Deferred<void> = deferred();
  #stopping = false;
  #stopCheckpoint: boolean | null = null;
  readonly #abort = new AbortController();
  readonly #reachAbort = new AbortController();
  readonly #checkpointLock = new Mutex();
  /**
   * Participants that did not answer a checkpoint (their host is down or frozen), each with the
   * checkpoint IDs it has yet to be resumed from. While any is here no checkpoint is taken (it
   * would only fail the same way, with dispatch paused), and {@link #reach} resumes them in the
   * background until they answer.
   */
  readonly #unanswered = new Map<string, Set<string>>();
  #reaching: Promise<void> | null = null;
  #checkpointSeq = 0;
  #timer: NodeJS.Timeout | null = null;
  readonly #counts = { published: 0, missed: 0, failed: 0 };
  #lastCheckpoint: (CheckpointOutcome & { at: string }) | null = null;
  #restoredCount = 0;
  #fencedCount = 0;
  #endedThisSession = 0;
  readonly #startedAt = performance.now();
  #done: Promise<CollectSummary> | null = null;

  private constructor(options: CollectOptions) {
    this.#options = options;
    this.#log = options.logger ?? pino({ level: "silent" });
    this.#participants = options.participants;
    this.#dir =
      options.checkpointDir === undefined ? null : new CollectionDir(options.checkpointDir);
    this.#concurrency = positive(options.concurrency ?? 16, "concurrency");
    this.#repeats = positive(options.repeats ?? 1, "repeats");
    this.#maxAttempts = positive(options.maxAttempts ?? 3, "maxAttempts");
    this.#maxFailures = nonNegative(options.maxFailures ?? DEFAULT_MAX_FAILURES, "maxFailures");
    this.#stepMs = positive(options.stepTimeoutMs ?? DEFAULT_STEP_TIMEOUT_MS, "stepTimeoutMs");
    this.#rowOptions = {
      routeField: options.routeField ?? "environment",
      ...(options.taskset === undefined ? {} : { taskset: options.taskset }),
    };
    this.#defaultEnvironment = this.#pickEnvironment();
    if (this.#dir !== null && this.#participants === null) {
      throw new CollectError(
        "checkpoints need a deployment with checkpointing on",
        "turn it on in the deployment file (checkpoint: {enabled: true, ...}), or drop --checkpoint-dir",
      );
    }
    if (options.resume === true && this.#dir === null) {
      throw new CollectError("--resume needs --checkpoint-dir", "pass the directory of the run");
    }
    if (options.resume === true && options.reset === true) {
      throw new CollectError("--resume and --reset contradict each other", "pass one of them");
    }
  }

  /** Opens the files, resumes the run the checkpoint directory holds if asked, starts sending. */
  static async start(options: CollectOptions): Promise<Collection> {
    const collection = new Collection(options);
    await collection.#open();
    collection.#done = collection.#run();
    return collection;
  }

  /** Resolves when every rollout has its row, or the run was stopped. */
  get done(): Promise<CollectSummary> {
    if (this.#done === null) throw new Error("the collection has not started");
    return this.#done;
  }

  /** The run's ID (the prefix of every rollout ID). */
  get runId(): string {
    return this.#runId;
  }

  #pickEnvironment(): string {
    const servers = this.#options.client.deployment.servers;
    const environments = environmentServers(servers);
    const named = this.#options.environment;
    if (named !== undefined) {
      if (!environments.includes(named)) {
        throw unknownEnvironment(
          `--environment names ${JSON.stringify(named)}`,
          named,
          servers,
          environments,
          "pass one of them",
        );
      }
      return named;
    }
    if (environments.length === 1) return environments[0] as string;
    return "";
  }

  async #open(): Promise<void> {
    const options = this.#options;
    const dir = this.#dir;
    // First: a mistyped input path must not cost the run a --reset is about to discard.
    await checkTaskFile(options.input);
    let run = dir === null ? null : await dir.readRun();
    if (run !== null && options.resume !== true && options.reset !== true) {
      throw new CollectError(
        `${dir?.dir} holds run ${run.run_id}`,
        "continue it with --resume, or discard it (and the output) with --reset",
      );
    }
    if (options.reset === true) {
      await dir?.clear();
      await truncate(options.output).catch((error: NodeJS.ErrnoException) => {
        if (error.code !== "ENOENT") throw error;
      });
      run = null;
    }
    const resuming = run !== null;
    if (dir !== null) await mkdir(dir.dir, { recursive: true });
    await mkdir(path.dirname(options.output), { recursive: true });
    const output = await OutputFile.open(options.output);
    if (!resuming && output.ended.size > 0) {
      await output.close();
      throw new CollectError(
        `${options.output} already holds ${output.ended.size} rows of another run`,
        dir === null
          ? "write to a new file, or discard it with --reset"
          : "continue that run with --resume, or discard it with --reset",
      );
    }
    this.#output = output;
    try {
      const manifest = resuming ? await dir!.readLatest() : null;
      this.#dispatch = dir === null ? null : await DispatchLog.open(dir.dispatchLog);
      if (this.#dispatch !== null && this.#dispatch.tornBytes > 0) {
        this.#log.warn(
          { bytes: this.#dispatch.tornBytes },
          "the dispatch log ended in a torn entry; it was cut off",
        );
      }
      const runId = run?.run_id ?? randomBytes(4).toString("hex");
      const plan = resuming
        ? planResume(runId, manifest, this.#dispatch!.newest, output.ended)
        : { restore: [], fence: [] };
      const keep = new Set<number>([
        ...plan.restore.map((entry) => entry.row),
        ...plan.fence.map((entry) => entry.row),
      ]);
      const scanned = await scanTaskFile(options.input, this.#rowOptions, keep);
      this.#checkEnvironments(scanned);
      if (run !== null && (run.input_digest !== scanned.digest || run.repeats !== this.#repeats)) {
        throw new CollectError(
          `the input or --repeats changed since run ${run.run_id} started`,
          `resume with the same input (${run.rows} rows, digest ${run.input_digest.slice(0, 12)}) and --repeats ${run.repeats}, or start over with --reset`,
        );
      }
      this.#runId = runId;
      this.#session = (run?.session ?? 0) + 1;
      this.#total = scanned.rows * this.#repeats;
      this.#watch = new FailureWatch(Math.min(this.#maxFailures, this.#total));
      if (dir !== null) {
        await dir.createRun({
          format: 1,
          run_id: runId,
          session: this.#session,
          created_at: run?.created_at ?? new Date().toISOString(),
          input: options.input,
          input_digest: scanned.digest,
          rows: scanned.rows,
          repeats: this.#repeats,
        });
      }
      if (this.#participants !== null) {
        await this.#recoverOpenCheckpoints();
        this.#fencer = new Fencer<Pending>({
          retire: async (episodes) => await this.#retireEverywhere(episodes),
          settled: (pending, fenced) => this.#afterFence(pending, fenced),
          changed: () => this.#wake(),
          logger: this.#log,
        });
      }
      if (manifest !== null && plan.restore.length > 0) {
        await this.#restore(manifest, plan.restore, scanned.kept);
      }
      if (plan.fence.length > 0) {
        await this.#fenceAtStart(plan.fence, scanned.kept);
      }
      this.#source = readTaskRows(options.input, this.#rowOptions);
    } catch (error) {
      await this.#closeFiles();
      throw error;
    }
  }

  #checkEnvironments(scanned: TaskFileSummary): void {
    const servers = this.#options.client.deployment.servers;
    const environments = environmentServers(servers);
    const unrouted = scanned.unrouted;
    for (const name of scanned.environments) {
      if (servers[name]?.kind !== "environment") {
        const line = scanned.firstLines.get(name);
        throw unknownEnvironment(
          `rows name ${JSON.stringify(name)} in "${this.#rowOptions.routeField}"${line === undefined ? "" : ` (first at ${this.#options.input}:${line})`}`,
          name,
          servers,
          environments,
          `fix the rows' "${this.#rowOptions.routeField}" (or drop it and pass --environment NAME)`,
        );
      }
    }
    if (this.#defaultEnvironment === "" && unrouted > 0) {
      throw new CollectError(
        `${unrouted} rows name no environment server, and the deployment has several`,
        `pass --environment NAME, or name one in each row's "${this.#rowOptions.routeField}"`,
      );
    }
  }

  /** Aborts checkpoints a dead controller left open (participants refuse retire meanwhile). */
  async #recoverOpenCheckpoints(): Promise<void> {
    const participants = this.#participants as Participants;
    const replies = await status(participants, this.#stepMs);
    const open = new Set<string>();
    for (const reply of Object.values(replies)) {
      if (reply.phase !== "idle" && reply.checkpoint_id !== null) open.add(reply.checkpoint_id);
    }
    for (const id of open) await resume(participants, id, this.#deadline());
    if (open.size > 0) this.#emit({ type: "recovered", checkpointIds: [...open].sort() });
  }

  async #restore(
    manifest: CollectionManifest,
    entries: readonly RowEpisode[],
    rows: ReadonlyMap<number, TaskRow>,
  ): Promise<void> {
    const participants = this.#participants as Participants;
    const dir = this.#dir as CollectionDir;
    const episodes = entries.map((entry) => episodeId(entry.rollout_id, entry.attempt));
    try {
      await inSpan(
        "gym.collect.restore",
        {
          [ATTR.runId]: this.#runId,
          [ATTR.checkpointId]: manifest.checkpoint_id,
          [ATTR.rows]: entries.length,
        },
        async () => {
          // Refused here, naming who wrote what is missing, rather than by each participant.
          await checkRestoreShared(
            this.#options.client.deployment,
            dir.checkpointDir(manifest.checkpoint_id),
            participants.members,
            manifest.writers,
          );
          await restore(participants, {
            checkpointId: manifest.checkpoint_id,
            checkpointDir: dir.checkpointDir(manifest.checkpoint_id),
            episodeIds: episodes,
            deadlineTs: this.#deadline(),
          });
          await resume(participants, manifest.checkpoint_id, this.#deadline());
        },
      );
    } catch (error) {
      // All or nothing: the restore's own rollback retired what it could; the rows start over
      // from their input after their replacement attempts are fenced here as well.
      this.#emit({
        type: "restore_failed",
        checkpointId: manifest.checkpoint_id,
        error: outlivedCollector(error, manifest.checkpoint_id) ?? (error as Error).message,
      });
      this.#log.warn({ err: error }, "restoring the latest checkpoint failed; its rows start over");
      await this.#fenceAtStart(
        entries.map((entry) => ({
          row: entry.row,
          repeat: entry.repeat,
          episode: nextAttempt(episodeId(entry.rollout_id, entry.attempt)),
        })),
        rows,
      );
      return;
    }
    for (const entry of entries) {
      const pending: Pending = {
        row: this.#keptRow(rows, entry.row),
        repeat: entry.repeat,
        episode: nextAttempt(episodeId(entry.rollout_id, entry.attempt)),
        restored: true,
        lost: 0,
      };
      this.#queue.push(pending);
      this.#claimed.add(entry.rollout_id);
      this.#restoredWaiting.set(entry.rollout_id, pending);
      this.#forget.add(entry.rollout_id);
    }
    this.#restoredCount = entries.length;
    this.#emit({ type: "restored", checkpointId: manifest.checkpoint_id, rows: entries.length });
  }

  async #fenceAtStart(
    fenced: readonly { row: number; repeat: number; episode: EpisodeId }[],
    rows: ReadonlyMap<number, TaskRow>,
  ): Promise<void> {
    if (this.#participants !== null) {
      await this.#retireEverywhere(fenced.map((entry) => entry.episode));
    }
    for (const entry of fenced) {
      this.#queue.push({
        row: this.#keptRow(rows, entry.row),
        repeat: entry.repeat,
        episode: nextAttempt(entry.episode),
        restored: false,
        lost: 0,
      });
      this.#claimed.add(entry.episode.rollout_id);
      this.#forget.add(entry.episode.rollout_id);
    }
    this.#fencedCount += fenced.length;
    this.#emit({ type: "fenced", rows: fenced.length });
  }

  #keptRow(rows: ReadonlyMap<number, TaskRow>, index: number): TaskRow {
    const row = rows.get(index);
    if (row === undefined) {
      throw new CollectError(
        `the run sent row ${index}, which the input does not have (${this.#options.input})`,
        "resume with the input the run started with",
      );
    }
    return row;
  }

  /** Retires `episodes` everywhere, in batches; waits for a running checkpoint first. */
  async #retireEverywhere(episodes: readonly EpisodeId[]): Promise<void> {
    const participants = this.#participants as Participants;
    await this.#checkpointLock.runExclusive(async () => {
      for (let i = 0; i < episodes.length; i += CONTROL_BATCH) {
        await retire(
          participants,
          this.#controlId("retire"),
          episodes.slice(i, i + CONTROL_BATCH),
          this.#deadline(),
        );
      }
    });
  }

  #deadline(): number {
    return (Date.now() + this.#stepMs) / 1000;
  }

  #controlId(what: string): string {
    return `${this.#runId}-s${this.#session}-${what}-${randomBytes(3).toString("hex")}`;
  }

  #emit(event: CollectEvent): void {
    try {
      this.#options.onEvent?.(event);
    } catch (error) {
      this.#log.warn({ err: error }, "an onEvent listener threw");
    }
  }

  // ---- dispatch ----------------------------------------------------------------------------

  async #run(): Promise<CollectSummary> {
    const every = this.#options.checkpointEveryMs;
    if (every !== undefined && every > 0 && this.#dir !== null) {
      this.#timer = setInterval(() => {
        if (this.#inFlight.size > 0 && !this.#checkpointLock.locked && !this.#stopping) {
          void this.checkpoint();
        }
      }, every);
    }
    try {
      const workers = Array.from({ length: this.#concurrency }, () => this.#worker());
      await Promise.all(workers);
      await this.#fencer?.idle();
      // Failures held back by the watch that never made a streak are ordinary failure rows.
      if (this.#failing === null) await this.#write(this.#watch.drain());
      if (!this.#stopping) await this.#forgetEverything();
    } finally {
      if (this.#timer !== null) clearInterval(this.#timer);
      await this.#checkpointLock.runExclusive(() => undefined);
      // Nothing is left to checkpoint: a participant still silent resumes at its lease expiry.
      this.#reachAbort.abort();
      await this.#reaching;
      await this.#closeFiles();
    }
    return {
      ...this.progress(),
      status: this.#failing !== null ? "failing" : this.#stopping ? "stopped" : "complete",
      failureStreak: this.#failing,
      output: this.#options.output,
      checkpointDir: this.#dir?.dir ?? null,
      restored: this.#restoredCount,
      fenced: this.#fencedCount,
      stopCheckpoint: this.#stopCheckpoint,
    };
  }

  async #worker(): Promise<void> {
    for (;;) {
      while (this.#paused && !this.#stopping) await this.#resumed.promise;
      if (this.#stopping) return;
      const pending = await this.#next();
      if (pending === null) return;
      if (this.#paused || this.#stopping) {
        // A checkpoint began while the row was fetched: it waits at the front.
        this.#queue.unshift(pending);
        continue;
      }
      await this.#send(pending);
    }
  }

  /** The next rollout to send, or null once every rollout has ended (or the run stops). */
  async #next(): Promise<Pending | null> {
    for (;;) {
      if (this.#stopping) return null;
      const queued = this.#queue.shift();
      if (queued !== undefined) return queued;
      if (!this.#sourceDone) {
        if (this.#pulling !== null) {
          // One pull at a time: wait for the other worker's, then look again.
          await this.#pulling;
          continue;
        }
        this.#pulling = this.#pull();
        try {
          const pulled = await this.#pulling;
          if (pulled !== null) return pulled;
        } finally {
          this.#pulling = null;
        }
        continue;
      }
      if (this.#inFlight.size === 0 && (this.#fencer?.size ?? 0) === 0) return null;
      await this.#changed.promise;
    }
  }

  /** The next rollout from the input not ended, restored or fenced already; null at its end. */
  async #pull(): Promise<Pending | null> {
    const source = this.#source as AsyncGenerator<TaskRow>;
    for (;;) {
      if (this.#sourceRow === null || this.#sourceRepeat >= this.#repeats) {
        const next = await source.next();
        if (next.done === true) {
          this.#sourceDone = true;
          this.#wake();
          return null;
        }
        this.#sourceRow = next.value;
        this.#sourceRepeat = 0;
      }
      const row = this.#sourceRow;
      const repeat = this.#sourceRepeat++;
      const rolloutId = rowRolloutId(this.#runId, row.index, repeat);
      // The input is read once, in order: only rows queued at the start can come up again.
      if (this.#output.has(rolloutId) || this.#claimed.has(rolloutId)) continue;
      return { row, repeat, episode: episodeId(rolloutId, 0), restored: false, lost: 0 };
    }
  }

  #wake(): void {
    const changed = this.#changed;
    this.#changed = deferred();
    changed.resolve();
  }

  async #send(pending: Pending): Promise<void> {
    const rolloutId = pending.episode.rollout_id;
    const startedAt = Date.now();
    // In flight from here: a checkpoint that starts now names it in its scope.
    this.#inFlight.set(rolloutId, { ...pending, startedAt });
    this.#restoredWaiting.delete(rolloutId);
    const environment = pending.row.environment ?? this.#defaultEnvironment;
    let reply: unknown;
    let error: unknown;
    // Durable before the request leaves: a resumed run fences whatever the log names. A failed
    // write ends the run (nothing unlogged is ever sent).
    await this.#dispatch?.record(pending.episode);
    try {
      reply = await this.#options.client.post(
        environment,
        "/run",
        { episode_id: pending.episode, task: pending.row.task },
        {
          signal: this.#abort.signal,
          ...(this.#options.runTimeoutMs === undefined
            ? {}
            : { timeoutMs: this.#options.runTimeoutMs }),
        },
      );
    } catch (caught) {
      error = caught ?? new Error("the call failed");
    }
    if (this.#abort.signal.aborted) return; // stopped: the next run fences it
    const outcome = runOutcome(reply, error);
    let again: Pending | null = null;
    try {
      switch (outcome.kind) {
        case "replied":
          await this.#end(pending, environment, startedAt, outcome.result, outcome.failure);
          break;
        case "not_admitted":
          // Nothing ran: the same attempt goes again once dispatch is open (a checkpoint of
          // ours closed admission), after a short back-off otherwise (someone else's did).
          again = pending;
          if (!this.#paused) await pause(250, this.#abort.signal);
          break;
        case "no_reply":
          again = await this.#lost(pending, environment, startedAt, outcome.message);
          break;
      }
    } finally {
      // Out of flight before it is queued again: another worker may take it at once.
      this.#inFlight.delete(rolloutId);
      if (again !== null) {
        this.#queue.unshift(again);
        if (again.restored) this.#restoredWaiting.set(rolloutId, again);
      }
      this.#wake();
    }
  }

  async #end(
    pending: Pending,
    environment: string,
    startedAt: number,
    result: unknown,
    failure: RowFailure | null,
  ): Promise<void> {
    // After a failure stop, a late failure is left to the resume like the streak's own rows.
    if (this.#failing !== null && failure !== null) return;
    const verdict = this.#watch.ended(
      rolloutRow(pending.episode, {
        row: pending.row.index,
        repeat: pending.repeat,
        taskId: pending.row.task.task_id,
        environment,
        startedAt,
        result,
        failure,
      }),
    );
    if (verdict.streak !== null && this.#failing === null) this.#stopFailing(verdict.streak);
    await this.#write(verdict.write);
  }

  async #write(rows: readonly RolloutRow[]): Promise<void> {
    const written = await Promise.all(rows.map(async (row) => await this.#output.write(row)));
    this.#endedThisSession += written.filter(Boolean).length;
  }

  /**
   * Rollouts keep failing the same way: stop at once, without a checkpoint (the deployment may
   * be what fails). Rows in flight are abandoned to the next `--resume`, which fences them, as
   * it does the streak's rollouts, which get no output row.
   */
  #stopFailing(streak: FailureStreak): void {
    this.#failing = streak;
    this.#log.info({ streak }, "rollouts keep failing the same way; the run stops");
    this.#stopping = true;
    this.#abort.abort(new Error("the collection stopped: rollouts keep failing the same way"));
    this.#resumed.resolve();
    this.#wake();
    this.#fencer?.stop();
  }

  /**
   * A `/run` got no reply: the attempt is fenced (retired everywhere, in the background) before
   * the row goes again; without participants it goes again at once. Returns what to send now.
   */
  async #lost(
    pending: Pending,
    environment: string,
    startedAt: number,
    message: string,
  ): Promise<Pending | null> {
    const lost: Pending = { ...pending, lost: pending.lost + 1, restored: false };
    this.#log.warn({ episode: pending.episode, message }, "a /run got no reply");
    if (this.#fencer !== null) {
      this.#fencer.add(lost.episode, lost);
      return null;
    }
    if (lost.lost >= this.#maxAttempts) {
      await this.#end(lost, environment, startedAt, null, noReply(message, lost.lost));
      return null;
    }
    return { ...lost, episode: nextAttempt(lost.episode) };
  }

  /** A fence settled: the rollout goes again as its next attempt, or ends out of attempts. */
  async #afterFence(pending: Pending, fenced: boolean): Promise<void> {
    this.#forget.add(pending.episode.rollout_id);
    this.#fencedCount++;
    const environment = pending.row.environment ?? this.#defaultEnvironment;
    if (!fenced || pending.lost >= this.#maxAttempts) {
      const why = fenced
        ? `no reply in ${pending.lost} attempt(s)`
        : "no reply, and retiring the attempt failed, so it was not sent again";
      await this.#end(pending, environment, Date.now(), null, noReply(why, pending.lost));
    } else {
      this.#queue.unshift({ ...pending, episode: nextAttempt(pending.episode) });
    }
    this.#wake();
  }

  async #forgetEverything(): Promise<void> {
    if (this.#participants === null || this.#forget.size === 0) return;
    const ids = [...this.#forget].sort();
    try {
      await this.#checkpointLock.runExclusive(async () => {
        for (let i = 0; i < ids.length; i += CONTROL_BATCH) {
          await forget(
            this.#participants as Participants,
            this.#controlId("forget"),
            ids.slice(i, i + CONTROL_BATCH),
            this.#deadline(),
          );
        }
      });
    } catch (error) {
      this.#log.warn({ err: error }, "forgetting the run's retired rollouts failed");
    }
  }

  async #closeFiles(): Promise<void> {
    await this.#output?.close().catch(() => undefined);
    await this.#dispatch?.close().catch(() => undefined);
    await this.#source?.return(undefined).catch(() => undefined);
  }

  // ---- checkpoints -------------------------------------------------------------------------

  /**
   * Checkpoints the run with its rows in flight and continues: pauses dispatch, prepares,
   * commits the rows in flight and the restored rows not yet sent, publishes, resumes. A prepare
   * not ready by its deadline publishes nothing (`missed`) and the run goes on.
   */
  async checkpoint(): Promise<CheckpointOutcome> {
    return await this.#checkpoint(false);
  }

  /**
   * Stops the run: checkpoints it (the participants park what they exported and are not
   * resumed), then ends {@link done} with status `stopped`; rows in flight are abandoned to the
   * next `--resume`, which restores or fences them. Safe to call more than once.
   */
  async stop(): Promise<CheckpointOutcome> {
    if (this.#stopping) {
      return { status: "unavailable", reason: "the run is already stopping" };
    }
    const outcome = await this.#checkpoint(true);
    this.#stopCheckpoint = outcome.status === "published";
    this.#stopping = true;
    this.#abort.abort(new Error("the collection stopped"));
    this.#resumed.resolve();
    this.#wake();
    this.#fencer?.stop();
    return outcome;
  }

  async #checkpoint(stop: boolean): Promise<CheckpointOutcome> {
    const participants = this.#participants;
    const dir = this.#dir;
    if (participants === null || dir === null) {
      return { status: "unavailable", reason: "no --checkpoint-dir" };
    }
    if (this.#stopping) return { status: "unavailable", reason: "the run is stopping" };
    if (this.#unanswered.size > 0) {
      return { status: "unavailable", reason: this.#unansweredReason() };
    }
    return await this.#checkpointLock.runExclusive(async () => {
      const id = this.#controlId(`c${++this.#checkpointSeq}`);
      return await inSpan(
        "gym.collect.checkpoint",
        { [ATTR.runId]: this.#runId, [ATTR.checkpointId]: id },
        async (span) => {
          const outcome = await this.#checkpointLocked(id, stop, participants, dir);
          span.setAttribute("nemo.gym.collect.outcome", outcome.status);
          return outcome;
        },
      );
    });
  }

  async #checkpointLocked(
    id: string,
    stop: boolean,
    participants: Participants,
    dir: CollectionDir,
  ): Promise<CheckpointOutcome> {
    {
      const started = performance.now();
      this.#paused = true;
      this.#resumed = deferred();
      let outcome: CheckpointOutcome;
      let published = false;
      let failure: unknown = null;
      // Taken with dispatch paused: every row sent from now on waits for the resume.
      const rows = [
        ...new Map(
          [...this.#restoredWaiting.values(), ...this.#inFlight.values()].map((row) => [
            row.episode.rollout_id,
            row,
          ]),
        ).values(),
      ];
      try {
        const prepared = await prepare(participants, id, this.#deadline());
        if (!prepared.prepared) {
          outcome = {
            status: "missed",
            checkpointId: id,
            blockers: prepared.blockers(),
            pauseMs: 0,
          };
        } else {
          const scope = prepared.continued(rows.map((row) => row.episode));
          const inScope = new Set(scope.map((episode) => episode.rollout_id));
          const replies = await commit(participants, {
            checkpointId: id,
            checkpointDir: dir.checkpointDir(id),
            episodeIds: scope,
            deadlineTs: this.#deadline(),
            ...(stop ? { stop: true } : {}),
          });
          // Published only if this machine sees what every participant wrote from its own.
          await checkCommitShared(this.#options.client.deployment, dir.checkpointDir(id), replies);
          const entry = (row: Pending): RowEpisode => ({
            rollout_id: row.episode.rollout_id,
            attempt: row.episode.attempt,
            row: row.row.index,
            repeat: row.repeat,
          });
          const manifest: CollectionManifest = {
            format: 1,
            run_id: this.#runId,
            session: this.#session,
            checkpoint_id: id,
            created_at: new Date().toISOString(),
            continued: rows.filter((row) => inScope.has(row.episode.rollout_id)).map(entry),
            restarted: rows.filter((row) => !inScope.has(row.episode.rollout_id)).map(entry),
            writers: writersOf(replies),
          };
          await dir.publish(manifest);
          published = true;
          outcome = {
            status: "published",
            checkpointId: id,
            continued: manifest.continued.length,
            restarted: manifest.restarted.length,
            pauseMs: 0,
          };
        }
      } catch (error) {
        this.#log.warn({ err: error }, "the checkpoint failed");
        outcome = {
          status: "failed",
          checkpointId: id,
          error: (error as Error).message,
          pauseMs: 0,
        };
        failure = error;
      }
      if (!(stop && published)) await this.#resumeAfter(participants, id, failure);
      outcome = { ...outcome, pauseMs: performance.now() - started };
      this.#count(outcome);
      if (!stop) {
        this.#paused = false;
        this.#resumed.resolve();
      }
      this.#emit({ type: "checkpoint", outcome });
      return outcome;
    }
  }

  /**
   * Resumes checkpoint `id` everywhere after it ended. A participant that let the failed step's
   * deadline pass without a word is not waited for again here (its host is down or frozen: the
   * pause would last another step); it and any that the resume cannot reach are resumed in the
   * background until they answer ({@link #reach}), so a host that comes back does not keep the
   * checkpoint's admission closed until its lease expires.
   */
  async #resumeAfter(participants: Participants, id: string, failure: unknown): Promise<void> {
    const silent = new Set<string>();
    if (failure instanceof UnreachableParticipantsError) {
      for (const [name, where] of Object.entries(failure.unreachable)) {
        if (where.reason === "timeout") silent.add(name);
      }
    }
    const answering = participants.members.filter((member) => !silent.has(member.name));
    try {
      if (answering.length > 0) {
        await resume({ ...participants, members: answering }, id, this.#deadline());
      }
    } catch (error) {
      this.#log.warn({ err: error }, "resuming after the checkpoint failed");
      if (error instanceof UnreachableParticipantsError) {
        for (const name of Object.keys(error.unreachable)) silent.add(name);
      }
      // A participant that refused the resume answers: it resumes on its own at lease expiry.
    }
    for (const name of silent) {
      const ids = this.#unanswered.get(name) ?? new Set<string>();
      ids.add(id);
      this.#unanswered.set(name, ids);
    }
    if (this.#unanswered.size > 0) this.#reaching ??= this.#reach(participants);
  }

  /**
   * Resumes the checkpoints each silent participant missed, with a growing back-off, until it
   * answers (any reply: a refusal says the host is back too) or the run ends.
   */
  async #reach(participants: Participants): Promise<void> {
    let backoffMs = 500;
    try {
      while (this.#unanswered.size > 0 && !this.#reachAbort.signal.aborted) {
        const back: string[] = [];
        await Promise.all(
          [...this.#unanswered].map(async ([name, ids]) => {
            const member = participants.members.filter((m) => m.name === name);
            for (const id of [...ids]) {
              try {
                await resume({ ...participants, members: member }, id, this.#deadline());
              } catch (error) {
                if (!answered(error)) return;
                this.#log.warn({ err: error, server: name }, "a late resume was refused");
              }
              ids.delete(id);
            }
            this.#unanswered.delete(name);
            back.push(name);
          }),
        );
        if (back.length > 0) {
          this.#log.info({ servers: back }, "participants answer again");
          this.#emit({ type: "reachable", servers: back.sort() });
          backoffMs = 500;
        }
        if (this.#unanswered.size === 0) break;
        await pause(backoffMs, this.#reachAbort.signal);
        backoffMs = Math.min(backoffMs * 2, 10_000);
      }
    } finally {
      this.#reaching = null;
    }
  }

  /** Why no checkpoint is taken while participants are silent, naming them and their hosts. */
  #unansweredReason(): string {
    const deployment = this.#options.client.deployment;
    const names = [...this.#unanswered.keys()].sort();
    const shown = names.map((name) => locatedName(name, locateServer(deployment, name)));
    const hosts = [...new Set(names.map((name) => locateServer(deployment, name).host))].sort();
    return (
      `${shown.join(", ")} did not answer the last checkpoint (is host ${hosts.join(", ")} down or frozen?); ` +
      "none is taken until it answers, and the last published one stays"
    );
  }

  #count(outcome: CheckpointOutcome): void {
    if (outcome.status === "published") this.#counts.published++;
    else if (outcome.status === "missed") this.#counts.missed++;
    else if (outcome.status === "failed") this.#counts.failed++;
    else return;
    this.#lastCheckpoint = { ...outcome, at: new Date().toISOString() };
  }

  // ---- progress ----------------------------------------------------------------------------

  /** Where the run stands now. */
  progress(): CollectProgress {
    const totals = this.#output.totals;
    // Failure rows the watch holds back have ended, though they are not written yet.
    const failed = totals.failed + this.#watch.held;
    const ended = totals.finished + failed;
    const elapsedSeconds = (performance.now() - this.#startedAt) / 1000;
    const rate = elapsedSeconds > 0 ? this.#endedThisSession / elapsedSeconds : 0;
    const left = Math.max(0, this.#total - ended);
    return {
      runId: this.#runId,
      session: this.#session,
      total: this.#total,
      ended,
      finished: totals.finished,
      failed,
      inFlight: this.#inFlight.size,
      fencing: this.#fencer?.size ?? 0,
      rate,
      etaSeconds: rate > 0 ? left / rate : left === 0 ? 0 : null,
      meanReward: totals.rewarded > 0 ? totals.rewardSum / totals.rewarded : null,
      checkpoints: { ...this.#counts },
      lastCheckpoint: this.#lastCheckpoint,
      elapsedSeconds,
    };
  }
}

/**
 * What to say when every participant refused to restore checkpoint `id` as one it already
 * resumed: the servers are the processes that took it and kept running after the collector was
 * lost. The contract restores only into fresh processes (a policy model that has served calls
 * refuses any restore), so the rows start over; restarting the servers first would continue them.
 */
function outlivedCollector(error: unknown, id: string): string | null {
  if (!(error instanceof CoordinationError)) return null;
  const codes = Object.values(error.codes());
  const failed = Object.keys(error.failures).length;
  if (failed === 0 || codes.length !== failed || codes.some((c) => c !== "stale_checkpoint")) {
    return null;
  }
  return (
    `the servers are the processes that took checkpoint ${id} and resumed it (every one refused ` +
    "409 stale_checkpoint): they outlived the previous collector, and a restore needs freshly " +
    "started servers (restart them before --resume to continue such rows from their boundaries)"
  );
}

/** Whether a participant's resume failed because it answered (refused), not for silence. */
function answered(error: unknown): boolean {
  if (!(error instanceof UnreachableParticipantsError)) return true;
  return Object.keys(error.unreachable).length === 0;
}

function noReply(message: string, attempts: number): RowFailure {
  return {
    kind: "no_reply",
    code: null,
    status: null,
    message: `${message} (${attempts} attempt(s) without a reply)`,
  };
}

/** The names of the deployment's environment servers, sorted. */
function environmentServers(
  servers: Readonly<Record<string, { readonly kind: string }>>,
): string[] {
  return Object.keys(servers)
    .filter((name) => servers[name]?.kind === "environment")
    .sort();
}

/** A server name that is not an environment server: what it is, and what the deployment has. */
function unknownEnvironment(
  what: string,
  name: string,
  servers: Readonly<Record<string, { readonly kind: string }>>,
  environments: readonly string[],
  todo: string,
): CollectError {
  const kind = servers[name]?.kind;
  const problem =
    kind === undefined
      ? `the deployment has no server ${JSON.stringify(name)}${didYouMean(name, environments)}`
      : `${JSON.stringify(name)} is a ${kind} server, not an environment server`;
  return new CollectError(
    `${what}: ${problem}`,
    environments.length === 0
      ? "the deployment has no environment server: add one to the deployment file"
      : `its environment servers: ${environments.join(", ")}; ${todo}`,
  );
}

function nonNegative(value: number, name: string): number {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new CollectError(`${name} must be a whole number (0 or more), got ${value}`);
  }
  return value;
}

function positive(value: number, name: string): number {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new CollectError(`${name} must be a positive integer, got ${value}`);
  }
  return value;
}

/** Waits `ms` unless `signal` aborts first (a back-off, never a synchronisation). */
async function pause(ms: number, signal: AbortSignal): Promise<void> {
  await new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });
}

/** Runs a collection to its end (see {@link Collection}). */
export async function collect(options: CollectOptions): Promise<CollectSummary> {
  return await (
    await Collection.start(options)
  ).done;
}
