/**
 * The participant of a model server with several workers, run by its coordinator (see
 * docs/workers.md). Unlike sessions, a rollout's model calls land on any worker, and the capture
 * ledger is one directory every worker appends to; so the coordinator, not the workers, does
 * what concerns the ledger as a whole and what must happen once per server:
 *
 * - **prepare**: every worker closes its own gate and hands in its undelivered calls; the
 *   coordinator runs one cut round for all of them (one inventory per backend);
 * - **commit**: every worker reports its undelivered calls, newest cuts and running claims; the
 *   coordinator exports the ledger rows once, without those calls;
 * - **restore**: refused if any worker served a call; the coordinator imports the ledger, holds
 *   the restored cuts (a worker claims one when a call of its key arrives, and gives it back if
 *   the call leaves before its response started), and tells every worker the restored targets;
 *   a worker asks the coordinator to write a target's deferred ledger before it first uses it;
 * - **retire**: every worker stops the calls, then the coordinator retires the ledgers once.
 *
 * @module
 */
import { captureKey, fromCaptureKey, type EpisodeId } from "../identity/episode-id.js";
import type { CloseAdmissionRequest } from "../control/participant.js";
import { CoordinatedParticipant } from "./coordinated-participant.js";
import { mergeStatusExtras } from "./merge-reports.js";
import { bodyOf, type Member, type WorkerPool } from "./worker-pool.js";
import type { FrameValue } from "./frame-codec.js";
import { AttemptSet } from "../control/attempt-keys.js";
import { compareStrings } from "../util/compare-strings.js";
import type { Manifest, RecordBase } from "../wire/storage.js";
import type { StoredRecord } from "../store/records-reader.js";
import { CutBarrier } from "./cut-barrier.js";
import type { ModelRecord, PolicyParticipant } from "../participants/model/policy-participant.js";
import type { CutClaimReply } from "./worker-messages.js";
import type { CutRecord } from "../participants/model/restored-cuts.js";

/** The participant a multi-worker model server's coordinator runs. */
export class CoordinatedPolicyParticipant extends CoordinatedParticipant {
  readonly #policy: PolicyParticipant;
  #round: CutBarrier | null = null;
  /** Keys whose restored cut a running call claimed: another worker's call may get it back. */
  readonly #outstanding = new AttemptSet();

  /**
   * @param prototype the never-serving model participant of the coordinator: its ledger (the
   *   workers' directory), cut service and restored cuts are the server's
   */
  constructor(
    pool: WorkerPool,
    prototype: PolicyParticipant,
    control: (operation: string, body: unknown) => Promise<unknown>,
  ) {
    super(pool, prototype, control);
    this.#policy = prototype;
  }

  protected override onWorkerMessage(member: Member, kind: string, body: FrameValue): unknown {
    switch (kind) {
      case "policy_cut": {
        const round = this.#round;
        const { candidates } = bodyOf(kind, body);
        // A share that misses its round (a worker closing late) is not cut: its calls regenerate.
        if (round === null) return Promise.resolve({ acks: [] });
        return round.submit(member.index, candidates).then((acks) => ({ acks }));
      }
      case "policy_claim_cut": {
        const { key, request_digest } = bodyOf(kind, body);
        return this.#claimCut(key, request_digest);
      }
      case "policy_settle_cut": {
        const { key, record, used } = bodyOf(kind, body);
        this.#settleCut(key, record, used === true);
        return null;
      }
      case "policy_settle":
        return (async () => {
          await this.#policy.ledger?.settleKeys(bodyOf(kind, body).keys);
          return null;
        })();
      default:
        return super.onWorkerMessage(member, kind, body);
    }
  }

  protected override onMembershipChanged(): void {
    this.#round?.retain(this.pool.live().map((member) => member.index));
  }

  /**
   * Hands out the restored cut of `key` once, to a call whose request digest matches. While a
   * checkpoint is open the cut stays here (the export reads it), and the call regenerates.
   */
  #claimCut(key: string, requestDigest: string): CutClaimReply {
    const record = this.#policy.restoredCuts.get(key);
    if (record === undefined) return { record: null, keep: this.#outstanding.has(key) };
    if (!this.accepting || record.request_digest !== requestDigest) {
      return { record: null, keep: true };
    }
    this.#policy.restoredCuts.drop(key);
    this.#outstanding.add(key);
    return { record, keep: false };
  }

