/**
 * What every request of a server reports: a server span continuing the caller's trace context
 * (`traceparent`), the request's duration by route and status, and one log line (method, route,
 * status, duration, capture key, request id, trace id). Installed first, so control and data
 * routes alike run inside the request's span.
 */
import { randomUUID } from "node:crypto";
import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  context,
  isSpanContextValid,
  propagation,
  trace,
} from "@opentelemetry/api";
import type { Request, RequestHandler } from "express";
import type { Logger } from "pino";
import { recordRequest } from "../telemetry/metrics.js";
import { tracer } from "../telemetry/spans.js";
import type { TelemetrySettings } from "../wire/settings.js";

/** A request ID a client may send (`x-request-id`): short and printable, else one is made. */
const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;
/** The capture key of a rollout-prefixed path. */
const ROLLOUT_PATH = /^\/ng-rollout\/([^/]+)\//;

/** The route of a request no route matched (a 404, or a middleware's early answer). */
const UNMATCHED = "unmatched";

/** The route a request matched (`/seed_session`, `/ng-control/v1/checkpoint/prepare`), low in cardinality. */
function routeOf(req: Request): string {
  const route = (req as Request & { route?: { path?: unknown } }).route;
  return typeof route?.path === "string" ? `${req.baseUrl}${route.path}` : UNMATCHED;
}

function traceIdOf(): string | undefined {
  const span = trace.getSpan(context.active());
  const spanContext = span?.spanContext();
  return spanContext !== undefined && isSpanContextValid(spanContext)
    ? spanContext.traceId
    : undefined;
}

/** The request's span and duration metric; it runs the rest of the chain inside the span. */
function requestSpan(): RequestHandler {
  return (req, res, next) => {
    const started = performance.now();
    const parent = propagation.extract(ROOT_CONTEXT, req.headers);
    // Named `{method}` until the route is known (then `{method} {route}`): a path in a span
    // name would be unbounded in cardinality, and reading it costs a parse per request.
    const span = tracer().startSpan(
      req.method,
      {
        kind: SpanKind.SERVER,
        attributes: { "http.request.method": req.method, "url.path": req.path },
      },
      parent,
    );
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      const route = routeOf(req);
      const status = res.writableFinished ? res.statusCode : 499; // 499: the client went away
      recordRequest(req.method, route, status, (performance.now() - started) / 1000);
      if (span.isRecording()) {
        if (route !== UNMATCHED) {
          span.updateName(`${req.method} ${route}`);
          span.setAttribute("http.route", route);
        }
        span.setAttribute("http.response.status_code", status);
        if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      }
      span.end();
    };
    res.once("finish", finish);
    res.once("close", finish);
    context.with(trace.setSpan(parent, span), next);
  };
}

/**
 * One log line per request at the configured level, written when the response has gone (or the
 * client left): `req` (id, method, url), `res.statusCode`, `responseTime` (ms), `route`, and the
 * capture key and trace ID when there are. Never headers: control routes carry the bearer token.
 *
 * Not `pino-http`: it builds two child loggers and hangs four properties on every request and
 * response, which cost a quarter of the throughput of a cheap route (`bench:telemetry --parts
 * logs`: 0.72–0.79x); this writes the same line for about nothing.
 */
function requestLog(logger: Logger, level: LoggedLevel): RequestHandler {
  return (req, res, next) => {
    const started = performance.now();
    const given = req.headers["x-request-id"];
    const id = typeof given === "string" && REQUEST_ID.test(given) ? given : randomUUID();
    res.setHeader("x-request-id", id);
    // Read now, inside the request's span: the line is written from a socket event.
    const traceId = traceIdOf();
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      const status = res.writableFinished ? res.statusCode : 499; // 499: the client went away
      const line: Record<string, unknown> = {
        req: { id, method: req.method, url: req.originalUrl },
        res: { statusCode: status },
        responseTime: Math.round(performance.now() - started),
        route: routeOf(req),
      };
      const key = ROLLOUT_PATH.exec(req.originalUrl)?.[1];
      if (key !== undefined) line.capture_key = key;
      if (traceId !== undefined) line.trace_id = traceId;
      logger[level](line, messageOf(status));
    };
    res.once("finish", finish);
    res.once("close", finish);
    next();
  };
}

/** The levels a request line may be written at. */
type LoggedLevel = Exclude<TelemetrySettings["request_log_level"], "silent">;

function messageOf(status: number): string {
  if (status === 499) return "request aborted";
  return status >= 500 ? "request errored" : "request completed";
}

/** The middlewares {@link requestTelemetry} installs, in order. */
export function requestTelemetry(logger: Logger, settings: TelemetrySettings): RequestHandler[] {
  const handlers = [requestSpan()];
  // A level the logger does not write costs nothing: no request logger at all.
  if (
    settings.request_log_level !== "silent" &&
    logger.isLevelEnabled(settings.request_log_level)
  ) {
    handlers.push(requestLog(logger, settings.request_log_level));
  }
  return handlers;
}
