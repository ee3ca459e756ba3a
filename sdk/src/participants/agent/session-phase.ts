/**
 * Where one agent session is in the checkpoint cycle: idle, running an activation, or parked at
 * a boundary; its lazy snapshot, restored continuation and retire mark. A phase lives on its
 * session's entry in the agent's session table, and reads the session's key, attempt and
 * closing mark from there: they are kept once.
 *
 * @module
 */
import { captureKey, type EpisodeId } from "../../identity/episode-id.js";
import { deferred, type Deferred } from "../../util/deferred.js";
import type { JsonValue } from "../../json/json-value.js";

/** Where a session is. */
export type AgentSessionState = "idle" | "running" | "at_boundary";

/** A lazy boundary: called at most once, at export, while the session is parked. */
export type BoundarySnapshot = () => JsonValue;

/** Why a session's activation was cancelled. */
export class ActivationCancelledError extends Error {
  override name = "ActivationCancelledError";
  constructor(
    readonly sessionKey: string,
    readonly why: "closing" | "retired",
  ) {
    super(
      why === "closing"
        ? `agent session ${sessionKey} is closing: its activation stops`
        : `agent session ${sessionKey} was retired: its activation stops`,
    );
  }
}

/** One running activation's cancellation and end. */
export class ActivationTask {
  readonly controller = new AbortController();
  /** Aborted by a close or a retire (once). */
  cancelled = false;
  done = false;
  readonly ended = deferred<void>();
  /** The handle's signal: the task's controller and the request's signal. */
  readonly signal: AbortSignal;

  constructor(parent: AbortSignal | undefined) {
    this.signal =
      parent === undefined
        ? this.controller.signal
        : AbortSignal.any([this.controller.signal, parent]);
  }

  cancel(reason: ActivationCancelledError): void {
    if (this.cancelled || this.done) return;
    this.cancelled = true;
    this.controller.abort(reason);
  }
}

/** What a phase reads from its session's table entry. */
export interface PhaseOwner {
  readonly key: string;
  readonly episode: EpisodeId;
  closing: boolean;
  /** The phase tracking the session, or null when the participant does not track it. */
  phase: SessionPhase | null;
}

/** A tracked session's checkpoint phase. */
export class SessionPhase {
  state: AgentSessionState = "idle";
  parkRequested = false;
  snapshot: BoundarySnapshot | null = null;
  continuation: JsonValue | null = null;
  activation: ActivationTask | null = null;
  wake: Deferred<void> | null = null;
  restoredPending = false;
  retired = false;
  /** Mirror of membership in the blocking set of the tracked sessions (tracked-sessions.ts). */
  blocking = false;
  readonly captureKey: string;

  constructor(readonly owner: PhaseOwner) {
    this.captureKey = captureKey(owner.episode);
  }

  get key(): string {
    return this.owner.key;
  }

  get episode(): EpisodeId {
    return this.owner.episode;
  }

  get closing(): boolean {
    return this.owner.closing;
  }

  /** Whether this phase still tracks its session (a retire or close may have ended it). */
  get tracked(): boolean {
    return this.owner.phase === this;
  }
}
