import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import { pino, type Logger } from "pino";
import type { z } from "zod";
import { CheckpointError } from "../errors.js";
import { parseBody, parseEpisodeListBody } from "../wire/parse.js";
import { nextAttempt, sortedCaptureKeys } from "../identity/episode-id.js";
import { captureKeySet } from "../identity/scope-keys.js";
import type { StoredRecord } from "../store/records-reader.js";
import { awaitUntil, deadlineSignal, isPast } from "../util/deadline.js";
import { failpoint } from "../util/failpoints.js";
import type { ParticipantGauges } from "../telemetry/metrics.js";
import { inSpan } from "../telemetry/spans.js";
import { Mutex } from "../util/mutex.js";
import {
  CheckpointRequestSchema,
  CommitRequestSchema,
  ForgetRequestSchema,
  PrepareRequestSchema,
  RestoreRequestSchema,
  RetireRequestSchema,
  type CheckpointRequest,
  type Operation,
  type CommitRequest,
  type ForgetReply,
  type ForgetRequest,
  type Phase,
  type PrepareReply,
  type PrepareRequest,
  type RenewReply,
  type RestoreRequest,
  type ResumeReply,
  type RetireReply,
  type RetireRequest,
  type StatusReply,
} from "../wire/control.js";
import type { CommitReply, RecordBase, RestoreReply } from "../wire/storage.js";
import { CheckpointLease } from "./checkpoint-lease.js";
import { CommitWrites, type CommitWrite } from "./commit-write.js";
import { CompletedReplies, replyArgs } from "./completed-replies.js";
import { inOperationSpan, recordCommit, recordRestore } from "./operation-telemetry.js";
import type { Participant } from "./participant.js";
import { waitForReadiness } from "./readiness-wait.js";
import { refuseRetiredReplacements, typedRestoreFailure } from "./restore-refusals.js";
import { RestoreInstall } from "./restore-install.js";
import { readForRestore, recordsFileBytes } from "./restore-read.js";
import { ResumedIds } from "./resumed-ids.js";
import type { SpanningParticipant } from "./spanning-participant.js";
import { stopEachRollout } from "./rollout-stops.js";

/** Rollouts dropped between two turns of the event loop by a large forget. */
export const FORGET_SLICE = 2048;

/** Options of a {@link ControlPlane}, resolved once at construction. */
export interface ControlPlaneOptions {
  /** The server's configured name; reported as `instance` and used in the storage path. */
  readonly instance: string;
  /** Seconds past a control call's deadline before a quiet participant resumes itself. @default 600 */
  readonly leaseGraceSeconds?: number;
  /** Where transitions, refusals and lease expiries are logged. @default a silent logger */
  readonly logger?: Logger;
  /**
   * Set when the participant spans several processes (a multi-worker server's coordinator,
   * built by the workers adapter): what the control plane then also asks of it.
   * @default none (one process)
   */
  readonly spanning?: SpanningParticipant | null;
}

function swallow(promise: Promise<unknown>): void {
  promise.catch(() => undefined);
}

/**
 * The checkpoint control plane of one participant (see docs/control-plane.md): the phase machine
 * and fencing, driving the lease, the stored replies, the commit's write and the restore's read
 * and install (each in a module of its own beside this one). Free of HTTP: the express router
 * hands it `(operation, body)` through {@link dispatch}.
 *
 * ## Ordering
 * Transitions are serialized by one FIFO mutex, never held across the readiness wait of a
 * prepare (so a resume can run meanwhile). Export, write and cleanup run as background tasks a
 * retried commit joins; their waits are bounded by each call's deadline.
 *
 * @see docs/control-plane.md
 */
export class ControlPlane<R extends RecordBase = RecordBase> {
  readonly participant: Participant<R>;
  readonly instance: string;
  readonly leaseGraceSeconds: number;
  readonly #log: Logger;
  readonly #spanning: SpanningParticipant | null;
  readonly #lock = new Mutex();
  readonly #lease: CheckpointLease;

  #phase: Phase = "idle";
  #checkpointId: string | null = null;
  readonly #resumedIds = new ResumedIds();
  readonly #replies = new CompletedReplies();
  readonly #writes: CommitWrites<R>;
  readonly #installs: RestoreInstall;

