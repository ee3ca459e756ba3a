/**
 * One activation of a tracked agent session: started on its phase, then driven by the turn
 * loop (boundaries recorded lazily, parking at a boundary while a checkpoint asks, policy calls
 * counted at the boundary before them) until the end returns the session to idle or removes it
 * once closing.
 *
 * @module
 */
import { CheckpointError, EpisodeError } from "../../errors.js";
import { captureKey, sameEpisode, type EpisodeId } from "../../identity/episode-id.js";
import { untilSettledOrAborted } from "../../util/abortable.js";
import { deferred } from "../../util/deferred.js";
import type { JsonValue } from "../../json/json-value.js";
import { ActivationTask, type BoundarySnapshot, type SessionPhase } from "./session-phase.js";
import type { TrackedSessions } from "./tracked-sessions.js";

/**
 * One running activation of a session: the turn loop records boundaries through it and wraps
 * each policy call made right after a boundary in {@link modelCall}.
 */
export interface AgentActivation {
  /** The session key. */
  readonly sessionKey: string;
  /** The attempt that owns the session. */
  readonly episode: EpisodeId;
  /** The restored boundary this activation continues from (consumed by this activation), or null. */
  readonly continuation: JsonValue | null;
  /** Aborted when a close or retire cancels the activation, or the request's signal fires. */
  readonly signal: AbortSignal;
  /**
   * Records a boundary: a function building the loop's state, called only at export. Parks
   * here while a checkpoint asked the session to park, until resume.
   * @throws EpisodeError `stale_attempt` when the session was retired or closed under it.
   */
  boundary(snapshot: BoundarySnapshot): Promise<void>;
  /**
   * Runs a policy call made right after a boundary: during it the session counts as parked at
   * that boundary; a reply arriving while a checkpoint is open is held here until resume.
   */
  modelCall<T>(call: (signal: AbortSignal) => Promise<T>): Promise<T>;
  /** The activation ended (normally, with an error or cancelled); idempotent. Call in `finally`. */
  end(): void;
}

/** What {@link startPhaseActivation} needs of the participant. */
export interface ActivationContext {
  /** The request's signal, which also aborts the activation. */
  readonly signal: AbortSignal | undefined;
  /** Whether a checkpoint is open: the activation parks at its first boundary. */
  readonly parkRequested: boolean;
  /** The tracked sessions, refreshed at each state change. */
  readonly sessions: TrackedSessions;
  /** Called after each state change (readiness or the counts may have changed). */
  readonly changed: () => void;
}

/**
 * Starts an activation on `s`, the phase tracking `key`, for `episode`: the session runs, the
 * activation claims it (when restored) and takes its continuation.
 *
 * @throws EpisodeError `stale_attempt` (the session is another attempt's, or retired);
 * CheckpointError `checkpoint_error` (no such session, or one already running).
 */
export function startPhaseActivation(
  s: SessionPhase | undefined,
  key: string,
  episode: EpisodeId,
  context: ActivationContext,
): AgentActivation {
  if (s === undefined || s.closing) {
    throw new CheckpointError("checkpoint_error", `agent session ${key} is not open`);
  }
  if (!sameEpisode(s.episode, episode)) {
    throw new EpisodeError(
      "stale_attempt",
      `agent session ${key} belongs to attempt ${s.captureKey}, not ${captureKey(episode)}`,
      captureKey(episode),
    );
  }
  if (s.retired) throw EpisodeError.staleAttempt(s.captureKey, s.episode.attempt);
  if (s.state !== "idle" || s.activation !== null) {
    throw new CheckpointError(
      "checkpoint_error",
      `agent session ${key} already has an active activation`,
    );
  }
  const task = new ActivationTask(context.signal);
  s.state = "running";
  s.parkRequested = context.parkRequested;
  s.activation = task;
  const continuation = s.continuation;
  s.continuation = null;
  s.restoredPending = false;
  context.sessions.refresh(s);
  context.changed();
  return activationHandle(s, task, continuation, context.sessions, context.changed);
}

/**
 * The handle of `task`, the activation just started on `s` (already `running`), continuing
 * from `continuation`. Each state change refreshes `s` in `sessions` and calls `changed`.
 */
function activationHandle(
  s: SessionPhase,
  task: ActivationTask,
  continuation: JsonValue | null,
  sessions: TrackedSessions,
  changed: () => void,
): AgentActivation {
  const moved = (state: SessionPhase["state"]): void => {
    s.state = state;
    sessions.refresh(s);
    changed();
  };

  const requireLive = (): void => {
    if (!s.tracked || s.retired || s.activation !== task) {
      throw EpisodeError.staleAttempt(s.captureKey, s.episode.attempt);
    }
    task.signal.throwIfAborted();
  };

  const park = async (): Promise<void> => {
    moved("at_boundary");
    for (;;) {
      s.wake = deferred<void>();
      try {
        await untilSettledOrAborted(s.wake.promise, [task.signal]);
      } finally {
        s.wake = null;
      }
      requireLive();
      if (!s.parkRequested) break;
    }
    moved("running");
  };

  async function modelCall<T>(call: (signal: AbortSignal) => Promise<T>): Promise<T> {
    requireLive();
    const afterBoundary = s.snapshot !== null;
    if (afterBoundary) moved("at_boundary");
    let result: T;
    try {
      result = await call(task.signal);
    } catch (error) {
      if (afterBoundary && s.activation === task) moved("running");
      throw error;
    }
    requireLive();
    // The checkpoint counted this session at the boundary before the call: hold the reply.
    if (afterBoundary && s.parkRequested) await park();
    else if (afterBoundary) moved("running");
    return result;
  }

  return {
    sessionKey: s.key,
    episode: s.episode,
    continuation,
    signal: task.signal,
    boundary: async (snapshot) => {
      requireLive();
      s.snapshot = snapshot;
      if (s.parkRequested) await park();
    },
    modelCall,
    end: () => {
      if (task.done) return;
      task.done = true;
      if (s.activation === task) {
        s.activation = null;
        s.snapshot = null;
        s.state = "idle";
        if (s.tracked && s.closing && !s.retired) sessions.untrack(s);
        else sessions.refresh(s);
      }
      task.ended.resolve();
      changed();
    },
  };
}
