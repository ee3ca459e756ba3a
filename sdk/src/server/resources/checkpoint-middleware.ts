import type { RequestHandler } from "express";
import type { ResourcesParticipant } from "../../participants/resources/resources-participant.js";
import { EpisodeError } from "../../errors.js";
import { captureKey, type EpisodeId } from "../../identity/episode-id.js";
import { handlerSettled } from "../handler-lifecycle.js";
import { rolloutOf } from "../rollout-prefix.js";
import { isMcpPath, type McpSessionTokens } from "./mcp-session-token.js";
import { onResponseStart } from "./response-start.js";
import { sessionOf } from "./session-cookie.js";

import {
  CLOSE_FOLLOWS_HEADER,
  RESTART_HEADER,
  VERIFY_HEADER,
} from "../../wire/checkpoint-headers.js";

export { CLOSE_FOLLOWS_HEADER, RESTART_HEADER, VERIFY_HEADER };

/** Options of {@link resourcesCheckpointMiddleware}. */
export interface ResourcesCheckpointMiddlewareOptions {
  /**
   * The server's MCP session tokens, when it serves `/mcp`: a call there with a usable token is
   * the token's session and attempt; without one, the cookie's session. @default none
   */
  readonly mcpTokens?: McpSessionTokens | null;
}

/**
 * The checkpoint middleware of a resources server (see docs/resources-server.md): passes GET/HEAD and
 * control routes through; waits for admission (never refuses for an open checkpoint); admits,
 * counts and fences each request through the participant; decorates session-start replies and
 * updates session tracking when the response starts.
 *
 * A data route's request reaches it with its body read and parsed (the base `Server` reads it
 * first when a participant takes part), so a body still arriving is never counted in flight.
 */
export function resourcesCheckpointMiddleware(
  participant: ResourcesParticipant,
  options: ResourcesCheckpointMiddlewareOptions = {},
): RequestHandler {
  const mcpTokens = options.mcpTokens ?? null;
  return (req, res, next) => {
    if (req.method === "GET" || req.method === "HEAD" || req.path.startsWith("/ng-control/")) {
      next();
      return;
    }
    // The session layer already took an MCP call's session from its token; the token also
    // names the attempt, since a harness's calls carry no rollout prefix. A call under a
    // prefix names its attempt there: the token's, or one that replaced it after a restore
    // (as a cookie's session is used under the replacement's prefix).
    const session = sessionOf(req);
    const path = req.path;
    const token = mcpTokens !== null && isMcpPath(path) ? mcpTokens.claimsOf(req) : null;
    const prefixed = rolloutOf(req)?.episodeId ?? null;
    if (token?.episode != null && prefixed !== null && !continues(token.episode, prefixed)) {
      next(
        new EpisodeError(
          "stale_attempt",
          `the MCP session token of attempt '${captureKey(token.episode)}' is used under '${captureKey(prefixed)}': its prefix must name that attempt or one that replaced it`,
          captureKey(prefixed),
        ),
      );
      return;
    }
    const abort = new AbortController();
    const onClose = (): void => abort.abort(new Error("the client closed the connection"));
    res.once("close", onClose);
    participant
      .admit({
        sessionId: session.id,
        path,
        episode: prefixed ?? token?.episode ?? null,
        signal: abort.signal,
      })
      .then(
        (admitted) => {
          res.off("close", onClose);
          const start = participant.isSessionStart(path);
          onResponseStart(res, (status) => {
            if (start) {
              res.setHeader(VERIFY_HEADER, participant.verify);
              if (participant.mode === "restart_only") res.setHeader(RESTART_HEADER, "1");
            }
            admitted.responseStarted({
              status,
              sessionId: session.id,
              closeFollows: req.get(CLOSE_FOLLOWS_HEADER) === "1",
            });
          });
          // Counted until the handler settles, not merely until the connection closes: a handler
          // that ignores its signal after the client left is still work in flight.
          res.once("close", () => {
            const settled = handlerSettled(res);
            if (settled === null) admitted.finish();
            else void settled.then(() => admitted.finish());
          });
          if (res.destroyed) admitted.finish();
          next();
        },
        (error: unknown) => {
          res.off("close", onClose);
          if (abort.signal.aborted) return; // nobody is listening any more
          next(error);
        },
      );
  };
}

/** Whether `later` is `attempt` or an attempt of its rollout that replaced it. */
function continues(attempt: EpisodeId, later: EpisodeId): boolean {
  return later.rollout_id === attempt.rollout_id && later.attempt >= attempt.attempt;
}
