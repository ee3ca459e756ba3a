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
import { scopeInKeyOrder, sortedScopeKeys } from "../../identity/scope-keys.js";
import {
  GenerationCutRecordSchema,
  generationCutRecordFromWire,
} from "../../capture/continuation.js";
import type { CaptureLedger } from "../../capture/ledger/capture-ledger.js";
import { prepareReport, type PrepareReport } from "../../wire/control.js";
import { isPlainRecord } from "../../util/plain-record.js";
import { NO_FAST_PATH, recordSchema, withFastParse } from "../../wire/storage.js";
import { readAsStandardJson } from "../../store/records-reader.js";
import { cutTickets, type CutService } from "./cut-service.js";
import { PolicyGate } from "./policy-gate.js";
import { RestoredCuts, type CutClaim, type CutRecord } from "./restored-cuts.js";

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
   * Cuts the calls already on an inference worker while a prepare closes admission; null:
   * generation cuts off. In a worker of a multi-worker server it is replaced by the round the
   * coordinator runs for every worker.
   */
  readonly cuts?: CutService | null;
  /** Told the checkpoint ID of each prepare, before its cut round. */
  readonly onCheckpoint?: (checkpointId: string) => void;
  /**
   * Set in each worker of a multi-worker model server: what it asks of the server's
   * coordinator, which owns what the workers share (the ledger's restore and retire, the
   * restored cuts, the cut round). The ledger must then be built with
   * {@link PolicyParticipant.ledgerHook}.
   */
  readonly worker?: PolicyWorkerSide | null;
}

/**
 * A worker's side of a multi-worker model server, built by the workers adapter over its link
 * to the coordinator: this module knows only what it asks for.
 */
export interface PolicyWorkerSide {
  /** The cut round the coordinator runs for every worker (replaces the configured service). */
  readonly cuts: CutService;
  /** The restored cuts the coordinator holds, as this worker claims and settles them. */
  readonly claims: WorkerCutClaimsView;
  /** Runs before the ledger uses keys a restore left for the coordinator to write. */
  readonly ledgerHook: PolicyLedgerHook;
}

/** A worker's view of the restored cuts its coordinator holds. */
export interface WorkerCutClaimsView {
  /** Claims the cut of `key` for a call; null when none matches or the coordinator is gone. */
  take(key: string, requestDigest: string, modelCallId: string): Promise<CutClaim | null>;
  /** Settles a claim when its call leaves (given back unless its response started). */
  settle(claim: CutClaim, responseStarted: boolean): void;
  /** The cuts claimed by calls still running: `[key, record]`. */
  claimed(): [string, CutRecord][];
  /** Forgets the key of `episode` and earlier attempts of its rollout (a retire). */
  dropCovered(episode: EpisodeId): void;
  /** Forgets `key` (a restored attempt deleted before it started). */
  drop(key: string): void;
}

/** What one worker tells its coordinator a commit exports (see {@link PolicyParticipant.snapshot}). */
export interface PolicySnapshot {
  /** Model call IDs of admitted calls whose response has not started. */
  readonly undelivered: string[];
  /** The newest cut per key among undelivered calls: `[key, admitted at, record]`. */
  readonly cuts: [string, number, CutRecord][];
  /** Restored cuts claimed by calls still running: `[key, record]`. */
  readonly claimed: [string, CutRecord][];
}

/** The ledger hook a worker's ledger is built with: restored keys are written by the coordinator first. */
export interface PolicyLedgerHook {
  readonly beforeUse: (keys: readonly string[]) => Promise<void>;
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
 * - **Several workers** (`coordinator` set): each worker runs its own gate and joins one cut
 *   round per prepare; the coordinator's participant (built by the workers adapter) exports and
 *   imports the shared ledger, retires its files, and holds the restored cuts, which a worker
 *   claims when a call of their key arrives.
 */
export class PolicyParticipant extends Participant<ModelRecord> {
  readonly kind = "model" as const;
  readonly recordSchema = ModelRecordSchema;
  readonly gate: PolicyGate;
  readonly restoredCuts = new RestoredCuts();
  /** Cuts in-flight calls at prepare; null: generation cuts off. */
  readonly cuts: CutService | null;
  #ledger: CaptureLedger | null;
  readonly #onCheckpoint: ((checkpointId: string) => void) | null;
  /** In a worker: what it asks of its coordinator (the restored cuts, the ledger keys it owes). */
  readonly #worker: PolicyWorkerSide | null;

