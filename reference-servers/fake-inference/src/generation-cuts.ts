/**
 * The worker side of a generation cut (see docs/policy-model.md): for each call of the
 * inventory, stage the tokens it generated so far under a key of its own and acknowledge a
 * durable prefix; answer every other call with a failure ack. The receipt is returned only once
 * every prefix is on disk: it is the durability boundary.
 *
 * @module
 */
import { randomUUID } from "node:crypto";
import { fromCaptureKey, InvalidRequestError } from "gym-participant-sdk";
import type { CallLog } from "./call-log.js";
import type { LiveCall, LiveCalls } from "./live-calls.js";
import {
  CaptureError,
  generationCutFailureAck,
  inventoryDigest,
  validateReceiptFor,
  type GenerationCutInventory,
  type GenerationCutPrefix,
  type GenerationCutPrefixAck,
  type GenerationCutReceipt,
  type StagedCallRecord,
  type RolloutTokenCapture,
} from "./sdk-capture.js";
import type { TokenStore } from "./token-store.js";

/** The staging key of a call's cut prefix: opaque to everyone but this backend. */
export function cutStagingKey(captureKey: string, modelCallId: string): string {
  return `__generation_cut__/${captureKey}/${modelCallId}`;
}

/** Whether a capture key names the prefix's rollout and attempt. */
function sameAttempt(key: string, prefix: GenerationCutPrefix): boolean {
  try {
    const episode = fromCaptureKey(key);
    return episode.rollout_id === prefix.rollout_id && episode.attempt === prefix.attempt;
  } catch {
    return false;
  }
}

/** What cutting needs. */
export interface GenerationCutterDeps {
  readonly live: LiveCalls;
  readonly capture: RolloutTokenCapture;
  readonly store: TokenStore;
  readonly log: CallLog;
  readonly logger: { warn(context: object, message: string): void };
  /** Names the backend's state in receipts (`backend_snapshot_id`). */
  readonly backendName: string;
  readonly weightVersion: number;
}

/**
 * Serves cut requests.
 *
 * Rules:
 * - A call gets a `durable_prefix` ack when it is captured, still in flight here, of the
 *   inventory's rollout and attempt, and has generated at least one token (a continued call's
 *   reused prefix counts). The ack's `prefix_digest` is the staged record's digest and its
 *   `effective_output_limit` the call's whole budget. A call whose generation already ended (its
 *   reply is being sent) is a `terminal_completion`.
 * - A held call that is cut stays held; a cut never stops a generation.
 * - Each round is logged: the model call IDs it cut.
 */
export class GenerationCutter {
  constructor(readonly deps: GenerationCutterDeps) {}

  /**
   * Cuts an inventory. Refuses (422) one whose digest does not match its content or that names a
   * ticket twice: no receipt could answer it.
   */
  async cut(inventory: GenerationCutInventory): Promise<GenerationCutReceipt> {
    if (inventoryDigest(inventory) !== inventory.inventory_digest) {
      throw new InvalidRequestError("inventory_digest does not match the inventory", [
        { path: ["inventory_digest"], message: "does not match the inventory" },
      ]);
    }
    const tickets = new Set(inventory.active_prefixes.map((prefix) => prefix.ticket_id));
    if (tickets.size !== inventory.active_prefixes.length) {
      throw new InvalidRequestError("each ticket_id may appear once in an inventory", [
        { path: ["active_prefixes"], message: "duplicate ticket_id" },
      ]);
    }
    const cutId = `cut-${randomUUID()}`;
    // Every prefix of the round is staged in one durable batch: one fsync per round, not per
    // call, so a round over thousands of calls stays well inside the prepare's budget.
    const plans = inventory.active_prefixes.map((prefix) => this.#plan(prefix));
    const staged = plans.filter((plan): plan is CutPlan => !("disposition" in plan));
    let stagedOk = true;
    try {
      await this.deps.store.putMany(staged.map((plan) => [plan.key, plan.record]));
    } catch (error) {
      this.deps.logger.warn({ err: error, calls: staged.length }, "cannot stage the cut prefixes");
      stagedOk = false;
    }
    const acks = plans.map((plan) =>
      "disposition" in plan
        ? plan
        : stagedOk
          ? this.#ack(plan, cutId)
          : generationCutFailureAck(plan.prefix),
    );
    this.deps.log.recordCutRound(
      acks.filter((ack) => ack.disposition === "durable_prefix").map((ack) => ack.model_call_id),
    );
    // Built from the validated inventory and acks of the wire types: checked for coverage and
    // identity, not parsed again (a round over thousands of calls would parse them twice).
    const receipt: GenerationCutReceipt = {
      checkpoint_id: inventory.checkpoint_id,
      cut_id: cutId,
      inventory_digest: inventory.inventory_digest,
      inventory,
      backend_snapshot_id: `${this.deps.backendName}@${this.deps.weightVersion}`,
      prefixes: acks,
    };
    validateReceiptFor(receipt, inventory);
    return receipt;
  }

  /** What staging `prefix` needs, or its failure ack when the call cannot be cut. */
  #plan(prefix: GenerationCutPrefix): CutPlan | GenerationCutPrefixAck {
    const live = this.deps.live.get(prefix.model_call_id);
    if (live === undefined || !sameAttempt(live.call.rolloutId, prefix)) {
      return generationCutFailureAck(prefix);
    }
    const { call } = live;
    let record: StagedCallRecord;
    try {
      record = this.deps.capture.buildPrefixRecord(call, {
        promptTokenIds: live.enginePrompt,
        generatedTokenIds: live.generated,
        generatedLogprobs: live.logprobs,
      });
    } catch (error) {
      if (!(error instanceof CaptureError)) throw error;
      this.deps.logger.warn({ err: error, call: call.modelCallId }, "cannot cut this call");
      return generationCutFailureAck(prefix);
    }
    const generated = record.token_mask_delta.filter((mask) => mask === 1).length;
    if (generated === 0) return generationCutFailureAck(prefix);
    return {
      prefix,
      live,
      record,
      generated,
      key: cutStagingKey(call.rolloutId, call.modelCallId),
    };
  }

  /** The durable ack of a staged plan. */
  #ack(plan: CutPlan, cutId: string): GenerationCutPrefixAck {
    const finished = plan.live.finishReason;
    const { prefix } = plan;
    // Spelled out, not spread: a spread followed by ten more fields builds a slow object, and a
    // round acknowledges thousands.
    return {
      ticket_id: prefix.ticket_id,
      rollout_id: prefix.rollout_id,
      attempt: prefix.attempt,
      model_call_id: prefix.model_call_id,
      admitted_at: prefix.admitted_at,
      disposition: "durable_prefix",
      cut_kind: finished === null ? "active_prefix" : "terminal_completion",
      frozen_buffer_id: `${cutId}/${plan.live.call.modelCallId}`,
      staging_keys: [plan.key],
      prefix_token_count: plan.generated,
      prefix_digest: plan.record.digest,
      effective_output_limit: plan.live.effectiveOutputLimit,
      terminal_finish_reason: finished,
      terminal_stop_reason: null,
    };
  }
}

/** A call of the round that can be cut, with the record to stage for it. */
interface CutPlan {
  readonly prefix: GenerationCutPrefix;
  readonly live: LiveCall;
  readonly record: StagedCallRecord;
  readonly generated: number;
  readonly key: string;
}
