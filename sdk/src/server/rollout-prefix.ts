import type { Request, RequestHandler } from "express";
import { EpisodeError } from "../errors.js";
import { fromCaptureKey, type EpisodeId } from "../identity/episode-id.js";
import { splitRolloutPath } from "../identity/rollout-prefix.js";

/** The rollout a request was made for, from its `/ng-rollout/<capture key>/` prefix. */
export interface RolloutContext {
  /** The capture key as written in the path (`r` or `r-aN`). */
  readonly captureKey: string;
  /** The attempt the key names. */
  readonly episodeId: EpisodeId;
  /** The prefix went on with `/training-token-capture` (stripped too). */
  readonly tokenCapture: boolean;
}

/** The optional segment after a rollout prefix that asks for training token capture. */
export const TOKEN_CAPTURE_SEGMENT = "/training-token-capture";

const contexts = new WeakMap<Request, RolloutContext>();

/**
 * The rollout of a request, or null when it came without a prefix.
 *
 * @example
 * app.post("/verify", (req, res) => {
 *   const rollout = rolloutOf(req); // { captureKey: "r-a1", episodeId: { rollout_id: "r", attempt: 1 } }
 * });
 */
export function rolloutOf(req: Request): RolloutContext | null {
  return contexts.get(req) ?? null;
}

/**
 * Strips `/ng-rollout/<capture key>/` (and a `/training-token-capture` segment right after it)
 * before routing (handlers see `/<rest>`) and records the request's {@link RolloutContext}. A prefix whose key is malformed or names no episode is
 * refused with 400 `invalid_rollout_id`.
 */
export function rolloutPrefix(): RequestHandler {
  return (req, _res, next) => {
    const queryAt = req.url.indexOf("?");
    const path = queryAt < 0 ? req.url : req.url.slice(0, queryAt);
    const split = splitRolloutPath(path);
    if (split === null) {
      next();
      return;
    }
    if ("malformed" in split) {
      next(
        EpisodeError.invalidRolloutId(
          `malformed rollout prefix: ${JSON.stringify(split.captureKey)}`,
        ),
      );
      return;
    }
    let episodeId: EpisodeId;
    try {
      episodeId = fromCaptureKey(split.captureKey);
    } catch (error) {
      next(EpisodeError.invalidRolloutId((error as Error).message));
      return;
    }
    let rest = split.rest;
    const tokenCapture = rest.startsWith(`${TOKEN_CAPTURE_SEGMENT}/`);
    if (tokenCapture) rest = rest.slice(TOKEN_CAPTURE_SEGMENT.length);
    contexts.set(req, { captureKey: split.captureKey, episodeId, tokenCapture });
    req.url = rest + (queryAt < 0 ? "" : req.url.slice(queryAt));
    next();
  };
}