  constructor(participant: Participant<R>, options: ControlPlaneOptions) {
    this.participant = participant;
    this.instance = options.instance;
    this.leaseGraceSeconds = options.leaseGraceSeconds ?? 600;
    this.#spanning = options.spanning ?? null;
    if (!(this.leaseGraceSeconds > 0)) {
      throw new RangeError(`leaseGraceSeconds must be > 0, got ${this.leaseGraceSeconds}`);
    }
    this.#log = options.logger ?? pino({ level: "silent" });
    this.#writes = new CommitWrites({
      participant,
      instance: this.instance,
      spanning: this.#spanning,
      log: this.#log,
    });
    this.#installs = new RestoreInstall({
      lock: this.#lock,
      log: this.#log,
      openAdmission: () => participant.openAdmission(),
      idle: () => this.#phase === "idle" && this.#checkpointId === null,
    });
    this.#lease = new CheckpointLease({
      graceSeconds: this.leaseGraceSeconds,
      lock: this.#lock,
      log: this.#log,
      kind: participant.kind,
      activeCheckpoint: () => this.#checkpointId,
      resume: async (id, deadlineTs) => await this.#reopen(id, deadlineTs),
    });
  }

  /** The current phase. */
  get phase(): Phase {
    return this.#phase;
  }

  /** Whether a restore's install is still running (it may outlive the restore's deadline). */
  get installing(): boolean {
    return this.#installs.running;
  }

  /** What the live gauges of `server` read from this control plane and its participant. */
  gauges(server: string): ParticipantGauges {
    const participant = this.participant;
    return {
      server,
      kind: participant.kind,
      phase: () => this.#phase,
      admissionOpen: () => this.#phase === "idle" && !this.#installs.running,
      blockers: () => participant.readiness().blocker_count,
      counts: () => participant.readiness().counts,
    };
  }

  /** The active checkpoint ID, or null. */
  get checkpointId(): string | null {
    return this.#checkpointId;
  }

  /** When the lease expires (Unix seconds), or null. */
  get leaseExpiresAt(): number | null {
    return this.#lease.expiresAt;
  }

  /**
   * Parses `body` with the operation's schema (422 `invalid_request` naming each problem) and
   * runs the operation. The single entry point of every control route.
   */
  async dispatch(operation: Operation, body: unknown): Promise<unknown> {
    if (operation === "status" || operation === "renew") return await this.#run(operation, body);
    // Every other operation gets a span and a duration, whatever its outcome.
    return await inOperationSpan(
      operation,
      body,
      { kind: this.participant.kind, instance: this.instance },
      async () => await this.#run(operation, body),
      () => this.#phase,
    );
  }

  async #run(operation: Operation, body: unknown): Promise<unknown> {
    switch (operation) {
      case "status":
        await this.#spanning?.settled();
        return this.status();
      case "prepare":
        return await this.prepare(parseBody(PrepareRequestSchema, body, operation));
      case "renew":
        return await this.renew(parseBody(CheckpointRequestSchema, body, operation));
      case "retire":
        return await this.retire(parseEpisodeListBody(RetireRequestSchema, body, operation));
      case "forget":
        return await this.forget(parseBody(ForgetRequestSchema, body, operation));
      case "commit":
        return await this.commit(parseEpisodeListBody(CommitRequestSchema, body, operation));
      case "restore":
        return await this.restore(parseEpisodeListBody(RestoreRequestSchema, body, operation));
      case "resume":
        return await this.resume(parseBody(CheckpointRequestSchema, body, operation));
      default: {
        const unreachable: never = operation;
        throw new Error(`unknown operation ${String(unreachable)}`);
      }
    }
  }

  /** The participant's state; no fencing, never renews the lease. */
  status(): StatusReply {
    return {
      ...this.participant.statusExtra(),
      kind: this.participant.kind,
      instance: this.instance,
      phase: this.#phase,
      checkpoint_id: this.#checkpointId,
      lease_expires_at: this.#lease.expiresAt,
      retired_rollouts: this.participant.retired.size,
      report: this.participant.readiness(),
    };
  }

  /** Closes admission and waits (until the deadline) for every execution to reach a boundary. */
  async prepare(request: PrepareRequest): Promise<PrepareReply> {
    const id = request.checkpoint_id;
    const stored = this.#replies.get(id, "prepare", "");
    if (stored !== undefined) return stored as PrepareReply;
    const replay = await this.#lock.runExclusive(async () => {
      const again = this.#replies.get(id, "prepare", "");
      if (again !== undefined) return again as PrepareReply;
      this.#fence(id, ["idle", "preparing"], "prepare");
      if (this.#phase === "idle") {
        this.#spanning?.checkMembership("prepare");
        this.#checkpointId = id;
        this.#phase = "preparing";
        this.#lease.renew(request.deadline_ts);
        try {
          await this.participant.closeAdmission(request);
        } catch (error) {
          await this.#abandonPrepare();
          throw error;
        }
        this.#log.info({ checkpointId: id }, "admission closed for prepare");
      } else {
        this.#lease.renew(request.deadline_ts);
      }
      return null;
    });
    if (replay !== null) return replay;
    try {
      await inSpan("gym.checkpoint.wait_ready", {}, async () => {
        await waitForReadiness(this.participant, {
          deadlineTs: request.deadline_ts,
          stillPreparing: () => this.#checkpointId === id && this.#phase === "preparing",
          checkMembership: () => this.#spanning?.checkMembership("prepare"),
        });
      });
    } catch (error) {
      await this.#lock.runExclusive(async () => {
        if (this.#checkpointId === id && this.#phase === "preparing") await this.#abandonPrepare();
      });
      throw error;
    }
    return await this.#lock.runExclusive(() => {
      const report = this.participant.readiness();
      if (this.#checkpointId !== id || this.#phase !== "preparing") {
        return { phase: this.#phase, report };
      }
      if (!report.ready) return { phase: "preparing", report };
      this.#phase = "prepared";
      const reply: PrepareReply = { phase: "prepared", report };
      this.#replies.set(id, "prepare", "", reply);
      return reply;
    });
  }

  /** Extends the lease to `deadline_ts + lease_grace_seconds` (never shrinks it). */
  async renew(request: CheckpointRequest): Promise<RenewReply> {
    return await this.#lock.runExclusive(() => {
      this.#fence(
        request.checkpoint_id,
        ["preparing", "prepared", "committed", "restored"],
        "renew",
      );
      this.#lease.renew(request.deadline_ts);
      return { lease_expires_at: this.#lease.expiresAt as number };
    });
  }

  /** Exports once, writes records then manifest, frees unscoped restored state. */
  async commit(request: CommitRequest): Promise<CommitReply> {
    const id = request.checkpoint_id;
    const args = replyArgs(request.checkpoint_dir, request.episode_ids);
    const stored = this.#replies.get(id, "commit", args);
    if (stored !== undefined) return stored as CommitReply;
    const joined = await this.#lock.runExclusive(
      (): { reply: CommitReply } | { write: CommitWrite<R> } => {
        const again = this.#replies.get(id, "commit", args);
        if (again !== undefined) return { reply: again as CommitReply };
        this.#fence(id, ["prepared"], "commit");
        this.#lease.renew(request.deadline_ts);
        return { write: this.#writes.join(request) };
      },
    );
    if ("reply" in joined) return joined.reply;
    const write = joined.write;
    const { records, manifest, startedAt, exportedAt, writtenAt } = await this.#writes.complete(
      write,
      request,
    );
    return await this.#lock.runExclusive(() => {
      const again = this.#replies.get(id, "commit", args);
      if (again !== undefined) return again as CommitReply;
      if (this.#resumedIds.has(id)) throw CheckpointError.stale(id);
      this.#fence(id, ["prepared", "committed"], "commit");
      const reply: CommitReply = {
        ...this.participant.commitReply(records),
        phase: "committed",
        manifest,
        episode_ids: sortedCaptureKeys(records.map((record) => record.episode_id)),
      };
      this.#phase = "committed";
      this.#replies.set(id, "commit", args, reply);
      const bytes = write.writer.bytesWritten;
      recordCommit(this.participant.kind, {
        records: records.length,
        bytes,
        startedAt,
        exportedAt,
        writtenAt,
      });
      this.#log.info(
        {
          checkpointId: id,
          records: records.length,
          exportMs: Math.round(exportedAt - startedAt),
          writeMs: Math.round(writtenAt - exportedAt),
        },
        "checkpoint committed",
      );
      return reply;
    });
  }

  /** Installs the checkpointed state of `episode_ids` as their next attempts (fresh process). */
  async restore(request: RestoreRequest): Promise<RestoreReply> {
    const id = request.checkpoint_id;
    const args = replyArgs(request.checkpoint_dir, request.episode_ids);
    const stored = this.#replies.get(id, "restore", args);
    if (stored !== undefined) return stored as RestoreReply;
    return await this.#lock.runExclusive(async () => {
      const again = this.#replies.get(id, "restore", args);
      if (again !== undefined) return again as RestoreReply;
      this.#fence(id, ["idle"], "restore");
      this.#spanning?.checkMembership("restore");
      refuseRetiredReplacements(this.participant.retired, request.episode_ids);
      // The replaced attempts are refused everywhere from now on, before any bounded work.
      try {
        failpoint("restore.fence");
        await this.participant.markRetired(request.episode_ids);
      } catch (error) {
        throw typedRestoreFailure(error, "fencing the replaced attempts");
      }
      const deadline = request.deadline_ts;
      const startedAt = performance.now();

      const location = {
        checkpointDir: request.checkpoint_dir,
        kind: this.participant.kind,
        instance: this.instance,
        scope: captureKeySet(request.episode_ids),
      };
      // A coordinator reads the lines as stored: its workers validate them.
      const spanning = this.#spanning;
      const installStored = spanning === null ? null : spanning.installStored.bind(spanning);
      const { manifest, records } = await readForRestore(
        location,
        installStored === null ? (this.participant.recordSchema as z.ZodType<R>) : null,
        deadline,
      );
      const readAt = performance.now();

      // Its outcome is not ours: a failed earlier install must not fail this restore.
      if (this.#installs.running) await this.#installs.settledBy(deadline);

      // This restore takes over only from here: one that failed before closing admission
      // must not cancel the deferred reopen of an earlier failed restore.
      const generation = this.#installs.nextGeneration();
      try {
        await this.participant.closeAdmission(request);
        await this.participant.restoreManifest(manifest);
        failpoint("restore.install");
        const signal = new AbortController().signal;
        const task =
          installStored === null
            ? this.participant.install(records as R[], request.episode_ids, signal)
            : installStored(records as StoredRecord[], request.episode_ids, signal);
        const tracked = this.#installs.track(task);
        const installed = await awaitUntil(tracked, deadline);
        if (!installed.done) throw CheckpointError.deadline("the install");
      } catch (error) {
        await this.#installs.reopenAfterFailure(generation);
        throw typedRestoreFailure(error, "installing the records");
      }

      this.#checkpointId = id;
      this.#phase = "restored";
      this.#lease.renew(deadline);
      const reply: RestoreReply = {
        phase: "restored",
        source_checkpoint_id: manifest.checkpoint_id,
        restored: sortedCaptureKeys(records.map((record) => nextAttempt(record.episode_id))),
      };
      this.#replies.set(id, "restore", args, reply);
      const installedAt = performance.now();
      const bytes = await recordsFileBytes(location, manifest.records_file);
      recordRestore(this.participant.kind, {
        records: records.length,
        bytes,
        startedAt,
        readAt,
        installedAt,
      });
      this.#log.info(
        {
          checkpointId: id,
          restored: reply.restored.length,
          readMs: Math.round(readAt - startedAt),
          installMs: Math.round(performance.now() - readAt),
        },
        "checkpoint restored",
      );
      return reply;
    });
  }

  /** Reopens admission; also the abort of a checkpoint that will not be published. */
  async resume(request: CheckpointRequest): Promise<ResumeReply> {
    const id = request.checkpoint_id;
    if (this.#resumedIds.has(id)) return { phase: "idle", idempotent: true };
    return await this.#lock.runExclusive(async () => {
      if (this.#resumedIds.has(id)) return { phase: "idle", idempotent: true };
      if (this.#phase === "idle" && this.#checkpointId === null) {
        if (this.#installs.reopenPending) {
          // A failed restore's install may still run: admission reopens only after it ends.
          if (this.#installs.running) await this.#installs.settledBy(request.deadline_ts);
          await this.participant.openAdmission();
          this.#installs.admissionReopened();
          this.#resumedIds.remember(id);
          return { phase: "idle", idempotent: false };
        }
        // Remembered so a delayed prepare of an aborted checkpoint is refused as stale.
        this.#resumedIds.remember(id);
        return { phase: "idle", idempotent: true };
      }
      this.#fence(id, ["preparing", "prepared", "committed", "restored"], "resume");
      await this.#reopen(id, request.deadline_ts);
      return { phase: "idle", idempotent: false };
    });
  }

  /** Stops these attempts (and earlier ones) everywhere in this participant; outside checkpoints. */
  async retire(request: RetireRequest): Promise<RetireReply> {
    return await this.#lock.runExclusive(async () => {
      this.#admitOutsideCheckpoint(request, "retire");
      // Raised before any bounded work and kept even if the retire then fails.
      await this.participant.markRetired(request.episode_ids);
      const deadline = request.deadline_ts;
      // Capped and unref'd: a far deadline must not overflow the timer and abort at once.
      // `cutShort` aborts the stops explicitly when the bounded wait gives up, whichever of
      // the two timers fires first.
      const cutShort = new AbortController();
      const { signal, dispose } = deadlineSignal(
        deadline,
        () => CheckpointError.deadline("the retire"),
        cutShort.signal,
      );
      try {
        const work = (async () => {
          if (this.#installs.running) await this.#installs.settled();
          await stopEachRollout(
            request.episode_ids,
            async (episode) => await this.participant.retire(episode, signal),
          );
        })();
        swallow(work);
        const done = await awaitUntil(work, deadline);
        if (!done.done) {
          const error = CheckpointError.deadline("the retire");
          cutShort.abort(error);
          throw error;
        }
      } finally {
        dispose();
        this.participant.notify();
      }
      return { retired_count: request.episode_ids.length };
    });
  }

  /**
   * Drops the retired marks of finished rollouts; outside checkpoints. Bounded by the deadline:
   * a forget that only gets its turn (behind a retire holding the lock) after
   * the deadline, or arrives past it, is 409 `deadline_exceeded` and drops nothing.
   */
  async forget(request: ForgetRequest): Promise<ForgetReply> {
    // Once the caller was told `deadline_exceeded`, the queued work must not drop anything.
    let gaveUp = false;
    const forgotten = await awaitUntil(
      this.#lock.runExclusive(async () => {
        this.#admitOutsideCheckpoint(request, "forget");
        await this.participant.checkForget(request.rollout_ids);
        if (gaveUp || isPast(request.deadline_ts)) throw CheckpointError.deadline("the forget");
        // Checked as a whole above (all or nothing), dropped in slices: a forget of tens of
        // thousands of rollouts lets data routes run between slices. Nothing can make a
        // checked rollout unforgettable meanwhile: its attempts stay refused until dropped.
        const ids = request.rollout_ids;
        for (let start = 0; start < ids.length; start += FORGET_SLICE) {
          if (start > 0) await yieldToEventLoop();
          await this.participant.forget(ids.slice(start, start + FORGET_SLICE));
        }
        this.participant.notify();
        return { forgotten_count: ids.length };
      }),
      request.deadline_ts,
    );
    if (!forgotten.done) {
      gaveUp = true;
      throw CheckpointError.deadline("the forget");
    }
    return forgotten.value;
  }

  /** Stops the lease watcher (server shutdown). The phase is left as it is. */
  close(): void {
    this.#lease.close();
  }

  // ---------------------------------------------------------------- internals

  #fence(id: string, allowed: readonly Phase[], operation: Operation): void {
    if (this.#resumedIds.has(id)) throw CheckpointError.stale(id);
    if (this.#checkpointId !== null && this.#checkpointId !== id) {
      throw CheckpointError.conflict(
        `checkpoint '${this.#checkpointId}' is active; ${operation} of '${id}' refused until it is resumed`,
      );
    }
    if (!allowed.includes(this.#phase)) throw CheckpointError.invalidPhase(operation, this.#phase);
  }

  #admitOutsideCheckpoint(request: CheckpointRequest, operation: Operation): void {
    if (this.#phase !== "idle" && this.#phase !== "restored") {
      throw CheckpointError.invalidPhase(operation, this.#phase);
    }
    if (this.#checkpointId !== null && this.#checkpointId !== request.checkpoint_id) {
      throw CheckpointError.conflict(
        `checkpoint '${this.#checkpointId}' is active; ${operation} must name it`,
      );
    }
    if (this.#phase === "restored") this.#lease.renew(request.deadline_ts);
  }

  /** A prepare that could not close admission (or whose wait threw) leaves no trace. */
  async #abandonPrepare(): Promise<void> {
    try {
      await this.participant.openAdmission();
      this.#installs.admissionReopened();
    } catch (error) {
      this.#log.error({ err: error }, "reopening admission after a failed prepare failed");
    }
    this.#phase = "idle";
    this.#checkpointId = null;
    this.#lease.clear();
  }

  /** Resume's reopen; throws `deadline_exceeded` changing nothing. */
  async #reopen(id: string, deadlineTs: number): Promise<void> {
    await this.#writes.stop(id, deadlineTs);
    await this.participant.openAdmission();
    // Admission is open again: a reopen left pending by an earlier failed restore is done.
    this.#installs.admissionReopened();
    this.#resumedIds.remember(id);
    this.#replies.delete(id);
    this.#phase = "idle";
    this.#checkpointId = null;
    this.#lease.clear();
    this.participant.notify();
    this.#log.info({ checkpointId: id }, "checkpoint resumed");
  }
}
