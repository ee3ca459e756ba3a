import { hostname } from "node:os";
import type { Logger } from "pino";
import { CheckpointError } from "../errors.js";
import { captureKey, type EpisodeId } from "../identity/episode-id.js";
import { captureKeySet, scopeDigest } from "../identity/scope-keys.js";
import { RecordsWriter, refuseOccupiedDir } from "../store/records-writer.js";
import { awaitUntil } from "../util/deadline.js";
import type { CommitRequest } from "../wire/control.js";
import type { Manifest, RecordBase } from "../wire/storage.js";
import type { Participant } from "./participant.js";
import { stopEachRollout } from "./rollout-stops.js";
import type { SpanningParticipant } from "./spanning-participant.js";

/** The write of one checkpoint: one export, one writer, one cleanup. */
export interface CommitWrite<R extends RecordBase> {
  readonly checkpointId: string;
  readonly dir: string;
  readonly scopeKey: string;
  /** Why the export ended this checkpoint for good, or null. */
  failed: string | null;
  readonly exportAbort: AbortController;
  exportTask: Promise<R[]> | null;
  writer: RecordsWriter;
  writeTask: Promise<Manifest> | null;
  cleanupTask: Promise<void> | null;
  cleanupRunning: boolean;
}

/** What a completed write produced, and when each stretch ended (`performance.now()` values). */
export interface CompletedWrite<R extends RecordBase> {
  /** The records exported (the cut the first commit took). */
  readonly records: R[];
  /** The manifest published. */
  readonly manifest: Manifest;
  readonly startedAt: number;
  readonly exportedAt: number;
  readonly writtenAt: number;
}

/** What {@link CommitWrites} needs: the participant, its instance, and processes to check. */
export interface CommitWritesOptions<R extends RecordBase> {
  readonly participant: Participant<R>;
  readonly instance: string;
  readonly spanning: SpanningParticipant | null;
  /** Where a failed or late parking is logged. */
  readonly log: Logger;
}

/**
 * The commit's storage work of one participant: one write per checkpoint (one export, one
 * writer, one cleanup) that concurrent and retried commits join, so the cut stays the one the
 * first commit took. Export, write and cleanup run as background tasks; each call waits for them
 * only until its deadline.
 */
export class CommitWrites<R extends RecordBase> {
  readonly #participant: Participant<R>;
  readonly #instance: string;
  readonly #spanning: SpanningParticipant | null;
  readonly #log: Logger;
  #current: CommitWrite<R> | null = null;

  constructor(options: CommitWritesOptions<R>) {
    this.#participant = options.participant;
    this.#instance = options.instance;
    this.#spanning = options.spanning;
    this.#log = options.log;
  }

  /**
   * Starts or joins the write of the commit's checkpoint (under the control plane's lock),
   * refusing what a commit refuses: a checkpoint whose export already failed for good
   * (`export_failed`), another directory or scope (`checkpoint_conflict`), a participant no
   * longer ready, a restart in scope, an occupied directory.
   */
  join(request: CommitRequest): CommitWrite<R> {
    const id = request.checkpoint_id;
    const scopeKey = scopeDigest(request.episode_ids);
    let write = this.#current;
    if (write !== null && write.checkpointId !== id) write = this.#current = null;
    if (write !== null) {
      if (write.failed !== null) throw CheckpointError.exportFailed(id, write.failed);
      if (write.dir !== request.checkpoint_dir || write.scopeKey !== scopeKey) {
        throw CheckpointError.conflict(
          `checkpoint '${id}' is already being written to another directory or scope`,
        );
      }
      return write;
    }
    const target = {
      checkpointDir: request.checkpoint_dir,
      kind: this.#participant.kind,
      instance: this.#instance,
      checkpointId: id,
    };
    const newWrite: CommitWrite<R> = {
      checkpointId: id,
      dir: request.checkpoint_dir,
      scopeKey,
      failed: null,
      exportAbort: new AbortController(),
      exportTask: null,
      writer: new RecordsWriter(target),
      writeTask: null,
      cleanupTask: null,
      cleanupRunning: false,
    };
    this.#spanning?.checkMembership("commit");
    if (!this.#participant.ready()) {
      // A cut taken now would not be the prepared one: refuse it for good.
      newWrite.failed = "the participant is no longer ready (readiness regressed after prepare)";
      this.#current = newWrite;
      throw CheckpointError.exportFailed(id, newWrite.failed);
    }
    // A refusal of the request itself (not of the cut): the checkpoint may still commit.
    this.#participant.checkCommit(request.episode_ids);
    const restarts = request.episode_ids === null ? [] : this.#participant.readiness().restarts;
    if (request.episode_ids !== null && restarts.length > 0) {
      // The restarts are few, the scope may be thousands: look each restart up in the scope.
      const inScope = captureKeySet(request.episode_ids);
      const offending = [...new Set(restarts)].filter((key) => inScope.has(key)).sort();
      if (offending.length > 0) throw CheckpointError.restartInScope(offending);
    }
    // Before the write exists: refused now, the same ID may still commit to a fresh directory.
    refuseOccupiedDir(target);
    // Manifest extras belong to the same cut as the records: taken once, with the export.
    try {
      newWrite.writer = new RecordsWriter({
        ...target,
        manifestExtra: this.#participant.manifestExtra(),
        // Which machine wrote it: a controller that cannot see the directory names it.
        host: hostname(),
      });
    } catch (error) {
      newWrite.failed = `its manifest extras failed: ${describe(error)}`;
      this.#current = newWrite;
      throw CheckpointError.exportFailed(id, newWrite.failed);
    }
    const scope = request.episode_ids;
    newWrite.exportTask = this.#participant
      .export(scope, newWrite.exportAbort.signal)
      .catch((error: unknown) => {
        newWrite.failed ??= `its export failed: ${describe(error)}`;
        throw error;
      });
    swallow(newWrite.exportTask);
    this.#current = newWrite;
    return newWrite;
  }

