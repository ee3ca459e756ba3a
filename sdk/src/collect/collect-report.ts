/**
 * What a collection run reports: the events a display shows as they happen, how each checkpoint
 * ended, where the run stands, how it ended, and the `gym collect` exit statuses of its stops.
 *
 * @see docs/collect.md
 */
import type { FailureStreak } from "./failure-streak.js";

/** The `gym collect` exit status of a run stopped by a preemption notice: requeue and resume. */
export const EXIT_PREEMPTED = 75;

/**
 * The `gym collect` exit status of a run stopped because its rows kept failing the same way
 * ({@link CollectOptions.maxFailures}): requeueing would fail again; fix the input or the
 * servers first.
 */
export const EXIT_FAILING = 3;

/** Something the run did that a display may show. */
export type CollectEvent =
  | { readonly type: "checkpoint"; readonly outcome: CheckpointOutcome }
  | { readonly type: "restored"; readonly checkpointId: string; readonly rows: number }
  | { readonly type: "restore_failed"; readonly checkpointId: string; readonly error: string }
  | { readonly type: "fenced"; readonly rows: number }
  | { readonly type: "recovered"; readonly checkpointIds: readonly string[] }
  /**
   * Participants that had not answered since a checkpoint failed answered its resume: the host
   * is back, and checkpoints are taken again.
   */
  | { readonly type: "reachable"; readonly servers: readonly string[] };

/** How one checkpoint ended. */
export type CheckpointOutcome =
  | {
      readonly status: "published";
      readonly checkpointId: string;
      readonly continued: number;
      readonly restarted: number;
      /** Dispatch paused, prepare through resume, in ms. */
      readonly pauseMs: number;
    }
  | {
      readonly status: "missed";
      readonly checkpointId: string;
      /** Server → episodes still busy at the deadline. */
      readonly blockers: Readonly<Record<string, readonly string[]>>;
      readonly pauseMs: number;
    }
  | {
      readonly status: "failed";
      readonly checkpointId: string;
      readonly error: string;
      readonly pauseMs: number;
    }
  | { readonly status: "unavailable"; readonly reason: string };

/** Where a run stands. */
export interface CollectProgress {
  readonly runId: string;
  readonly session: number;
  /** Rollouts in the run: rows × repeats. */
  readonly total: number;
  /** Rollouts with an output row (this session and earlier ones). */
  readonly ended: number;
  readonly finished: number;
  readonly failed: number;
  readonly inFlight: number;
  /** Rows fenced after a lost reply, waiting for the retire before they are sent again. */
  readonly fencing: number;
  /** Rollouts ended per second in this session. */
  readonly rate: number;
  /** Seconds to the end at that rate, or null before any rollout ended. */
  readonly etaSeconds: number | null;
  /** Mean reward over every output row with a reward, or null. */
  readonly meanReward: number | null;
  readonly checkpoints: {
    readonly published: number;
    readonly missed: number;
    readonly failed: number;
  };
  readonly lastCheckpoint: (CheckpointOutcome & { readonly at: string }) | null;
  readonly elapsedSeconds: number;
}

/** How a run ended. */
export interface CollectSummary extends CollectProgress {
  /**
   * `complete`: every rollout has its row; `stopped`: stopped by {@link Collection.stop};
   * `failing`: stopped because rollouts kept failing the same way ({@link failureStreak}).
   */
  readonly status: "complete" | "stopped" | "failing";
  /** How the rollouts that stopped a `failing` run failed; null otherwise. */
  readonly failureStreak: FailureStreak | null;
  readonly output: string;
  readonly checkpointDir: string | null;
  /** Rows restored from the latest checkpoint at the start of this session. */
  readonly restored: number;
  /** Rows fenced and sent again (at the start and after lost replies). */
  readonly fenced: number;
  /** Whether the stop published a checkpoint. */
  readonly stopCheckpoint: boolean | null;
}
