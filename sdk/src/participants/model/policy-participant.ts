/**
 * The checkpoint participant of a policy model server (see docs/policy-model.md): the gate's
 * readiness, the capture ledger's rows at commit (minus undelivered calls, plus each
 * episode's latest generation cut), the import at restore, and retire of calls and ledgers.
 *
 * @see docs/policy-model.md
 * @module
 */
import { refuseDuplicateRecords } from "../../control/duplicate-records.js";
import { z } from "zod";
import { Participant, type CloseAdmissionRequest } from "../../control/participant.js";
import { CheckpointError } from "../../errors.js";
import {
  captureKey,
  fromCaptureKey,
  nextAttempt,
  type EpisodeId,
} from "../../identity/episode-id.js";
import {
  GenerationCutRecordSchema,
  generationCutRecordFromWire,
} from "../../capture/continuation.js";
import type { CaptureLedger } from "../../capture/ledger/capture-ledger.js";
import { prepareReport, type PrepareReport } from "../../wire/control.js";
import { isPlainRecord } from "../../util/plain-record.js";
import { NO_FAST_PATH, recordSchema, withFastParse } from "../../wire/storage.js";
import { PolicyGate, type Ticket } from "./policy-gate.js";
import { RestoredCuts, type CutRecord } from "./restored-cuts.js";

/** The blocker a streaming untagged call is reported as (it has no capture key). */
export const UNTAGGED_BLOCKER = "(untagged)";

/** One stored episode of a policy model. */
export const ModelRecordSchema = recordSchema({
  /**
   * The episode's ledger rows. Only their shape as objects is checked here (by reference, with no
   * copy of each row's ~25 fields): the ledger's import validates every row it writes.
   */
  rows: withFastParse(
    z.array(
      z.custom<Record<string, unknown>>(isPlainRecord, {
        message: "a ledger row is a JSON object",
      }),
    ),
    (value) =>
      Array.isArray(value) && value.every(isPlainRecord) ? [...(value as unknown[])] : NO_FAST_PATH,
  ),
  generation_cuts: withFastParse(z.array(GenerationCutRecordSchema).default([]), (value) => {
    if (value === undefined) return [];
    if (!Array.isArray(value)) return NO_FAST_PATH;
    const cuts = [];
    for (const item of value) {
      const cut = generationCutRecordFromWire(item);
      if (cut === null) return NO_FAST_PATH;
      cuts.push(cut);
    }
    return cuts;
  }),
});
/** One stored episode of a policy model. */
export type ModelRecord = z.infer<typeof ModelRecordSchema>;

/** Options of a {@link PolicyParticipant}. */
export interface PolicyParticipantOptions {
  /** The capture ledger; null when token capture is off (nothing is exported). */
  readonly ledger: CaptureLedger | null;
  /**
   * The cut round run inside prepare; null: generation cuts off. Receives the calls already
   * on a worker and the prepare's deadline.
   */
  readonly cutRound?:
    ((tickets: readonly Ticket[], deadlineTs: number | null) => Promise<void>) | null;
  /** Told the checkpoint ID of each prepare, before its cut round. */
  readonly onCheckpoint?: (checkpointId: string) => void;
}

/**
 * The policy model participant (kind `model`).
 *
 * ## Rules
 * - **Prepare** closes the gate (held responses, waiting calls) and runs one cut round; ready
 *   when no response is streaming.
 * - **Commit** needs the scope; exports, per scoped episode, its ledger rows minus undelivered
 *   calls and its latest cut (or its restored cut nobody consumed); replies with the staging
 *   keys the checkpoint still refers to.
 * - **Restore** only in a process that served nothing: clears dead executions of the targets
 *   and later attempts, imports the rows stamped with their source key, holds the cuts for the
 *   targets, and retires the source attempts' ledgers.
 * - **Retire** stops the calls of the attempt and earlier ones, then retires their ledgers.
 */
