/**
 * The activation contexts and legacy-run steps an agent's turn loop is handed, for each way a
 * call is tracked (by the checkpoint participant, or by nothing), and the wire error for work a
 * close or retire stopped.
 *
 * @module
 */
import { DetailError, EpisodeError } from "../../errors.js";
import type { EpisodeId } from "../../identity/episode-id.js";
import { legacySessionKey } from "../../participants/agent/agent-records.js";
import type { LegacyRunHandle } from "../../participants/agent/legacy-runs.js";
import { ActivationCancelledError } from "../../participants/agent/session-phase.js";
import { EpisodeRetiredError } from "../../steps/episode-errors.js";
import type { ActivationContext, LegacyRunSteps } from "./agent-hooks.js";

/** The context of an activation nothing tracks: boundaries are free, calls just run. */
export function untracked(stop: AbortSignal | null, request: AbortSignal): ActivationContext {
  const signal = stop === null ? request : AbortSignal.any([stop, request]);
  return {
    tracked: false,
    continuation: null,
    signal,
    boundary: () => Promise.resolve(),
    modelCall: (call) => call(signal),
  };
}

/** The wire error for work a close or retire stopped, or null when it was not stopped. */
export function stopReason(signal: AbortSignal): Error | null {
  if (!signal.aborted) return null;
  const reason: unknown = signal.reason;
  if (reason instanceof ActivationCancelledError) {
    return reason.why === "retired"
      ? new EpisodeError("stale_attempt", reason.message)
      : new DetailError(409, "Agent session was closed while the activation ran");
  }
  if (reason instanceof EpisodeError) return reason;
  if (reason instanceof EpisodeRetiredError) {
    return new EpisodeError("stale_attempt", reason.message);
  }
  return null;
}

/** The steps of a tracked legacy `/run`, over its participant handle. */
export function legacySteps(handle: LegacyRunHandle, dropKeptReply: () => void): LegacyRunSteps {
  return {
    sessionKey: handle.sessionKey,
    continuation: () => handle.continuation(),
    boundary: (state) => handle.boundary(state),
    step: (mode, fn) => handle.step(mode, fn),
    markRestart: (signal) => handle.markRestart(signal),
    dropKeptReply,
  };
}

/** The steps of an untracked legacy `/run` (checkpointing off): they just run. */
export function passThroughSteps(episode: EpisodeId | null, signal: AbortSignal): LegacyRunSteps {
  return {
    sessionKey: legacySessionKey(episode?.rollout_id ?? "unknown"),
    continuation: () => null,
    boundary: () => Promise.resolve(),
    step: async (_mode, fn) => await fn(signal),
    markRestart: () => Promise.resolve(),
    dropKeptReply: () => undefined,
  };
}
