import { SAFE_ID_PATTERN, fromCaptureKey, type EpisodeId } from "./episode-id.js";

/** The path segment that introduces a rollout prefix: `/ng-rollout/<capture key>/<rest>`. */
export const ROLLOUT_SEGMENT = "ng-rollout";

/** A path with its rollout prefix removed. */
export interface StrippedRolloutPath {
  /** The capture key as written in the path. */
  readonly captureKey: string;
  /** The path the handler sees: `/<rest>` (always starts with `/`). */
  readonly rest: string;
}

/**
 * Builds the prefix a client puts in front of a model or resources call made for a rollout.
 *
 * @example
 * rolloutPath("r-a1", "/v1/responses"); // "/ng-rollout/r-a1/v1/responses"
 */
export function rolloutPath(key: string, path: string): string {
  const rest = path.startsWith("/") ? path : `/${path}`;
  return `/${ROLLOUT_SEGMENT}/${key}${rest}`;
}

/**
 * Splits `/ng-rollout/<key>/<rest>` into its key and rest. Returns null when the path does not
 * start with the segment at all; throws nothing: a path that starts with the segment but has a
 * malformed key (or no `/` after it) is reported with `malformed: true` so the caller picks the
 * refusal (the policy model answers 400 `invalid_rollout_id`).
 */
export function splitRolloutPath(
  path: string,
): StrippedRolloutPath | { readonly malformed: true; readonly captureKey: string } | null {
  const head = `/${ROLLOUT_SEGMENT}/`;
  if (!path.startsWith(head)) return null;
  const slash = path.indexOf("/", head.length);
  if (slash < 0) return { malformed: true, captureKey: path.slice(head.length) };
  const key = path.slice(head.length, slash);
  if (!SAFE_ID_PATTERN.test(key)) return { malformed: true, captureKey: key };
  return { captureKey: key, rest: path.slice(slash) };
}

/** Decodes the EpisodeId of a prefixed path's key, or null when the key names no episode. */
export function episodeOfKey(key: string): EpisodeId | null {
  try {
    return fromCaptureKey(key);
  } catch {
    return null;
  }
}
