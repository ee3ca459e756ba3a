/**
 * Installs the OpenTelemetry SDK in a process: a meter provider (a Prometheus reader served at
 * `GET /metrics`, and an OTLP reader when `OTEL_METRICS_EXPORTER` asks for one) and, when the
 * standard `OTEL_*` variables ask for traces, a tracer provider with its exporter (OTLP over
 * `http/protobuf` or `http/json`, per `OTEL_EXPORTER_OTLP_PROTOCOL`), the W3C trace
 * context propagator and the async context manager. Nothing is installed for traces otherwise,
 * so spans stay non-recording and free. One installation per process; the first call wins.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { createRequire } from "node:module";
import { context, metrics, propagation, trace } from "@opentelemetry/api";
import type * as OtlpJsonMetrics from "@opentelemetry/exporter-metrics-otlp-http";
import type * as OtlpProtoMetrics from "@opentelemetry/exporter-metrics-otlp-proto";
import { PrometheusExporter, PrometheusSerializer } from "@opentelemetry/exporter-prometheus";
import type * as OtlpJsonTraces from "@opentelemetry/exporter-trace-otlp-http";
import type * as OtlpProtoTraces from "@opentelemetry/exporter-trace-otlp-proto";
import { detectResources, envDetector, resourceFromAttributes } from "@opentelemetry/resources";
import {
  MeterProvider,
  PeriodicExportingMetricReader,
  type IMetricReader,
  type MetricData,
  type PushMetricExporter,
  type ResourceMetrics,
} from "@opentelemetry/sdk-metrics";
import {
  BatchSpanProcessor,
  ConsoleSpanExporter,
  type SpanExporter,
  type SpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { ensureGauges } from "./metrics.js";

/** What {@link startTelemetry} installs. */
export interface TelemetryOptions {
  /** `service.name` unless `OTEL_SERVICE_NAME` says otherwise. */
  readonly serviceName: string;
  /** Serve Prometheus text (`metricsHandler`). @default true */
  readonly prometheus?: boolean;
  /** Extra metric readers (tests pass an in-memory one). */
  readonly metricReaders?: readonly IMetricReader[];
  /** Span processors to use instead of those the environment asks for (tests). */
  readonly spanProcessors?: readonly SpanProcessor[];
  /** The process environment to read `OTEL_*` from. @default process.env */
  readonly env?: NodeJS.ProcessEnv;
  /** Told about a setting that was not applied as written (e.g. an unsupported protocol). */
  readonly onWarning?: (message: string) => void;
}

/** The OTLP encodings over HTTP; gRPC is not bundled. */
type OtlpProtocol = "http/protobuf" | "http/json";

/**
 * The OTLP protocol of a signal: `OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL`, else
 * `OTEL_EXPORTER_OTLP_PROTOCOL`, else `http/protobuf` (the specification's default, and the
 * cheaper encoding: `npm run bench:telemetry` exports every span either way).
 */
function otlpProtocol(
  env: NodeJS.ProcessEnv,
  signal: "TRACES" | "METRICS",
  warn: (message: string) => void,
): OtlpProtocol {
  const variable = env[`OTEL_EXPORTER_OTLP_${signal}_PROTOCOL`]
    ? `OTEL_EXPORTER_OTLP_${signal}_PROTOCOL`
    : "OTEL_EXPORTER_OTLP_PROTOCOL";
  const value = env[variable]?.trim().toLowerCase();
  if (value === undefined || value === "" || value === "http/protobuf") return "http/protobuf";
  if (value === "http/json") return "http/json";
  warn(
    `${variable}=${value} is not supported (http/protobuf and http/json are); exporting ${signal.toLowerCase()} over http/protobuf`,
  );
  return "http/protobuf";
}

