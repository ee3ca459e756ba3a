/**
 * Errors of the episode steps runner. A duplicate `begin` is a wire refusal (409
 * `checkpoint_error`); the two abort reasons are local: they tell an episode's work to stop and
 * never reach the wire as themselves.
 *
 * @module
 */
import { EpisodeError } from "../errors.js";

/**
 * `begin` of a capture key that is already tracked: running, being stopped, or left by a retire
 * that was cut short. The live episode is untouched. Maps to 409 `checkpoint_error`.
 *
 * @example
 * try {
 *   steps.begin("task-3-a1");
 * } catch (error) {
 *   if (error instanceof EpisodeAlreadyRunningError) console.log(error.code); // "checkpoint_error"
 * }
 */
export class EpisodeAlreadyRunningError extends EpisodeError {
  override name = "EpisodeAlreadyRunningError";

  /** @param key - The capture key that is already tracked. */
  constructor(key: string) {
    super(
      "checkpoint_error",
      `episode ${key} is already running; wait for it to end, or retire it, before running it again`,
      key,
    );
  }
}

/**
 * The abort reason of an episode that was retired: its work must stop now. A boundary the
 * episode is parked at rejects with it too. The retire waits until the episode has ended.
 */
export class EpisodeRetiredError extends Error {
  override name = "EpisodeRetiredError";

  /** @param captureKey - The retired episode. */
  constructor(readonly captureKey: string) {
    super(
      `episode ${captureKey} was retired: stop its work; the retire waits until the episode has ended`,
    );
  }
}

/**
 * The abort reason of an episode whose deadline passed. Time parked for a checkpoint, or spent
 * in a replay step while a checkpoint is open, does not count, so it may fire after
 * `deadlineTs`.
 */
export class EpisodeDeadlineError extends Error {
  override name = "EpisodeDeadlineError";

  /**
   * @param captureKey - The episode that timed out.
   * @param deadlineTs - Its deadline as given to `begin` (Unix seconds).
   */
  constructor(
    readonly captureKey: string,
    readonly deadlineTs: number,
  ) {
    super(
      `episode ${captureKey} timed out: its deadline ${formatTs(deadlineTs)} passed (time parked ` +
        `for checkpoints not counted); stop its work and report the timeout`,
    );
  }
}

function formatTs(ts: number): string {
  const date = new Date(ts * 1000);
  return Number.isNaN(date.getTime()) ? String(ts) : date.toISOString();
}
