/**
 * Restored generation cuts (see docs/policy-model.md): at most one per replacement attempt's
 * capture key, claimed by a re-issued call with the same request digest, and consumed only when
 * that call's response starts, so a call still undelivered at the next checkpoint continues
 * from it again if its own cut fails.
 *
 * @module
 */
import type { GenerationCutRecord } from "../../capture/continuation.js";
import { AttemptSet } from "../../control/attempt-keys.js";
import { fromCaptureKey, type EpisodeId } from "../../identity/episode-id.js";

/** A generation cut record (the wire model {@link GenerationCutRecord}). */
export type CutRecord = GenerationCutRecord;

/** A call's claim of a restored cut, settled when the call leaves. */
export interface CutClaim {
  readonly key: string;
  readonly record: CutRecord;
  /** The claiming call: a newer cut of it replaces the restored one and is settled with it. */
  readonly modelCallId: string;
}

/** The restored cuts of one model server process. */
export class RestoredCuts {
  readonly #cuts = new Map<string, CutRecord>();
  /** The keys of {@link #cuts} by rollout: a retire drops its own without scanning the rest. */
  readonly #keys = new AttemptSet();

  /**
   * Holds `record` for the replacement attempt `key` (replacing one held before); `episode`, the
   * attempt `key` names when the caller has it, spares parsing the key (a restore installs
   * thousands).
   */
  install(key: string, record: CutRecord, episode?: EpisodeId): void {
    if (!this.#cuts.has(key)) this.#keys.add(episode ?? fromCaptureKey(key));
    this.#cuts.set(key, record);
  }

  /** The cut held for `key`, or undefined. */
  get(key: string): CutRecord | undefined {
    return this.#cuts.get(key);
  }

  /** Sorted keys of the held cuts. */
  keys(): string[] {
    return [...this.#cuts.keys()].sort();
  }

  /** Number of held cuts. */
  get size(): number {
    return this.#cuts.size;
  }

  /** Drops the cut of `key`. */
  drop(key: string): void {
    this.#cuts.delete(key);
    this.#keys.delete(key);
  }

  /** Drops the cuts of `episode` and earlier attempts of its rollout. */
  dropCovered(episode: EpisodeId): void {
    for (const key of this.#keys.deleteCovered(episode)) this.#cuts.delete(key);
  }

  /**
   * Claims the cut of `key` for a call whose request digest is `requestDigest`; the cut stays
   * held until {@link settle}. Null when none matches.
   */
  take(key: string, requestDigest: string, modelCallId: string): CutClaim | null {
    const record = this.#cuts.get(key);
    if (record === undefined || record.request_digest !== requestDigest) return null;
    return { key, record, modelCallId };
  }

  /**
   * Settles a claim when its call leaves: the cut held for the key is consumed only if the
   * call's response started and it is still the claimed cut, or the claiming call's own newer
   * cut that replaced it.
   */
  settle(claim: CutClaim, responseStarted: boolean): void {
    if (!responseStarted) return;
    const held = this.#cuts.get(claim.key);
    if (held === claim.record || held?.model_call_id === claim.modelCallId) this.drop(claim.key);
  }
}
