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
import { episodeId, nextAttempt, type EpisodeId } from "../identity/episode-id.js";
import { pause } from "../util/deadline.js";
import { deferred, type Deferred } from "../util/deferred.js";
import { Mutex } from "../util/mutex.js";
import { ATTR } from "../telemetry/names.js";
import { inSpan } from "../telemetry/spans.js";
import { collectLimits, CollectError, type CollectOptions } from "./collect-options.js";
import type {
  CheckpointOutcome,
  CollectEvent,
  CollectProgress,
  CollectSummary,
} from "./collect-report.js";
import {
  forgetInBatches,
  outlivedCollector,
  recoverOpenCheckpoints,
  restoreCheckpoint,
  retireInBatches,
  takeCheckpoint,
  type CollectionSteps,
} from "./collection-checkpoints.js";
import { CollectionDir, type CollectionManifest, type RowEpisode } from "./collection-dir.js";
import { DispatchLog } from "./dispatch-log.js";
import { checkEnvironments, pickEnvironment } from "./environment-routing.js";
import { FailureWatch, type FailureStreak } from "./failure-streak.js";
import { Fencer } from "./fencer.js";
import { InputRollouts } from "./input-rollouts.js";
import { planResume } from "./resume-plan.js";
import {
  OutputFile,
  rolloutRow,
  runOutcome,
  type RolloutRow,
  type RowFailure,
} from "./rollout-row.js";
import { SilentParticipants } from "./silent-participants.js";
import {
  checkTaskFile,
  readTaskRows,
  scanTaskFile,
  type TaskRow,
  type TaskRowOptions,
} from "./task-rows.js";

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

/** A collection run; {@link Collection.start} opens one, {@link done} is its end. */
export class Collection {
  readonly #options: CollectOptions;
  readonly #log: Logger;
  readonly #dir: CollectionDir | null;
  /** The coordination steps, or null when the deployment does not checkpoint. */
  readonly #steps: CollectionSteps | null;
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
  #source: InputRollouts | null = null;
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
  readonly #checkpointLock = new Mutex();
  /** Participants that did not answer a checkpoint: none is taken while any is silent. */
  readonly #silent: SilentParticipants;
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
    const participants = options.participants;
    this.#steps =
      participants === null
        ? null
        : {
            participants,
            deployment: options.client.deployment,
            deadline: () => this.#deadline(),
          };
    this.#silent = new SilentParticipants({
      deadline: () => this.#deadline(),
      reachable: (servers) => this.#emit({ type: "reachable", servers }),
      logger: this.#log,
    });
    this.#dir =
      options.checkpointDir === undefined ? null : new CollectionDir(options.checkpointDir);
    const limits = collectLimits(options);
    this.#concurrency = limits.concurrency;
    this.#repeats = limits.repeats;
    this.#maxAttempts = limits.maxAttempts;
    this.#maxFailures = limits.maxFailures;
    this.#stepMs = limits.stepTimeoutMs;
    this.#rowOptions = {
      routeField: options.routeField ?? "environment",
      ...(options.taskset === undefined ? {} : { taskset: options.taskset }),
    };
    this.#defaultEnvironment = pickEnvironment(
      options.client.deployment.servers,
      options.environment,
    );
    if (this.#dir !== null && this.#steps === null) {
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
      checkEnvironments(scanned, {
        servers: options.client.deployment.servers,
        defaultEnvironment: this.#defaultEnvironment,
        routeField: this.#rowOptions.routeField,
        input: options.input,
      });
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
      if (this.#steps !== null) {
        const recovered = await recoverOpenCheckpoints(this.#steps, this.#stepMs);
        if (recovered.length > 0) this.#emit({ type: "recovered", checkpointIds: recovered });
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
      this.#source = new InputRollouts({
        rows: readTaskRows(options.input, this.#rowOptions),
        runId,
        repeats: this.#repeats,
        skip: (rolloutId) => this.#output.has(rolloutId) || this.#claimed.has(rolloutId),
      });
    } catch (error) {
      await this.#closeFiles();
      throw error;
    }
  }

  async #restore(
    manifest: CollectionManifest,
    entries: readonly RowEpisode[],
    rows: ReadonlyMap<number, TaskRow>,
  ): Promise<void> {
    const steps = this.#steps as CollectionSteps;
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
        async () => await restoreCheckpoint(steps, dir, manifest, episodes),
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
    if (this.#steps !== null) {
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
    const steps = this.#steps as CollectionSteps;
    await this.#checkpointLock.runExclusive(
      async () => await retireInBatches(steps, () => this.#controlId("retire"), episodes),
    );
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
      await this.#silent.close();
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
      if (!(this.#source as InputRollouts).done) {
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
    const next = await (this.#source as InputRollouts).next();
    if (next === null) {
      this.#wake();
      return null;
    }
    return { ...next, restored: false, lost: 0 };
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
    const steps = this.#steps;
    if (steps === null || this.#forget.size === 0) return;
    const ids = [...this.#forget].sort();
    try {
      await this.#checkpointLock.runExclusive(
        async () => await forgetInBatches(steps, () => this.#controlId("forget"), ids),
      );
    } catch (error) {
      this.#log.warn({ err: error }, "forgetting the run's retired rollouts failed");
    }
  }

  async #closeFiles(): Promise<void> {
    await this.#output?.close().catch(() => undefined);
    await this.#dispatch?.close().catch(() => undefined);
    await this.#source?.close().catch(() => undefined);
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
    const steps = this.#steps;
    const dir = this.#dir;
    if (steps === null || dir === null) {
      return { status: "unavailable", reason: "no --checkpoint-dir" };
    }
    if (this.#stopping) return { status: "unavailable", reason: "the run is stopping" };
    if (this.#silent.size > 0) {
      return {
        status: "unavailable",
        reason: this.#silent.reason(this.#options.client.deployment),
      };
    }
    return await this.#checkpointLock.runExclusive(async () => {
      const id = this.#controlId(`c${++this.#checkpointSeq}`);
      return await inSpan(
        "gym.collect.checkpoint",
        { [ATTR.runId]: this.#runId, [ATTR.checkpointId]: id },
        async (span) => {
          const outcome = await this.#checkpointLocked(id, stop, steps, dir);
          span.setAttribute("nemo.gym.collect.outcome", outcome.status);
          return outcome;
        },
      );
    });
  }

  async #checkpointLocked(
    id: string,
    stop: boolean,
    steps: CollectionSteps,
    dir: CollectionDir,
  ): Promise<CheckpointOutcome> {
    const started = performance.now();
    this.#paused = true;
    this.#resumed = deferred();
    let outcome: CheckpointOutcome;
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
      outcome = await takeCheckpoint(
        steps,
        { dir, runId: this.#runId, session: this.#session },
        id,
        rows,
        stop,
      );
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
    const published = outcome.status === "published";
    if (!(stop && published)) await this.#silent.resumeAfter(steps.participants, id, failure);
    outcome = { ...outcome, pauseMs: performance.now() - started };
    this.#count(outcome);
    if (!stop) {
      this.#paused = false;
      this.#resumed.resolve();
    }
    this.#emit({ type: "checkpoint", outcome });
    return outcome;
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

function noReply(message: string, attempts: number): RowFailure {
  return {
    kind: "no_reply",
    code: null,
    status: null,
    message: `${message} (${attempts} attempt(s) without a reply)`,
  };
}

/** Runs a collection to its end (see {@link Collection}). */
export async function collect(options: CollectOptions): Promise<CollectSummary> {
  return await (
    await Collection.start(options)
  ).done;
}
