/**
 * The collector's guard against systematic failures: rows the environment refuses because the
 * dataset lacks a field, or servers that are down, fail every rollout the same way, and a run
 * that goes on writes one failure row per row of the dataset. {@link FailureWatch} follows the
 * rollouts as they end; once `limit` of them in a row failed the same way (same failure kind and
 * error code) it reports the {@link FailureStreak} and the run stops.
 *
 * ## Rules
 *
 * - A failure row is held (not written) while the rows before it since the last finished row
 *   failed the same way. A finished row, or a failure of another kind or code, writes the held
 *   rows: they were not systematic after all.
 * - When the streak reaches the limit, its rows are dropped, not written: the dispatch log names
 *   them, so a `--resume` after the fix fences them and sends them again.
 * - At the run's end (or a stop), the rows still held are written.
 *
 * @see docs/collect.md
 */
import type { FailureKind, RolloutRow, RowFailure } from "./rollout-row.js";
import type { TaskId } from "../wire/environment.js";

/** Failures in a row of the same kind and code that stop a run, unless told otherwise. */
export const DEFAULT_MAX_FAILURES = 20;

/** The failures that stopped a run: `rollouts` rollouts in a row failed this same way. */
export interface FailureStreak {
  /** How each of them failed (see {@link FailureKind}). */
  readonly kind: FailureKind;
  /** The error envelope's code (`invalid_request`, ...), when a server refused. */
  readonly code: string | null;
  /** The HTTP status, when a server answered. */
  readonly status: number | null;
  /** Rollouts in the streak; none of them has an output row (a resume sends them again). */
  readonly rollouts: number;
  /** The first of them. */
  readonly example: {
    readonly rollout_id: string;
    readonly row: number;
    readonly task_id: TaskId;
    readonly message: string;
  };
}

/** What to do with a rollout that ended. */
export interface WatchVerdict {
  /** Rows to write now (in the order they ended). */
  readonly write: readonly RolloutRow[];
  /** Set when this rollout completed a streak of `limit`: stop the run. */
  readonly streak: FailureStreak | null;
}

function signature(failure: RowFailure): string {
  return `${failure.kind}\u0000${failure.code ?? ""}`;
}

/** Follows ended rollouts and holds back failure rows while they may be systematic. */
export class FailureWatch {
  #held: RolloutRow[] = [];

  /** `limit`: failures in a row that stop the run; 0 turns the watch off (every row is written). */
  constructor(readonly limit: number) {}

  /** Failure rows held back now: ended, not written yet. */
  get held(): number {
    return this.#held.length;
  }

  /** A rollout ended with `row`: which rows to write now, and whether the run must stop. */
  ended(row: RolloutRow): WatchVerdict {
    const failure = row.failure;
    if (this.limit === 0) return { write: [row], streak: null };
    if (failure === null) return { write: [...this.drain(), row], streak: null };
    const first = this.#held[0];
    const write =
      first?.failure !== undefined &&
      first.failure !== null &&
      signature(first.failure) === signature(failure)
        ? []
        : this.drain();
    this.#held.push(row);
    if (this.#held.length < this.limit) return { write, streak: null };
    const streak = streakOf(this.#held);
    this.#held = [];
    return { write, streak };
  }

  /** Takes every held row (to write them). */
  drain(): RolloutRow[] {
    const held = this.#held;
    this.#held = [];
    return held;
  }
}

function streakOf(rows: readonly RolloutRow[]): FailureStreak {
  const first = rows[0] as RolloutRow;
  const failure = first.failure as RowFailure;
  return {
    kind: failure.kind,
    code: failure.code,
    status: failure.status,
    rollouts: rows.length,
    example: {
      rollout_id: first.rollout_id,
      row: first.row,
      task_id: first.task_id,
      message: failure.message,
    },
  };
}
