import { EpisodeError } from "../errors.js";
import {
  SAFE_ID_PATTERN,
  captureKey,
  episodeId,
  fromCaptureKey,
  type EpisodeId,
} from "./episode-id.js";

/**
 * Why a `/run` body's rollout fields are refused: 400 `invalid_rollout_id` (the agent's legacy
 * `/run`); the environment server answers the same refusal as 422 `invalid_request` naming
 * `field` (see docs/environment-server.md).
 */
export class InvalidRunRolloutError extends EpisodeError {
  override name = "InvalidRunRolloutError";
  constructor(
    readonly reason: string,
    /** The body field at fault. @default "_ng_rollout_id" */
    readonly field: string = "_ng_rollout_id",
  ) {
    super("invalid_rollout_id", reason);
  }
}

/** The rollout fields a `/run` body may carry. */
export interface RunRolloutFields {
  readonly _ng_rollout_id?: unknown;
  readonly _ng_task_index?: unknown;
  readonly _ng_rollout_index?: unknown;
  readonly _ng_attempt_index?: unknown;
}

function indexValue(name: string, value: unknown): number | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    throw new InvalidRunRolloutError(
      `${name} must be an integer >= 0, got ${JSON.stringify(value)}`,
      name,
    );
  }
  return value;
}

/**
 * The episode a `/run` body names, or null when it names none (no explicit ID and an index
 * missing).
 *
 * Rules (see docs/concepts.md):
 * - `_ng_rollout_id` must be a string matching `^[A-Za-z0-9][A-Za-z0-9._-]*$`; it is never
 *   sanitized. It may end in `-a<N>`, naming attempt N (how a controller sends a replacement).
 * - Without it the rollout ID is `"<task>-<rollout>"` from `_ng_task_index` and
 *   `_ng_rollout_index`.
 * - `_ng_attempt_index` (absent or null → 0) is the attempt. A suffixed explicit ID together
 *   with an attempt index > 0 is refused: a second suffix would decode to no episode.
 *
 * Throws {@link InvalidRunRolloutError} for every refusal.
 */
export function episodeFromRunBody(body: RunRolloutFields): EpisodeId | null {
  const attempt = indexValue("_ng_attempt_index", body._ng_attempt_index) ?? 0;
  const explicit = body._ng_rollout_id;
  if (explicit !== undefined && explicit !== null) {
    if (typeof explicit !== "string" || !SAFE_ID_PATTERN.test(explicit)) {
      throw new InvalidRunRolloutError(
        `_ng_rollout_id must be a string matching ^[A-Za-z0-9][A-Za-z0-9._-]*$, got ${JSON.stringify(explicit)}`,
        "_ng_rollout_id",
      );
    }
    let decoded: EpisodeId;
    try {
      decoded = fromCaptureKey(explicit);
    } catch (error) {
      throw new InvalidRunRolloutError(
        `_ng_rollout_id ${(error as Error).message}`,
        "_ng_rollout_id",
      );
    }
    if (decoded.attempt > 0 && attempt > 0) {
      throw new InvalidRunRolloutError(
        `_ng_rollout_id ${JSON.stringify(explicit)} already names attempt ${decoded.attempt}; ` +
          "do not also send _ng_attempt_index",
        "_ng_attempt_index",
      );
    }
    return decoded.attempt > 0 ? decoded : episodeId(decoded.rollout_id, attempt);
  }
  const task = indexValue("_ng_task_index", body._ng_task_index);
  const rollout = indexValue("_ng_rollout_index", body._ng_rollout_index);
  if (task === null || rollout === null) return null;
  return episodeId(`${task}-${rollout}`, attempt);
}

/** The capture key of a `/run` body, or null when it names no episode. */
export function captureKeyFromRunBody(body: RunRolloutFields): string | null {
  const e = episodeFromRunBody(body);
  return e === null ? null : captureKey(e);
}