export class PolicyParticipant extends Participant<ModelRecord> {
  readonly kind = "model" as const;
  readonly recordSchema = ModelRecordSchema;
  readonly gate: PolicyGate;
  readonly restoredCuts = new RestoredCuts();
  readonly #ledger: CaptureLedger | null;
  readonly #onCheckpoint: ((checkpointId: string) => void) | null;

  constructor(options: PolicyParticipantOptions) {
    super();
    this.#ledger = options.ledger;
    this.#onCheckpoint = options.onCheckpoint ?? null;
    const cutRound = options.cutRound ?? null;
    this.gate = new PolicyGate({
      retired: this.retired,
      onChange: () => this.notify(),
      onTargetStarted: async (key) => {
        await this.#ledger?.markStarted(key);
      },
      ...(cutRound === null
        ? {}
        : {
            cutRound: async (tickets, deadlineTs) => {
              await cutRound(tickets, deadlineTs);
              this.#newestCutsReplaceRestored();
            },
          }),
    });
  }

  /** The capture ledger, or null. */
  get ledger(): CaptureLedger | null {
    return this.#ledger;
  }

  override markRetired(episodes: readonly EpisodeId[]): void {
    this.retired.mark(episodes);
    this.gate.refuseWaiting(episodes);
  }

  override async closeAdmission(request: CloseAdmissionRequest): Promise<void> {
    if ("checkpoint_id" in request) this.#onCheckpoint?.(request.checkpoint_id);
    await this.gate.close(request.deadline_ts ?? null);
  }

  override openAdmission(): void {
    this.gate.open();
    // The ledger files a restore deferred follow now that the checkpoint is done with.
    void this.#ledger?.settleInBackground();
  }

  override ready(): boolean {
    return this.gate.report().ready;
  }

  override readiness(): PrepareReport {
    const report = this.gate.report();
    return prepareReport({
      ready: report.ready,
      blockers: report.streaming.map((key) => (key === "" ? UNTAGGED_BLOCKER : key)),
      counts: {
        inflight: report.inflight,
        held: report.held,
        cut: report.cut,
        cut_failed: report.cut_failed,
        cut_skipped: report.cut_skipped,
      },
    });
  }

  override statusExtra(): Record<string, unknown> {
    return { restored_generation_cuts: this.restoredCuts.keys() };
  }

  override checkCommit(scope: readonly EpisodeId[] | null): void {
    if (scope === null) {
      throw new CheckpointError(
        "checkpoint_error",
        "model commit needs the episode_ids the controller continues from this checkpoint",
      );
    }
  }

  override async export(scope: readonly EpisodeId[] | null): Promise<ModelRecord[]> {
    this.checkCommit(scope);
    if (scope === null) return [];
    const ledger = this.#ledger;
    if (ledger === null) return [];
    const undelivered = this.gate.undeliveredCallIds();
    const latest = this.#latestCuts();
    const records: ModelRecord[] = [];
    const keys = scope.map(captureKey);
    const rowsOf = await ledger.exportRowsOf(keys, undelivered);
    for (const [i, episode] of scope.entries()) {
      const key = keys[i] as string;
      const rows = rowsOf[i] ?? [];
      const cut = latest.get(key) ?? this.restoredCuts.get(key);
      const cuts = cut === undefined ? [] : [cut];
      if (rows.length === 0 && cuts.length === 0) continue;
      records.push(
        Object.freeze({
          episode_id: episode,
          rows: rows as ModelRecord["rows"],
          generation_cuts: cuts as ModelRecord["generation_cuts"],
        }),
      );
    }
    return records;
  }

  override commitReply(records: readonly ModelRecord[]): Record<string, unknown> {
    const all = new Set<string>();
    const byEpisode: Record<string, string[]> = {};
    for (const r of records) {
      const keys = new Set<string>();
      for (const row of r.rows) {
        const key = row.staging_key;
        if (typeof key === "string" && key.length > 0) keys.add(key);
      }
      for (const cut of r.generation_cuts)
        for (const key of cut.continuation.staging_keys) keys.add(key);
      const sorted = [...keys].sort();
      byEpisode[captureKey(r.episode_id)] = sorted;
      for (const key of sorted) all.add(key);
    }
    return { staging_keys: [...all].sort(), staging_keys_by_episode: byEpisode };
  }

