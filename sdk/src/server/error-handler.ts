import type { ErrorRequestHandler, RequestHandler } from "express";
import type { Logger } from "pino";
import { ServerReplyError, ServerUnreachableError } from "../client/errors.js";
import { DetailError, GymError, InvalidRequestError, type ErrorEnvelope } from "../errors.js";
import { recordEvent } from "../telemetry/metrics.js";

/**
 * Body-parser failures (an author's own parser, or one run before the SDK's reader) carry a
 * `type` and a 4xx `status`; a body that fails to inflate carries zlib's `Z_…` code instead.
 */
interface BodyParserError {
  type?: unknown;
  code?: unknown;
  status?: unknown;
  message?: string;
}

/** The 4xx status of a body-parser failure, or null when `error` is not one. */
function bodyParserStatus(error: unknown): number | null {
  if (typeof error !== "object" || error === null) return null;
  const { type, code, status } = error as BodyParserError;
  const fromParser =
    typeof type === "string" || (typeof code === "string" && code.startsWith("Z_"));
  if (!fromParser || typeof status !== "number" || status < 400 || status >= 500) return null;
  return status;
}

/**
 * The one place errors become the wire envelope. Typed errors answer with their code and
 * status (body refusals: `invalid_request` with 400, 413, 415 or 422); a body-parser failure
 * the same way: 422 for JSON that does not parse, 413 too large, 415 an encoding or charset not
 * spoken, 400 anything else (e.g. a body that is not valid gzip); a path parameter whose
 * percent-escapes do not decode with 400 `invalid_request`; a call to another server
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
      // Refusals are events worth counting (a stale attempt, a closed admission...).
      if (error.status < 500) recordEvent("refused", { code: error.code });
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
    const parserStatus = bodyParserStatus(error);
    if (parserStatus !== null) {
      const message = (error as BodyParserError).message ?? "";
      if ((error as BodyParserError).type === "entity.parse.failed") {
        const invalid = new InvalidRequestError(`the body is not valid JSON: ${message}`, [
          { path: [], message: "not valid JSON" },
        ]);
        res.status(invalid.status).json(invalid.toEnvelope());
        return;
      }
      const envelope: ErrorEnvelope = {
        error: { code: "invalid_request", detail: `the body was refused: ${message}` },
      };
      res.status(parserStatus === 413 || parserStatus === 415 ? parserStatus : 400).json(envelope);
      return;
    }
    if (error instanceof URIError && (error as { status?: unknown }).status === 400) {
      // The router could not decode a path parameter (`%E0%A4%A`): the client's mistake.
      const envelope: ErrorEnvelope = {
        error: {
          code: "invalid_request",
          detail: `the request path does not decode: ${error.message}`,
        },
      };
      res.status(400).json(envelope);
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