/**
 * The OTLP exporters, loaded only when the environment asks for one: together they are about a
 * fifth of a second of CPU at every process start (protobuf encoders, HTTP transports), and
 * most deployments export nothing over OTLP. Loaded synchronously (the packages' CommonJS
 * builds) so {@link startTelemetry} stays synchronous; an exporter only needs the interface the
 * SDK's readers and processors call, whichever build it comes from.
 */
const requireExporter = createRequire(import.meta.url);

function otlpTraceExporter(protocol: OtlpProtocol): SpanExporter {
  return protocol === "http/json"
    ? new (
        requireExporter("@opentelemetry/exporter-trace-otlp-http") as typeof OtlpJsonTraces
      ).OTLPTraceExporter()
    : new (
        requireExporter("@opentelemetry/exporter-trace-otlp-proto") as typeof OtlpProtoTraces
      ).OTLPTraceExporter();
}

function otlpMetricExporter(protocol: OtlpProtocol): PushMetricExporter {
  return protocol === "http/json"
    ? new (
        requireExporter("@opentelemetry/exporter-metrics-otlp-http") as typeof OtlpJsonMetrics
      ).OTLPMetricExporter()
    : new (
        requireExporter("@opentelemetry/exporter-metrics-otlp-proto") as typeof OtlpProtoMetrics
      ).OTLPMetricExporter();
}

interface Installed {
  readonly meterProvider: MeterProvider;
  readonly tracerProvider: NodeTracerProvider | null;
  readonly prometheus: PrometheusExporter | null;
}

let installed: Installed | null = null;

function listOf(value: string | undefined): string[] {
  return (value ?? "")
    .split(",")
    .map((entry) => entry.trim().toLowerCase())
    .filter((entry) => entry !== "");
}

