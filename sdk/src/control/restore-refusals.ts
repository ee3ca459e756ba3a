import { CheckpointError, EpisodeError, GymError } from "../errors.js";
import { nextAttempt, sortedCaptureKeys, type EpisodeId } from "../identity/episode-id.js";
import type { RetiredAttempts } from "./retired-attempts.js";

/**
 * Refuses a restore whose replacement attempts are already retired here (`stale_attempt`),
 * before anything changes. They are after a failed restore in this process (the controller
 * retires every replacement then), or after a retire: installed, their state could never
 * run, and would stand as a blocker of every later prepare. The contract is silent here;
 * this is the typed refusal instead of state nobody can use.
 */
export function refuseRetiredReplacements(
  marks: RetiredAttempts,
  episodes: readonly EpisodeId[],
): void {
  // A fresh process (the usual restore) has no marks: nothing to look up per episode.
  if (marks.size === 0) return;
  // The replacement (attempt + 1) is retired when its rollout's mark reaches it.
  const retired = episodes.filter((e) => (marks.markOf(e.rollout_id) ?? -1) > e.attempt);
  if (retired.length === 0) return;
  const keys = sortedCaptureKeys(retired.map(nextAttempt));
  const rollouts = [...new Set(retired.map((e) => e.rollout_id))].sort();
  const shown = (list: readonly string[]) =>
    list.slice(0, 5).join("', '") + (list.length > 5 ? `' and ${list.length - 5} more` : "'");
  throw new EpisodeError(
    "stale_attempt",
    `restore refused: the replacement attempt(s) '${shown(keys)} are retired here ` +
      "(a failed restore retires its replacements everywhere); forget rollout(s) " +
      `'${shown(rollouts)} first, or restore into freshly started servers`,
    keys[0] ?? null,
  );
}

/**
 * A restore step's failure as a typed refusal: a typed error as it is; anything else (a
 * participant hook or the file system failing in a way nobody typed) as 409 `checkpoint_error`
 * naming the step, instead of a 500 that tells the controller nothing.
 */
export function typedRestoreFailure(error: unknown, step: string): unknown {
  if (error instanceof GymError) return error;
  const message = error instanceof Error ? error.message : String(error);
  return new CheckpointError(
    "checkpoint_error",
    `the restore failed while ${step}: ${message}; restore again, into freshly started servers if it fails again`,
    { cause: error },
  );
}
