/**
 * The request tracking of a restart-only agent: every `/run` and
 * `/v1/responses` call is tracked under its capture key while it runs, so a prepare reports it
 * as a restart and a retire can stop it.
 *
 * @module
 */
import express, { type Express, type RequestHandler } from "express";
import { EpisodeError } from "../../errors.js";
import { fromCaptureKey, type EpisodeId } from "../../identity/episode-id.js";
import { captureKeyFromRunBody, type RunRolloutFields } from "../../identity/run-body.js";
import type {
  RestartOnlyAgentParticipant,
  TrackedRequest,
} from "../../participants/agent/restart-only-participant.js";
import { handlerSettled, linkCancellation } from "../handler-lifecycle.js";
import { rolloutOf } from "../rollout-prefix.js";

/** The legacy run route. */
const RUN_PATH = "/run";
/** Every path ending in this is a responses call (under any mount point). */
const RESPONSES_SUFFIX = "/v1/responses";

/** Whether a (prefix-stripped) path is agent work the middleware tracks. */
function isTrackedPath(path: string): boolean {
  return path === RUN_PATH || path.endsWith(RESPONSES_SUFFIX);
}

/** The episode a parsed `/run` body names; a malformed body or ID names none. */
function runBodyEpisode(body: unknown): { key: string; episode: EpisodeId } | null {
  if (body === null || typeof body !== "object" || Array.isArray(body)) return null;
  try {
    const key = captureKeyFromRunBody(body as RunRolloutFields);
    return key === null ? null : { key, episode: fromCaptureKey(key) };
  } catch {
    return null;
  }
}

/**
 * Tracks every `POST` to `/run` or `…/v1/responses` in `participant` until its handler settles,
 * and links the participant's cancellation to the handler's `signal` (a retire stops it).
 *
 * The capture key is the `/ng-rollout/<key>/` prefix's (install this after the prefix is
 * stripped); an unprefixed `/run` names it in its body, which is parsed here (the route's own
 * JSON parser then finds it parsed). Refusals, without running the handler: no key (a malformed
 * body or ID included) → 400 `rollout_id_required`; a retired attempt → 409 `stale_attempt`.
 * Other methods and paths pass through untracked.
 */
export function restartTrackingMiddleware(
  participant: RestartOnlyAgentParticipant,
): RequestHandler {
  const json = express.json({ limit: "64mb", strict: false });
  return (req, res, next) => {
    if (req.method !== "POST" || !isTrackedPath(req.path)) {
      next();
      return;
    }
    const what = `POST ${req.path}`;
    const start = (key: string, episode: EpisodeId): void => {
      let tracked: TrackedRequest;
      try {
        tracked = participant.track(key, episode);
      } catch (error) {
        next(error);
        return;
      }
      linkCancellation(req, tracked.signal);
      // Tracked until the handler settles, not merely until the connection closes: a handler
      // that ignores its signal after the client left is still running.
      res.once("close", () => {
        const settled = handlerSettled(res);
        if (settled === null) tracked.done();
        else void settled.then(() => tracked.done());
      });
      if (res.destroyed) tracked.done();
      next();
    };
    const rollout = rolloutOf(req);
    if (rollout !== null) {
      start(rollout.captureKey, rollout.episodeId);
      return;
    }
    if (req.path !== RUN_PATH) {
      next(EpisodeError.rolloutIdRequired(what));
      return;
    }
    json(req, res, (error?: unknown) => {
      // Unparseable JSON names no rollout; other body refusals (size, charset) keep their own.
      if (error !== undefined && !isParseFailure(error)) {
        next(error);
        return;
      }
      const named = error === undefined ? runBodyEpisode(req.body) : null;
      if (named === null) next(EpisodeError.rolloutIdRequired(what));
      else start(named.key, named.episode);
    });
  };
}

function isParseFailure(error: unknown): boolean {
  return (error as { type?: unknown } | null)?.type === "entity.parse.failed";
}

const installed = new WeakSet<Express>();

/**
 * Installs {@link restartTrackingMiddleware} on `app` once (a second call on the same app is a
 * no-op, so an agent's custom app is tracked exactly once). Returns whether it installed.
 */
export function installRestartTracking(
  app: Express,
  participant: RestartOnlyAgentParticipant,
): boolean {
  if (installed.has(app)) return false;
  installed.add(app);
  app.use(restartTrackingMiddleware(participant));
  return true;
}
