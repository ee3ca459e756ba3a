import type { ErrorRequestHandler, RequestHandler } from "express";
import type { Logger } from "pino";
import { ServerReplyError, ServerUnreachableError } from "../client/errors.js";
import { DetailError, GymError, InvalidRequestError, type ErrorEnvelope } from "../errors.js";

/** Body-parser failures carry a `type` and a 4xx `status`. */
interface BodyParserError {
  type?: string;
  status?: number;
  message?: string;
}

/**
 * The one place errors become the wire envelope. Typed errors answer with their code and
 * status; malformed or oversized bodies with 422/413 `invalid_request`; a call to another server
 * of the deployment that failed (a `ServerClient` error the handler let through) with 502
 * `upstream_unreachable` or `upstream_error` naming that server; anything else is a bug: logged,
 * answered with a generic 500 that leaks nothing.
 */
export function errorHandler(logger: Logger): ErrorRequestHandler {
  return (error: unknown, req, res, next) => {
    if (res.headersSent) {
      next(error);
      return;
    }
    if (error instanceof GymError) {
      // A 502 is another server's failure, logged as such; any other 5xx is this server's.
      if (error.status === 502) {
        logger.warn({ err: error, path: req.path }, "a call to another server failed");
      } else if (error.status >= 500) {
        logger.error({ err: error, path: req.path }, "request failed");
      }
      res.status(error.status).json(error.toEnvelope());
      return;
    }
    if (error instanceof DetailError) {
      // A 5xx here is another server's failure (the inference backend): worth a line in the log.
      if (error.status >= 500)
        logger.warn({ err: error, path: req.path }, "a call to another server failed");
      res.status(error.status).json({ detail: error.detail });
      return;
    }
    const upstream = upstreamError(error);
    if (upstream !== null) {
      logger.warn({ err: error, path: req.path }, "a call to another server failed");
      res.status(upstream.status).json(upstream.toEnvelope());
      return;
    }
    const parserError = error as BodyParserError;
    if (parserError?.type === "entity.parse.failed") {
      const invalid = new InvalidRequestError(
        `the body is not valid JSON: ${parserError.message}`,
        [{ path: [], message: "not valid JSON" }],
      );
      res.status(invalid.status).json(invalid.toEnvelope());
      return;
    }
    if (
      typeof parserError?.type === "string" &&
      parserError.status !== undefined &&
      parserError.status < 500
    ) {
      const envelope: ErrorEnvelope = {
        error: { code: "invalid_request", detail: `the body was refused: ${parserError.message}` },
      };
      res.status(parserError.status === 413 ? 413 : 422).json(envelope);
      return;
    }
    logger.error({ err: error, path: req.path }, "unexpected error");
    const envelope: ErrorEnvelope = {
      error: { code: "internal_error", detail: "internal server error (see the server log)" },
    };
    res.status(500).json(envelope);
  };
}

/**
 * The refusal of a request whose handler called another server of the deployment and failed:
 * the other server's fault (or its absence), not this one's, so a 502 naming it rather than a
 * 500. Null for any other error.
 */
function upstreamError(error: unknown): GymError | null {
  if (error instanceof ServerUnreachableError) {
    return new GymError("upstream_unreachable", error.message, { cause: error });
  }
  if (error instanceof ServerReplyError) {
    // A failure further upstream, as that server reported it: the caller learns which one.
    if (error.code === "upstream_unreachable" || error.code === "upstream_error") {
      return new GymError(error.code, error.detail, { cause: error });
    }
    return new GymError("upstream_error", error.message, { cause: error });
  }
  return null;
}

/** Answers every unmatched route with 404 and the envelope. */
export const notFoundHandler: RequestHandler = (req, res) => {
  const envelope: ErrorEnvelope = {
    error: { code: "not_found", detail: `no route ${req.method} ${req.path}` },
  };
  res.status(404).json(envelope);
};
