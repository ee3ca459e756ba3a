/**
 * Spans through the OpenTelemetry API only. With no tracer provider installed (telemetry off)
 * the API hands out non-recording spans: a span costs a few property reads.
 */
import { SpanStatusCode, trace, type Attributes, type Span } from "@opentelemetry/api";
import { SCOPE } from "./names.js";

/** The SDK's tracer (resolved through the global provider on every call: cheap, and late-bound). */
export function tracer(): ReturnType<typeof trace.getTracer> {
  return trace.getTracer(SCOPE);
}

/**
 * Runs `fn` inside an active span named `name`: children started in `fn` (across awaits) nest
 * under it. A throw marks the span as an error (recording the exception) and is rethrown.
 */
export async function inSpan<T>(
  name: string,
  attributes: Attributes,
  fn: (span: Span) => Promise<T>,
): Promise<T> {
  return await tracer().startActiveSpan(name, { attributes }, async (span) => {
    try {
      return await fn(span);
    } catch (error) {
      span.recordException(error as Error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: (error as Error)?.message });
      throw error;
    } finally {
      span.end();
    }
  });
}

/**
 * Records a child span of the active one over a stretch already timed (`performance.now()`
 * values), for work that runs as a task several calls may join (a commit's export and write),
 * spanned once it is done.
 */
export function timedSpan(
  name: string,
  startMs: number,
  endMs: number,
  attributes: Attributes,
): void {
  tracer().startSpan(name, { startTime: startMs, attributes }).end(endMs);
}