  constructor(options: PolicyParticipantOptions) {
    super();
    this.#ledger = options.ledger;
    this.#onCheckpoint = options.onCheckpoint ?? null;
    const worker = options.worker ?? null;
    this.#worker = worker;
    const cuts = options.cuts ?? null;
    this.cuts = cuts === null || worker === null ? cuts : worker.cuts;
    const service = this.cuts;
    this.gate = new PolicyGate({
      retired: this.retired,
      onChange: () => this.notify(),
      onTargetStarted: async (key) => {
        await this.#ledger?.markStarted(key);
      },
      ...(service === null
        ? {}
        : {
            cutRound: async (tickets, deadlineTs) => {
              await cutTickets(service, tickets, deadlineTs);
              this.#newestCutsReplaceRestored();
            },
          }),
    });
  }

  /**
   * In a worker, the hook its capture ledger is built with (see {@link PolicyParticipantOptions.worker});
   * null in one process.
   */
  get ledgerHook(): PolicyLedgerHook | null {
    return this.#worker?.ledgerHook ?? null;
  }

  /** Attaches the capture ledger after construction (a worker's is built with {@link ledgerHook}). */
  attachLedger(ledger: CaptureLedger | null): void {
    this.#ledger = ledger;
  }

  /**
   * Claims the restored cut of `key` for a call whose request digest is `requestDigest`;
   * settle the claim with {@link settleCut} when the call leaves. Null when none matches.
   */
  async claimCut(
    key: string,
    requestDigest: string,
    modelCallId: string,
  ): Promise<CutClaim | null> {
    if (this.#worker !== null)
      return await this.#worker.claims.take(key, requestDigest, modelCallId);
    return this.restoredCuts.take(key, requestDigest, modelCallId);
  }

  /** Settles a claim of {@link claimCut} when its call leaves. */
  settleCut(claim: CutClaim, responseStarted: boolean): void {
    if (this.#worker !== null) this.#worker.claims.settle(claim, responseStarted);
    else this.restoredCuts.settle(claim, responseStarted);
  }

  /** In a worker: what a commit exports from it (its undelivered calls and their cuts). */
  snapshot(): PolicySnapshot {
    return {
      undelivered: [...this.gate.undeliveredCallIds()],
      cuts: [...this.#latestCutsAt()].map(([key, { at, record }]) => [key, at, record]),
      claimed: this.#worker?.claims.claimed() ?? [],
    };
  }

  /** In a worker: adopts the restored targets of a restore its coordinator installed. */
  adoptRestoredTargets(targets: readonly string[]): void {
    for (const key of [...this.gate.restoredTargets]) this.gate.restoredTargets.delete(key);
    for (const key of targets) this.gate.restoredTargets.add(key);
    this.notify();
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
    // A worker lists the cuts its running calls claimed; its coordinator adds the ones it holds.
    const keys =
      this.#worker === null
        ? this.restoredCuts.keys()
        : this.#worker.claims.claimed().map(([key]) => key);
    return { restored_generation_cuts: keys };
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
    if (this.#worker !== null)
      throw new Error("a model server worker exports through its coordinator");
    return await this.exportFrom(scope, [this.snapshot()], this.restoredCuts);
  }

  /**
   * The records of `scope` from the ledger, leaving out the undelivered calls of `snapshots`
   * (one per process serving calls) and adding each episode's newest cut, or else the restored
   * cut nobody consumed (`restored`, then a claim still running).
   */
  async exportFrom(
    scope: readonly EpisodeId[] | null,
    snapshots: readonly PolicySnapshot[],
    restored: RestoredCuts,
  ): Promise<ModelRecord[]> {
    this.checkCommit(scope);
    if (scope === null) return [];
    const ledger = this.#ledger;
    if (ledger === null) return [];
    const undelivered = new Set<string>();
    const newest = new Map<string, { at: number; record: CutRecord }>();
    const claimed = new Map<string, CutRecord>();
    for (const snapshot of snapshots) {
      for (const id of snapshot.undelivered) undelivered.add(id);
      for (const [key, at, record] of snapshot.cuts) {
        const current = newest.get(key);
        if (current === undefined || at > current.at) newest.set(key, { at, record });
      }
      for (const [key, record] of snapshot.claimed) claimed.set(key, record);
    }
    const latest = new Map([...newest].map(([key, { record }]) => [key, record]));
    const records: ModelRecord[] = [];
    // In key order, each attempt once (a scope may list one twice): records a restore accepts.
    const episodes = scopeInKeyOrder(scope);
    const keys = sortedScopeKeys(scope);
    const rowsOf = await ledger.exportRowsOf(keys, undelivered);
    for (const [i, episode] of episodes.entries()) {
      const key = keys[i] as string;
      const rows = rowsOf[i] ?? [];
      const cut = latest.get(key) ?? restored.get(key) ?? claimed.get(key);
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
    // The n-th key of every episode, in record order: each such column is usually sorted
    // already (records follow the scope's key order), so the reply's list is a merge of a few
    // sorted columns rather than a sort of every key.
    const columns: string[][] = [];
    const byEpisode: Record<string, string[]> = {};
    for (const r of records) {
      const keys: string[] = [];
      for (const row of r.rows) {
        const key = row.staging_key;
        if (typeof key === "string" && key.length > 0) keys.push(key);
      }
      for (const cut of r.generation_cuts) {
        for (const key of cut.continuation.staging_keys) keys.push(key);
      }
      const sorted = sortedUnique(keys);
      byEpisode[captureKey(r.episode_id)] = sorted;
      for (let i = 0; i < sorted.length; i++) (columns[i] ??= []).push(sorted[i] as string);
    }
    return {
      staging_keys: mergeSortedUnique(columns.map(sortedUnique)),
      staging_keys_by_episode: byEpisode,
    };
  }

  /**
   * Refuses a restore into a process that served calls.
   * @throws CheckpointError (`checkpoint_error`) once any call was served
   */
  refuseServed(): void {
    if (this.gate.served) {
      throw new CheckpointError(
        "checkpoint_error",
        "model restore requires a freshly started model server; this one has served calls",
      );
    }
  }

  override async install(
    records: readonly ModelRecord[],
    scope: readonly EpisodeId[],
  ): Promise<void> {
    if (this.#worker !== null)
      throw new Error("a model server worker restores through its coordinator");
    this.refuseServed();
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
    // Each source's replacement attempt, built once (thousands at a restore).
    const targets = new Map<string, { readonly key: string; readonly episode: EpisodeId }>();
    for (const [sourceKey, e] of episodes) {
      const target = nextAttempt(e);
      targets.set(sourceKey, { key: captureKey(target), episode: target });
    }
    if (ledger !== null) {
      try {
        await ledger.importRecords(
          [...episodes].map(([sourceKey, e]) => {
            const target = targets.get(sourceKey) as { key: string; episode: EpisodeId };
            const record = byKey.get(sourceKey);
            return {
              targetKey: target.key,
              sourceKey,
              rows: (record?.rows ?? []) as never,
              episodes: { target: target.episode, source: e },
              // Rows read from a natively decoded line are not walked again.
              rowsStandardJson: record !== undefined && readAsStandardJson(record),
            };
          }),
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
      if (cut === undefined) continue;
      const target = targets.get(sourceKey) as { key: string; episode: EpisodeId };
      this.restoredCuts.install(target.key, cut, target.episode);
    }
    for (const target of targets.values()) this.gate.restoredTargets.add(target.episode);
    this.notify();
  }

  override restoredPending(): EpisodeId[] {
    return [...this.gate.restoredTargets].sort().map((key) => fromCaptureKey(key));
  }

  override async deleteRestored(episode: EpisodeId): Promise<void> {
    const key = captureKey(episode);
    if (this.#worker !== null) {
      // The coordinator deletes the ledger; a worker only forgets the attempt.
      this.gate.restoredTargets.delete(key);
      this.#worker.claims.drop(key);
      return;
    }
    // The ledger first: a delete that fails leaves the attempt pending for the retried commit.
    await this.#ledger?.deleteUnstarted(key);
    this.gate.restoredTargets.delete(key);
    this.restoredCuts.drop(key);
  }

  override async retire(episode: EpisodeId, signal: AbortSignal): Promise<void> {
    await this.gate.retire(episode, signal);
    this.restoredCuts.dropCovered(episode);
    this.gate.restoredTargets.deleteCovered(episode);
    // A worker only stops its calls: the coordinator retires the shared ledger once all have.
    if (this.#worker !== null) this.#worker.claims.dropCovered(episode);
    else await this.#ledger?.retireLedgers([episode]);
  }

  /** The newest cut per capture key among undelivered calls (greatest admission time). */
  #latestCuts(): Map<string, CutRecord> {
    return new Map([...this.#latestCutsAt()].map(([key, { record }]) => [key, record]));
  }

  #latestCutsAt(): Map<string, { at: number; record: CutRecord }> {
    const latest = new Map<string, { at: number; record: CutRecord }>();
    for (const t of this.gate.tickets) {
      if (t.cutRecord === null || t.undeliveredCallId === null || t.captureKey === "") continue;
      const current = latest.get(t.captureKey);
      if (current === undefined || t.admittedAt > current.at) {
        latest.set(t.captureKey, { at: t.admittedAt, record: t.cutRecord as CutRecord });
      }
    }
    return latest;
  }

  /** After a cut round, each key's newest cut takes its restored cut's place. */
  #newestCutsReplaceRestored(): void {
    for (const [key, record] of this.#latestCuts()) {
      if (this.restoredCuts.get(key) !== undefined) this.restoredCuts.install(key, record);
    }
  }
}

/**
 * `keys` sorted (code unit order, as `Array.prototype.sort`) without repeats; the array itself
 * when it already is, as a commit's staging keys usually are (a rollout's calls are staged in
 * order, and the keys of different episodes rarely interleave). Sorts `keys` in place otherwise.
 *
 * Why: a commit of 8,000 episodes built a Set and sorted it per episode and again for the whole
 * reply; checking the order first is one comparison per key.
 */
function sortedUnique(keys: string[]): string[] {
  let ordered = true;
  for (let i = 1; i < keys.length && ordered; i++) {
    ordered = (keys[i - 1] as string) < (keys[i] as string);
  }
  if (ordered) return keys;
  keys.sort();
  let kept = 0;
  for (let i = 0; i < keys.length; i++) {
    if (i === 0 || keys[i] !== keys[kept - 1]) keys[kept++] = keys[i] as string;
  }
  keys.length = kept;
  return keys;
}

/** Sorted lists of keys as one sorted list without repeats, merged pairwise. */
function mergeSortedUnique(lists: string[][]): string[] {
  if (lists.length === 0) return [];
  let level = lists;
  while (level.length > 1) {
    const next: string[][] = [];
    for (let i = 0; i < level.length; i += 2) {
      const b = level[i + 1];
      next.push(b === undefined ? (level[i] as string[]) : mergeTwo(level[i] as string[], b));
    }
    level = next;
  }
  return level[0] as string[];
}

/** Two sorted lists without repeats as one. */
function mergeTwo(a: readonly string[], b: readonly string[]): string[] {
  const out: string[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    const x = a[i] as string;
    const y = b[j] as string;
    if (x < y) {
      out.push(x);
      i++;
    } else if (y < x) {
      out.push(y);
      j++;
    } else {
      out.push(x);
      i++;
      j++;
    }
  }
  while (i < a.length) out.push(a[i++] as string);
  while (j < b.length) out.push(b[j++] as string);
  return out;
}
