/**
 * One running activation of a tracked agent session, as its turn loop drives it: boundaries
 * recorded lazily, parking at a boundary while a checkpoint asks, policy calls counted at the
 * boundary before them, and the end that returns the session to idle (or removes it once
 * closing).
 *
 * @module
 */
import { EpisodeError } from "../../errors.js";
import type { EpisodeId } from "../../identity/episode-id.js";
import { untilSettledOrAborted } from "../../util/abortable.js";
import { deferred } from "../../util/deferred.js";
import type { JsonValue } from "../../json/json-value.js";
import type { ActivationTask, BoundarySnapshot, SessionPhase } from "./session-phase.js";
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

/**
 * The handle of `task`, the activation just started on `s` (already `running`), continuing
 * from `continuation`. Each state change refreshes `s` in `sessions` and calls `changed`.
 */
export function sessionActivation(
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
