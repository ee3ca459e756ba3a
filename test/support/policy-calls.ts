/**
 * Calls, cuts and a stand-in cut service for policy participant tests.
 */
import { conversationDigest } from "#sdk/capture/fingerprints.js";
import {
  generationCutFailureAck,
  type GenerationCutPrefixAck,
} from "#sdk/capture/generation-cut.js";
import type { EpisodeId } from "#sdk/identity/episode-id.js";
import type { CutCandidate, CutService } from "#sdk/participants/model/cut-service.js";
import type { PolicyParticipant } from "#sdk/participants/model/policy-participant.js";
import type { Ticket } from "#sdk/participants/model/policy-gate.js";
import type { CutRecord } from "#sdk/participants/model/restored-cuts.js";

/** The request items of call `id` (what a restored cut's request digest covers). */
export function itemsOf(id: string): unknown[] {
  return [{ role: "user", content: `question of ${id}` }];
}

/** Gives `ticket` the capture context of call `id`. */
export function capture(ticket: Ticket, id: string): Ticket {
  ticket.capture = { modelCallId: id, requestItems: itemsOf(id) };
  return ticket;
}

/** A generation cut record of call `id` of `key`, as the cut round builds it. */
export function cutOf(
  id: string,
  key: string,
  stagingKeys = [`__generation_cut__/${id}`],
): CutRecord {
  return {
    model_call_id: id,
    request_digest: conversationDigest(itemsOf(id)),
    continuation: {
      schema_version: 2,
      source_capture_key: key,
      source_model_call_id: id,
      staging_keys: stagingKeys,
      prefix_token_count: 7,
      prefix_digest: "b".repeat(64),
      effective_output_limit: 128,
      terminal_finish_reason: null,
      terminal_stop_reason: null,
    },
  };
}

/**
 * A cut service standing in for the inference workers: call IDs in `cuts` get the durable ack
 * their record was built from, the others a failure. `rounds` lists each round's call IDs (a
 * round of no calls sends nothing, as the real one).
 */
export function cutRound(cuts: Record<string, CutRecord>) {
  const rounds: string[][] = [];
  // Stands in for the inference workers: a round of no calls sends nothing.
  const service: CutService = {
    async cut(candidates) {
      if (candidates.length > 0) rounds.push(candidates.map((c) => c.model_call_id).sort());
      return new Map(
        candidates.map((c) => [c.ticket_id, ackOf(c, cuts[c.model_call_id])] as const),
      );
    },
  };
  return { service, rounds };
}

/** The ack a worker gives a call: the evidence `cut` was built from, or a failure. */
export function ackOf(c: CutCandidate, cut: CutRecord | undefined): GenerationCutPrefixAck {
  const identity = {
    ticket_id: c.ticket_id,
    rollout_id: c.rollout_id,
    attempt: c.attempt,
    model_call_id: c.model_call_id,
    admitted_at: c.admitted_at,
  };
  if (cut === undefined) {
    return generationCutFailureAck(identity);
  }
  return {
    ...identity,
    disposition: "durable_prefix",
    cut_kind: "active_prefix",
    frozen_buffer_id: "frozen-1",
    staging_keys: cut.continuation.staging_keys,
    prefix_token_count: cut.continuation.prefix_token_count,
    prefix_digest: cut.continuation.prefix_digest,
    effective_output_limit: cut.continuation.effective_output_limit,
    terminal_finish_reason: null,
    terminal_stop_reason: null,
  } as GenerationCutPrefixAck;
}

/** Admits a call of `e` as call `id`, already on a worker. */
export async function onWorker(
  p: PolicyParticipant,
  e: EpisodeId | null,
  id: string,
): Promise<Ticket> {
  const t = capture(await p.gate.admit(e), id);
  t.backend = "http://w0:8000/v1";
  return t;
}
