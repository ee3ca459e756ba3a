/**
 * What every request of a server reports: a server span continuing the caller's trace context
 * (`traceparent`), the request's duration by route and status, and one log line through
 * `pino-http` (method, route, status, duration, capture key, request id, trace id). Installed
 * first, so control and data routes alike run inside the request's span.
 */
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
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
import { pinoHttp } from "pino-http";
import { recordRequest } from "../telemetry/metrics.js";
import { tracer } from "../telemetry/spans.js";
import type { TelemetrySettings } from "../wire/settings.js";

/** A request ID a client may send (`x-request-id`): short and printable, else one is made. */
const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;
/** The capture key of a rollout-prefixed path. */
const ROLLOUT_PATH = /^\/ng-rollout\/([^/]+)\//;

/** The route a request matched (`/seed_session`, `/ng-control/v1/checkpoint/prepare`), low in cardinality. */
function routeOf(req: Request): string {
  const route = (req as Request & { route?: { path?: unknown } }).route;
  return typeof route?.path === "string" ? `${req.baseUrl}${route.path}` : "unmatched";
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
    const span = tracer().startSpan(
      `${req.method} ${req.path}`,
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
        span.updateName(`${req.method} ${route}`);
        span.setAttribute("http.route", route);
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

/** One log line per request at the configured level (nothing for `silent`). */
function requestLog(logger: Logger, level: TelemetrySettings["request_log_level"]): RequestHandler {
  // Kept to one child logger per request (the `req` binding): the capture key and the trace ID
  // go into the completion line itself rather than into further child loggers.
  const http = pinoHttp<IncomingMessage, ServerResponse>({
    logger,
    useLevel: level,
    genReqId: (req, res) => {
      const given = req.headers["x-request-id"];
      const id = typeof given === "string" && REQUEST_ID.test(given) ? given : randomUUID();
      res.setHeader("x-request-id", id);
      return id;
    },
    // Never headers: the control routes carry the bearer token.
    serializers: {
      req: (req: { id?: unknown; method?: string; url?: string }) => ({
        id: req.id,
        method: req.method,
        url: req.url,
      }),
      res: (res: { statusCode?: number }) => ({ statusCode: res.statusCode }),
    },
    customSuccessObject: (req, _res, value: Record<string, unknown>) => {
      const line: Record<string, unknown> = { ...value, route: routeOf(req as Request) };
      const key = ROLLOUT_PATH.exec((req as Request).originalUrl ?? req.url ?? "")?.[1];
      if (key !== undefined) line.capture_key = key;
      const traceId = traceIdOf();
      if (traceId !== undefined) line.trace_id = traceId;
      return line;
    },
  });
  return http as unknown as RequestHandler;
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