  override async install(
    records: readonly ModelRecord[],
    scope: readonly EpisodeId[],
  ): Promise<void> {
    if (this.gate.served) {
      throw new CheckpointError(
        "checkpoint_error",
        "model restore requires a freshly started model server; this one has served calls",
      );
    }
    const ledger = this.#ledger;
    if (records.length > 0 && ledger === null) {
      throw new CheckpointError(
        "checkpoint_error",
        "the checkpoint holds capture-ledger rows but this model server has no capture ledger",
      );
    }
    refuseDuplicateRecords(records, (r) => captureKey(r.episode_id), "episode");
    const byKey = new Map<string, ModelRecord>();
    // Episode IDs of records are minted by the record schema: no parsing again.
    for (const r of records) byKey.set(captureKey(r.episode_id), r);
    for (const [key, r] of byKey) {
      if (r.generation_cuts.length > 1) {
        throw new CheckpointError(
          "checkpoint_error",
          `episode ${key} has more than one undelivered cut`,
        );
      }
    }
    const episodes = new Map<string, EpisodeId>();
    for (const e of scope) episodes.set(captureKey(e), e);
    for (const r of records) episodes.set(captureKey(r.episode_id), r.episode_id);
    if (ledger !== null) {
      try {
        await ledger.importRecords(
          [...episodes].map(([sourceKey, e]) => ({
            targetKey: captureKey(nextAttempt(e)),
            sourceKey,
            rows: (byKey.get(sourceKey)?.rows ?? []) as never,
          })),
        );
      } catch (error) {
        if (error instanceof CheckpointError) throw error;
        throw new CheckpointError(
          "checkpoint_error",
          `capture ledger refused the restore: ${(error as Error).message}`,
          { cause: error },
        );
      }
    }
    for (const [sourceKey, r] of byKey) {
      const cut = r.generation_cuts[0];
      if (cut !== undefined) {
        this.restoredCuts.install(captureKey(nextAttempt(fromCaptureKey(sourceKey))), cut);
      }
    }
    for (const e of episodes.values()) this.gate.restoredTargets.add(nextAttempt(e));
    this.notify();
  }

  override restoredPending(): EpisodeId[] {
    return [...this.gate.restoredTargets].sort().map((key) => fromCaptureKey(key));
  }

  override async deleteRestored(episode: EpisodeId): Promise<void> {
    const key = captureKey(episode);
    // The ledger first: a delete that fails leaves the attempt pending for the retried commit.
    await this.#ledger?.deleteUnstarted(key);
    this.gate.restoredTargets.delete(key);
    this.restoredCuts.drop(key);
  }

  override async retire(episode: EpisodeId, signal: AbortSignal): Promise<void> {
    await this.gate.retire(episode, signal);
    this.restoredCuts.dropCovered(episode);
    this.gate.restoredTargets.deleteCovered(episode);
    await this.#ledger?.retireLedgers([episode]);
  }

  /** The newest cut per capture key among undelivered calls (greatest admission time). */
  #latestCuts(): Map<string, CutRecord> {
    const latest = new Map<string, { at: number; record: CutRecord }>();
    for (const t of this.gate.tickets) {
      if (t.cutRecord === null || t.undeliveredCallId === null || t.captureKey === "") continue;
      const current = latest.get(t.captureKey);
      if (current === undefined || t.admittedAt > current.at) {
        latest.set(t.captureKey, { at: t.admittedAt, record: t.cutRecord as CutRecord });
      }
    }
    return new Map([...latest].map(([key, { record }]) => [key, record]));
  }

  /** After a cut round, each key's newest cut takes its restored cut's place. */
  #newestCutsReplaceRestored(): void {
    for (const [key, record] of this.#latestCuts()) {
      if (this.restoredCuts.get(key) !== undefined) this.restoredCuts.install(key, record);
    }
  }
}
