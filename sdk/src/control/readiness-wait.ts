import { msUntil, sleep } from "../util/deadline.js";
import type { Participant } from "./participant.js";

/** A waiting prepare re-checks readiness at least this often (ms) even without a notification. */
const READINESS_POLL_MS = 1000;

/** What a prepare's readiness wait watches besides the participant. */
export interface ReadinessWaitOptions {
  /** The prepare's deadline (Unix seconds): the wait returns then, ready or not. */
  readonly deadlineTs: number;
  /** Whether the prepare still waits (its checkpoint still active and preparing). */
  readonly stillPreparing: () => boolean;
  /** Throws to refuse the prepare when a process of the participant went missing. */
  readonly checkMembership: () => void;
}

/**
 * A prepare's wait for every execution to reach a boundary: returns once the participant is
 * ready, the prepare no longer waits (a resume ended it), or the deadline has passed. Woken by
 * the participant's change notifications, and re-checks at least every second without one.
 */
export async function waitForReadiness(
  participant: Pick<Participant, "nextChange" | "ready">,
  options: ReadinessWaitOptions,
): Promise<void> {
  const { deadlineTs, stillPreparing, checkMembership } = options;
  for (;;) {
    if (!stillPreparing()) return;
    const change = participant.nextChange();
    checkMembership();
    if (participant.ready()) return;
    const remaining = msUntil(deadlineTs);
    if (remaining <= 0) return;
    const poll = new AbortController();
    await Promise.race([
      change,
      sleep(Math.min(remaining, READINESS_POLL_MS), poll.signal).catch(() => undefined),
    ]);
    poll.abort();
  }
}