  /**
   * Runs the joined `write` to its end by the commit's deadline: the export, the records then
   * the manifest, the deletion of restored state the scope leaves out, and with `stop` the
   * parking of what was exported (its failure only logged). A deadline passed is
   * `deadline_exceeded` with the work left running for a retry to join; a write a resume stopped
   * is `stale_checkpoint`.
   */
  async complete(write: CommitWrite<R>, request: CommitRequest): Promise<CompletedWrite<R>> {
    const id = request.checkpoint_id;
    const deadline = request.deadline_ts;
    const startedAt = performance.now();

    const exported = await awaitUntil(write.exportTask as Promise<R[]>, deadline).catch(
      (error: unknown) => {
        throw CheckpointError.exportFailed(id, `its export failed: ${describe(error)}`);
      },
    );
    if (!exported.done) throw CheckpointError.deadline("the export");
    const records = exported.value;
    const exportedAt = performance.now();

    write.writeTask ??= write.writer.write(records).catch((error: unknown) => {
      write.writeTask = null;
      throw error;
    });
    const written = await awaitUntil(write.writeTask, deadline);
    if (!written.done) throw CheckpointError.deadline("the write of the records");
    const manifest = written.value;
    const writtenAt = performance.now();
    // A resume that stopped this write after it published must not be followed by deletions
    // of restored state (a replacement may start as that attempt) or by parking.
    if (write.writer.stopped) throw CheckpointError.stale(id);

    if (request.episode_ids !== null) {
      write.cleanupTask ??= this.#startCleanup(write, request.episode_ids);
      const cleaned = await awaitUntil(write.cleanupTask, deadline);
      if (!cleaned.done) throw CheckpointError.deadline("freeing restored state outside the scope");
    }

    if (request.stop) {
      if (write.writer.stopped) throw CheckpointError.stale(id);
      const parked = await awaitUntil(
        this.#participant.parkExported(records).catch((error: unknown) => {
          this.#log.warn({ err: error, checkpointId: id }, "park_exported failed");
        }),
        deadline,
      );
      if (!parked.done) this.#log.warn({ checkpointId: id }, "park_exported passed the deadline");
    }
    return { records, manifest, startedAt, exportedAt, writtenAt };
  }

  /**
   * Stops the write of checkpoint `id` (resume): raises the writer's stop flag so no manifest
   * appears after it, cancels the export, and waits for a running cleanup until `deadlineTs`
   * (`deadline_exceeded`, the write kept). Then no write is current.
   */
  async stop(id: string, deadlineTs: number): Promise<void> {
    const write =
      this.#current !== null && this.#current.checkpointId === id ? this.#current : null;
    if (write !== null) {
      await write.writer.stop();
      write.exportAbort.abort(CheckpointError.conflict(`checkpoint '${id}' was resumed`));
      if (write.cleanupRunning && write.cleanupTask !== null) {
        const cleaned = await awaitUntil(
          write.cleanupTask.catch(() => undefined),
          deadlineTs,
        );
        if (!cleaned.done)
          throw CheckpointError.deadline("freeing restored state outside the scope");
      }
    }
    this.#current = null;
  }

  #startCleanup(write: CommitWrite<R>, scope: readonly EpisodeId[]): Promise<void> {
    write.cleanupRunning = true;
    const task = (async () => {
      const pending = await this.#participant.restoredPending();
      // Nothing restored waits here (the usual commit): the scope is not even looked at.
      if (pending.length === 0) return;
      const inScope = captureKeySet(scope);
      const unscoped = pending.filter((episode) => !inScope.has(captureKey(episode)));
      await stopEachRollout(
        unscoped,
        async (episode) =>
          await this.#participant.deleteRestored(episode, new AbortController().signal),
      );
    })().then(
      () => {
        write.cleanupRunning = false;
      },
      (error: unknown) => {
        write.cleanupRunning = false;
        write.cleanupTask = null; // a retry runs the cleanup again
        throw error;
      },
    );
    swallow(task);
    return task;
  }
}

function swallow(promise: Promise<unknown>): void {
  promise.catch(() => undefined);
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