/** The span processors `OTEL_TRACES_EXPORTER` (or an OTLP endpoint) asks for; none by default. */
function spanProcessorsFromEnv(
  env: NodeJS.ProcessEnv,
  warn: (message: string) => void,
): SpanProcessor[] {
  let exporters = listOf(env.OTEL_TRACES_EXPORTER);
  if (
    exporters.length === 0 &&
    (env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
  ) {
    exporters = ["otlp"];
  }
  const processors: SpanProcessor[] = [];
  for (const name of exporters) {
    if (name === "otlp") {
      processors.push(new BatchSpanProcessor(otlpTraceExporter(otlpProtocol(env, "TRACES", warn))));
    } else if (name === "console")
      processors.push(new BatchSpanProcessor(new ConsoleSpanExporter()));
  }
  return processors;
}

/**
 * Installs the SDK (once per process: later calls return at once). `OTEL_SDK_DISABLED=true`
 * installs nothing.
 */
export function startTelemetry(options: TelemetryOptions): void {
  if (installed !== null) return;
  const env = options.env ?? process.env;
  if (env.OTEL_SDK_DISABLED?.toLowerCase() === "true") return;
  const warn = options.onWarning ?? (() => undefined);
  const resource = resourceFromAttributes({
    "service.name": env.OTEL_SERVICE_NAME ?? options.serviceName,
    "service.instance.id": `${process.pid}`,
  }).merge(detectResources({ detectors: [envDetector] }));

  const readers: IMetricReader[] = [...(options.metricReaders ?? [])];
  let prometheus: PrometheusExporter | null = null;
  if (options.prometheus ?? true) {
    prometheus = new PrometheusExporter({ preventServerStart: true });
    readers.push(prometheus);
  }
  if (listOf(env.OTEL_METRICS_EXPORTER).includes("otlp")) {
    const interval = Number(env.OTEL_METRIC_EXPORT_INTERVAL ?? 60_000);
    readers.push(
      new PeriodicExportingMetricReader({
        exporter: otlpMetricExporter(otlpProtocol(env, "METRICS", warn)),
        exportIntervalMillis: Number.isFinite(interval) && interval > 0 ? interval : 60_000,
      }),
    );
  }
  const meterProvider = new MeterProvider({ resource, readers });
  metrics.setGlobalMeterProvider(meterProvider);
  ensureGauges();

  const spanProcessors = options.spanProcessors ?? spanProcessorsFromEnv(env, warn);
  let tracerProvider: NodeTracerProvider | null = null;
  if (spanProcessors.length > 0) {
    tracerProvider = new NodeTracerProvider({ resource, spanProcessors: [...spanProcessors] });
    // Also the async context manager and the W3C trace context propagator.
    tracerProvider.register();
  }
  installed = { meterProvider, tracerProvider, prometheus };
}

/** Whether {@link startTelemetry} installed the SDK. */
export function telemetryStarted(): boolean {
  return installed !== null;
}

/**
 * The content type of a Prometheus scrape's reply: the text exposition format, with its version
 * (what `prom-client`'s `register.contentType` sends), so a scraper need not guess the format.
 */
export const PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

/**
 * Prometheus name suffixes for OpenTelemetry units, as the OpenTelemetry-to-Prometheus
 * conversion adds them (the exporter does not): a duration in seconds is `..._seconds`, the
 * Prometheus naming convention, while the OpenTelemetry name (`http.server.request.duration`,
 * unit `s`) stays as the semantic conventions spell it for OTLP.
 */
const UNIT_SUFFIXES: Readonly<Record<string, string>> = { s: "_seconds", By: "_bytes" };

/** `metric` with the unit suffix its Prometheus name needs, or itself when it has it already. */
function withUnitSuffix(metric: MetricData): MetricData {
  const suffix = UNIT_SUFFIXES[metric.descriptor.unit];
  const name = metric.descriptor.name;
  if (suffix === undefined || name.replace(/[^a-z0-9_]/gi, "_").endsWith(suffix)) return metric;
  return { ...metric, descriptor: { ...metric.descriptor, name: `${name}${suffix}` } };
}

const serializer = new PrometheusSerializer();

/** The Prometheus text of `resourceMetrics`, metric names carrying their unit suffix. */
function serialize(resourceMetrics: ResourceMetrics): string {
  return serializer.serialize({
    ...resourceMetrics,
    scopeMetrics: resourceMetrics.scopeMetrics.map((scope) => ({
      ...scope,
      metrics: scope.metrics.map(withUnitSuffix),
    })),
  });
}

/**
 * Answers a Prometheus scrape: the text exposition of every metric
 * ({@link PROMETHEUS_CONTENT_TYPE}). 503 when telemetry is not started or the Prometheus reader
 * is off.
 */
export function metricsHandler(req: IncomingMessage, res: ServerResponse): void {
  prometheusText().then(
    (text) => {
      if (text === null) {
        res.statusCode = 503;
        res.setHeader("content-type", "text/plain; charset=utf-8");
        res.end("# metrics are off in this process\n");
        return;
      }
      res.statusCode = 200;
      res.setHeader("content-type", PROMETHEUS_CONTENT_TYPE);
      res.end(text);
    },
    (error: unknown) => {
      res.statusCode = 500;
      res.setHeader("content-type", "text/plain; charset=utf-8");
      res.end(`# failed to collect metrics: ${String(error)}\n`);
    },
  );
}

/**
 * This process's metrics as Prometheus text (what {@link metricsHandler} serves), or null when
 * telemetry is not started or the Prometheus reader is off.
 */
export async function prometheusText(): Promise<string | null> {
  const exporter = installed?.prometheus ?? null;
  if (exporter === null) return null;
  const { resourceMetrics } = await exporter.collect();
  return serialize(resourceMetrics);
}

/** Flushes and removes what {@link startTelemetry} installed (tests; a clean shutdown). */
export async function stopTelemetry(): Promise<void> {
  const was = installed;
  installed = null;
  if (was === null) return;
  await was.tracerProvider?.shutdown().catch(() => undefined);
  await was.meterProvider.shutdown().catch(() => undefined);
  metrics.disable();
  trace.disable();
  propagation.disable();
  context.disable();
}
