/**
 * A generation-cut round seen from the policy gate (see docs/policy-model.md): the calls to cut
 * go to a {@link CutService} (the inference workers over HTTP in one process, the server's
 * coordinator with several workers), and the acks that come back become each ticket's cut and
 * cut record.
 *
 * @module
 */
import { generationCutRecordFromAck } from "../../capture/continuation.js";
import { conversationDigest } from "../../capture/fingerprints.js";
import type { GenerationCutPrefix, GenerationCutPrefixAck } from "../../capture/generation-cut.js";
import type { Ticket } from "./policy-gate.js";

/** One call to cut: its inventory entry and the inference worker serving it. */
export interface CutCandidate extends GenerationCutPrefix {
  /** The backend's OpenAI base URL (calls are grouped by it, one inventory each). */
  readonly backend: string;
}

/** Cuts calls: one inventory per backend, every call answered with an ack. */
export interface CutService {
  /**
   * Cuts `candidates` within half the prepare time left before `deadlineTs` (epoch seconds; null:
   * 30 s). Never throws for a failed cut: a call that could not be cut gets a `durable_failure`
   * ack (or none at all), which only costs regenerating it.
   */
  cut(
    candidates: readonly CutCandidate[],
    deadlineTs: number | null,
  ): Promise<ReadonlyMap<string, GenerationCutPrefixAck>>;
}

/** Calls digested per turn of the event loop while a cut request is out. */
const DIGESTS_PER_TURN = 256;

/**
 * `conversationDigest` of each call's request items, by ticket, a slice per event-loop turn so
 * the cut request already sent keeps flowing.
 */
async function requestDigestsOf(calls: readonly Ticket[]): Promise<Map<string, string>> {
  const digests = new Map<string, string>();
  for (let i = 0; i < calls.length; i += DIGESTS_PER_TURN) {
    await new Promise<void>((resolve) => setImmediate(resolve));
    for (const t of calls.slice(i, i + DIGESTS_PER_TURN)) {
      digests.set(t.ticketId, conversationDigest(t.capture?.requestItems ?? []));
    }
  }
  return digests;
}

/** The candidate of a ticket; null for one that cannot be cut (no backend, capture or episode). */
export function cutCandidateOf(t: Ticket): CutCandidate | null {
  if (t.backend === null || t.capture === null || t.episode === null) return null;
  return {
    ticket_id: t.ticketId,
    rollout_id: t.episode.rollout_id,
    attempt: t.episode.attempt,
    model_call_id: t.capture.modelCallId,
    admitted_at: t.admittedAt,
    backend: t.backend,
  };
}

/**
 * One round for `tickets` (calls on a worker, undelivered, cuttable): sends them to `service`,
 * computes the request digests the cut records need while the cut runs elsewhere, then sets
 * each ticket's `cut` (its ack) and `cutRecord` (built once, for a durable prefix).
 */
export async function cutTickets(
  service: CutService,
  tickets: readonly Ticket[],
  deadlineTs: number | null,
): Promise<void> {
  const calls: Ticket[] = [];
  const candidates: CutCandidate[] = [];
  for (const t of tickets) {
    const candidate = cutCandidateOf(t);
    if (candidate === null) continue;
    calls.push(t);
    candidates.push(candidate);
  }
  const acking = service.cut(candidates, deadlineTs);
  // Handled here, awaited below: a failure while the digests run is not unhandled.
  acking.catch(() => undefined);
  const digests = await requestDigestsOf(calls);
  // A service that cannot answer (its coordinator gone) cuts nothing: the calls regenerate.
  const acks = await acking.catch(() => new Map<string, GenerationCutPrefixAck>());
  for (const t of calls) {
    const ack = acks.get(t.ticketId);
    if (ack === undefined) continue;
    t.cut = ack;
    if (ack.disposition !== "durable_prefix") continue;
    const requestDigest = digests.get(t.ticketId);
    t.cutRecord = generationCutRecordFromAck(ack, {
      captureKey: t.captureKey,
      requestItems: t.capture?.requestItems ?? [],
      ...(requestDigest === undefined ? {} : { requestDigest }),
    });
  }
}