  /**
   * A claimed cut's call left: used if its response started, else taken back (unless its
   * attempt retired meanwhile) for the next call of the key on any worker.
   */
  #settleCut(key: string, record: CutRecord, used: boolean): void {
    this.#outstanding.delete(key);
    if (used || this.retired.isRetired(fromCaptureKey(key))) return;
    if (this.#policy.restoredCuts.get(key) !== undefined) return;
    this.#policy.restoredCuts.install(key, record);
  }

  override async closeAdmission(request: CloseAdmissionRequest): Promise<void> {
    // Tells the cut service the checkpoint ID and closes the coordinator's own (idle) gate.
    await this.#policy.closeAdmission(request);
    const cuts = this.#policy.cuts;
    this.#round?.finish();
    this.#round =
      cuts === null
        ? null
        : new CutBarrier(
            cuts,
            this.pool.live().map((member) => member.index),
            request.deadline_ts ?? null,
          );
    try {
      await super.closeAdmission(request);
    } finally {
      // Every worker answered its close: nothing more will be handed in.
      this.#round?.finish();
    }
  }

  override async openAdmission(): Promise<void> {
    this.#round?.finish();
    this.#round = null;
    await this.#policy.openAdmission();
    await super.openAdmission();
  }

  override async retire(episode: EpisodeId, signal: AbortSignal): Promise<void> {
    // Every worker stops the attempt's calls first: no row can be appended after the fence.
    await super.retire(episode, signal);
    this.#outstanding.deleteCovered(episode);
    await this.#policy.retire(episode, signal);
  }

  /** The ledger rows of `scope` once, without any worker's undelivered calls, with the newest cuts. */
  override async export(
    scope: readonly EpisodeId[] | null,
    signal: AbortSignal,
  ): Promise<RecordBase[]> {
    const snapshots = await this.pool.callAll("policy_snapshot", () => ({}), signal);
    return await this.#policy.exportFrom(scope, snapshots, this.#policy.restoredCuts);
  }

  /** A model server's manifest names no session owners: calls are not routed by owner. */
  override manifestExtra(): Record<string, unknown> {
    return {};
  }

  override async restoreManifest(_manifest: Manifest): Promise<void> {}

  override async install(
    records: readonly RecordBase[],
    scope: readonly EpisodeId[],
    signal: AbortSignal,
  ): Promise<void> {
    // One worker that served a call is enough to refuse, as one process that served is.
    await this.pool.callAll("policy_check_fresh", () => ({}), signal);
    await this.#policy.install(records as readonly ModelRecord[], scope);
    const targets = [...this.#policy.gate.restoredTargets];
    // Every key whose files the import left for later, the fenced sources' included: a worker
    // asks for them to be written before it uses one (a late row of a source attempt must find
    // its fence).
    const owedKeys = this.#policy.ledger?.deferredKeys() ?? [];
    await this.pool.callAll(
      "policy_restored",
      () => ({ targets, owed_keys: owedKeys, cut_keys: this.#policy.restoredCuts.keys() }),
      signal,
    );
  }

  /** The coordinator imports the ledger itself: it validates every record, as one process does. */
  override async installStored(
    records: readonly StoredRecord[],
    scope: readonly EpisodeId[],
    signal: AbortSignal,
  ): Promise<void> {
    const validated = records.map((stored) =>
      this.#policy.recordFromStored(stored.value, stored.episode_id),
    );
    await this.install(validated, scope, signal);
  }

  /** Restored targets no worker has started: pending on every worker. */
  override async restoredPending(): Promise<EpisodeId[]> {
    const pending = new Set([...this.#policy.gate.restoredTargets]);
    if (pending.size === 0) return [];
    const lists = await this.pool.callAll("restored_pending", () => ({}));
    for (const list of lists) {
      const here = new Set(list.map(captureKey));
      for (const key of [...pending]) if (!here.has(key)) pending.delete(key);
    }
    return [...pending].sort(compareStrings).map(fromCaptureKey);
  }

  override async deleteRestored(episode: EpisodeId, signal: AbortSignal): Promise<void> {
    await this.#policy.deleteRestored(episode);
    await this.pool.callAll("delete_restored", () => ({ episode }), signal);
  }

  override statusExtra(): Record<string, unknown> {
    const extra = super.statusExtra();
    return {
      ...extra,
      ...mergeStatusExtras([
        { restored_generation_cuts: (extra.restored_generation_cuts as string[]) ?? [] },
        { restored_generation_cuts: this.#policy.restoredCuts.keys() },
      ]),
    };
  }
}
