/**
 * Telemetry with in-memory exporters: the spans and metrics of a checkpoint cycle, a refused
 * restore, a refused stale attempt, an expired lease; `/metrics` as Prometheus text; `/ready`
 * through a checkpoint; and the trace context a `ServerClient` call carries to the server.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { context, propagation, trace } from "@opentelemetry/api";
import { pino } from "pino";
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  PeriodicExportingMetricReader,
  type DataPoint,
  type Histogram,
  type ResourceMetrics,
} from "@opentelemetry/sdk-metrics";
import {
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from "@opentelemetry/sdk-trace-base";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import CounterServer from "../../../reference-servers/counter/src/index.js";
import { ServerClient } from "#sdk/client/server-client.js";
import { startTestServer, type TestServer } from "#sdk/testing/index.js";
import { startTelemetry, stopTelemetry } from "#sdk/telemetry/setup.js";
import type { ResolvedDeployment } from "#sdk/wire/deployment.js";

let spans: InMemorySpanExporter;
let metricExporter: InMemoryMetricExporter;
let reader: PeriodicExportingMetricReader;

/** Installs the SDK with fresh in-memory exporters (a shut-down exporter drops everything). */
function installInMemory(): void {
  spans = new InMemorySpanExporter();
  metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  reader = new PeriodicExportingMetricReader({
    exporter: metricExporter,
    exportIntervalMillis: 3_600_000,
  });
  startTelemetry({
    serviceName: "telemetry-test",
    prometheus: false,
    metricReaders: [reader],
    spanProcessors: [new SimpleSpanProcessor(spans)],
  });
}

beforeAll(async () => {
  await stopTelemetry(); // whatever an earlier server of this process installed
  installInMemory();
});
afterAll(async () => {
  await stopTelemetry();
});

const handles: TestServer<CounterServer>[] = [];
afterEach(async () => {
  for (const handle of handles.splice(0)) await handle.close();
  spans.reset();
});

async function counter(): Promise<TestServer<CounterServer>> {
  const handle = await startTestServer(CounterServer, { name: "counter" });
  handles.push(handle);
  return handle;
}

const TOKEN = "telemetry-token";

/** A counter server built directly, with its control routes reached over HTTP. */
async function direct(leaseGraceSeconds = 600): Promise<{
  url: string;
  control(operation: string, body: Record<string, unknown>): Promise<Response>;
  close(): Promise<void>;
}> {
  const server = new CounterServer({
    name: "direct",
    checkpoint: {
      enabled: true,
      control_auth_token: TOKEN,
      lease_grace_seconds: leaseGraceSeconds,
    },
    logLevel: "silent",
  });
  const { url } = await server.listen();
  return {
    url,
    control: async (operation, body) =>
      await fetch(`${url}/ng-control/v1/checkpoint/${operation}`, {
        method: operation === "status" ? "GET" : "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${TOKEN}` },
        body: operation === "status" ? null : JSON.stringify(body),
      }),
    close: async () => await server.close(),
  };
}

const SEED = { resources_session_id: "s1", task_data: { target: 2 } };
const ep1 = { rollout: "ep1" };

/** Every data point of metric `name` collected now. */
async function points(name: string): Promise<DataPoint<unknown>[]> {
  metricExporter.reset();
  await reader.forceFlush();
  const batches: ResourceMetrics[] = metricExporter.getMetrics();
  const latest = batches.at(-1);
  return (latest?.scopeMetrics ?? [])
    .flatMap((scope) => scope.metrics)
    .filter((metric) => metric.descriptor.name === name)
    .flatMap((metric) => metric.dataPoints as DataPoint<unknown>[]);
}

/** The count of observations with these attributes (histogram count, or counter value). */
async function countOf(name: string, attributes: Record<string, unknown>): Promise<number> {
  let total = 0;
  for (const point of await points(name)) {
    const matches = Object.entries(attributes).every(([k, v]) => point.attributes[k] === v);
    if (!matches) continue;
    const value = point.value as number | Histogram;
    total += typeof value === "number" ? value : value.count;
  }
  return total;
}

function spanNamed(name: string): ReadableSpan[] {
  return spans.getFinishedSpans().filter((span) => span.name === name);
}

function parentOf(span: ReadableSpan): string | undefined {
  return span.parentSpanContext?.spanId;
}

describe("telemetry of the control plane", () => {
  it("a prepare/commit/resume/restore cycle: spans with their children, ok outcomes, records and bytes", async () => {
    const before = await countOf("gym.checkpoint.operation.duration", { outcome: "ok" });
    const server = await counter();
    expect((await server.request("/seed_session", SEED, ep1)).status).toBe(200);
    await server.checkpoint();
    const restored = await server.restoreInto();
    handles.push(restored);

    for (const operation of ["prepare", "commit", "resume", "restore"]) {
      expect(
        await countOf("gym.checkpoint.operation.duration", {
          operation,
          kind: "resources",
          outcome: "ok",
        }),
        operation,
      ).toBeGreaterThanOrEqual(1);
    }
    expect(await countOf("gym.checkpoint.operation.duration", { outcome: "ok" })).toBeGreaterThan(
      before,
    );
    expect(
      await countOf("gym.checkpoint.records", { operation: "commit", kind: "resources" }),
    ).toBeGreaterThanOrEqual(1);
    expect(
      await countOf("gym.checkpoint.bytes", { operation: "restore", kind: "resources" }),
    ).toBeGreaterThan(0);

    const [prepare] = spanNamed("gym.checkpoint.prepare");
    expect(prepare?.attributes["nemo.gym.checkpoint.participant_kind"]).toBe("resources");
    expect(prepare?.attributes["nemo.gym.checkpoint.instance"]).toBe("counter");
    expect(typeof prepare?.attributes["nemo.gym.checkpoint.id"]).toBe("string");
    const [waitReady] = spanNamed("gym.checkpoint.wait_ready");
    expect(parentOf(waitReady as ReadableSpan)).toBe(prepare?.spanContext().spanId);
    const [commit] = spanNamed("gym.checkpoint.commit");
    for (const child of ["gym.checkpoint.export", "gym.checkpoint.write"]) {
      expect(parentOf(spanNamed(child)[0] as ReadableSpan), child).toBe(
        commit?.spanContext().spanId,
      );
    }
    expect(
      spanNamed("gym.checkpoint.write")[0]?.attributes["nemo.gym.checkpoint.bytes"],
    ).toBeGreaterThan(0);
    const [restore] = spanNamed("gym.checkpoint.restore");
    for (const child of ["gym.checkpoint.read", "gym.checkpoint.install"]) {
      expect(parentOf(spanNamed(child)[0] as ReadableSpan), child).toBe(
        restore?.spanContext().spanId,
      );
    }
    // Nothing secret in any attribute.
    for (const span of spans.getFinishedSpans()) {
      expect(JSON.stringify(span.attributes)).not.toMatch(/authorization|bearer|token/i);
    }
  });

  it("a restore in the wrong phase records outcome error", async () => {
    const server = await direct();
    const before = await countOf("gym.checkpoint.operation.duration", {
      operation: "restore",
      outcome: "error",
    });
    const deadline = Date.now() / 1000 + 10;
    expect(
      (await server.control("prepare", { checkpoint_id: "c1", deadline_ts: deadline })).status,
    ).toBe(200);
    const refused = await server.control("restore", {
      checkpoint_id: "c1",
      deadline_ts: deadline,
      checkpoint_dir: "/tmp/none",
      episode_ids: [],
    });
    expect(refused.status).toBe(409);
    await server.control("resume", { checkpoint_id: "c1", deadline_ts: deadline });
    await server.close();
    expect(
      await countOf("gym.checkpoint.operation.duration", {
        operation: "restore",
        outcome: "error",
      }),
    ).toBe(before + 1);
    expect(spanNamed("gym.checkpoint.restore")[0]?.status.code).toBe(2); // ERROR
  });

  it("one refused stale attempt counts one refused event with its code", async () => {
    const server = await counter();
    expect((await server.request("/seed_session", SEED, ep1)).status).toBe(200);
    await server.retire(["ep1"]);
    const before = await countOf("gym.checkpoint.events", {
      event: "refused",
      code: "stale_attempt",
    });
    const stale = await server.request("/increment_counter", { count: 1 }, ep1);
    expect(stale.status).toBe(409);
    expect(
      await countOf("gym.checkpoint.events", { event: "refused", code: "stale_attempt" }),
    ).toBe(before + 1);
  });

  it("an expired lease counts one lease_expired event", async () => {
    const server = await direct(0.2);
    const before = await countOf("gym.checkpoint.events", { event: "lease_expired" });
    const prepared = await server.control("prepare", {
      checkpoint_id: "c1",
      deadline_ts: Date.now() / 1000 + 0.3,
    });
    expect(prepared.status).toBe(200);
    const end = Date.now() + 10_000;
    for (;;) {
      const status = (await (await server.control("status", {})).json()) as { phase: string };
      if (status.phase === "idle") break;
      if (Date.now() > end) throw new Error("the lease never expired");
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(await countOf("gym.checkpoint.events", { event: "lease_expired" })).toBe(before + 1);
    await server.close();
  });
});

describe("OTLP export protocol", () => {
  /** Starts telemetry exporting spans to a local receiver; the content type of the first export. */
  async function exportedContentType(
    protocol: Record<string, string>,
  ): Promise<{ type: string | undefined; warnings: string[] }> {
    let type: string | undefined;
    const receiver = createServer((req, res) => {
      type ??= req.headers["content-type"];
      req.resume();
      req.on("end", () => res.writeHead(200).end());
    });
    await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    const endpoint = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
    // The exporters read their endpoint from the process environment.
    const saved = process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
    process.env.OTEL_EXPORTER_OTLP_ENDPOINT = endpoint;
    const warnings: string[] = [];
    await stopTelemetry();
    try {
      startTelemetry({
        serviceName: "otlp-protocol-test",
        prometheus: false,
        env: { OTEL_TRACES_EXPORTER: "otlp", ...protocol },
        onWarning: (message) => warnings.push(message),
      });
      trace.getTracer("test").startSpan("exported").end();
      await stopTelemetry(); // flushes the batch
      return { type, warnings };
    } finally {
      if (saved === undefined) delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
      else process.env.OTEL_EXPORTER_OTLP_ENDPOINT = saved;
      await new Promise((resolve) => receiver.close(resolve));
      installInMemory();
    }
  }

  it("exports spans as protobuf by default, as JSON when OTEL_EXPORTER_OTLP_PROTOCOL says so", async () => {
    expect(await exportedContentType({})).toEqual({
      type: "application/x-protobuf",
      warnings: [],
    });
    expect(await exportedContentType({ OTEL_EXPORTER_OTLP_PROTOCOL: "http/json" })).toEqual({
      type: "application/json",
      warnings: [],
    });
    // The signal's own variable wins over the general one.
    const traces = await exportedContentType({
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/protobuf",
    });
    expect(traces.type).toBe("application/x-protobuf");
  });

  it("warns about gRPC (not bundled) and exports over http/protobuf instead", async () => {
    const { type, warnings } = await exportedContentType({ OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" });
    expect(type).toBe("application/x-protobuf");
    expect(warnings).toEqual([
      expect.stringMatching(/OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported/),
    ]);
  });
});

describe("operational routes", () => {
  it("/metrics answers Prometheus text with the checkpoint and request metrics", async () => {
    await stopTelemetry();
    startTelemetry({ serviceName: "prometheus-test" });
    try {
      const server = await counter();
      await server.checkpoint();
      const res = await fetch(`${server.url}/metrics`);
      expect(res.status).toBe(200);
      // The text format with its version, as Prometheus expects it.
      expect(res.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
      const text = await res.text();
      // Every line is a comment, blank, or `name{labels} value`.
      for (const line of text.split("\n")) {
        if (line === "" || line.startsWith("#")) continue;
        expect(line).toMatch(/^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? -?[0-9.e+Inf-]+( \d+)?$/);
      }
      // Durations are histograms in seconds, named so: `_seconds`, then `_bucket` and the rest.
      expect(text).toMatch(/# TYPE gym_checkpoint_operation_duration_seconds histogram/);
      expect(text).toMatch(
        /gym_checkpoint_operation_duration_seconds_count\{[^}]*operation="commit"/,
      );
      expect(text).toMatch(/# TYPE http_server_request_duration_seconds histogram/);
      expect(text).toMatch(/^http_server_request_duration_seconds_bucket\{/m);
      expect(text).not.toMatch(/^(gym_checkpoint_operation|http_server_request)_duration_count/m);
      // A counter of bytes keeps its one `_bytes`.
      expect(text).toMatch(/# TYPE gym_checkpoint_bytes_total counter/);
      expect(text).toMatch(/gym_participant_phase\{[^}]*phase="idle"[^}]*\} 1/);
    } finally {
      await stopTelemetry();
      installInMemory();
    }
  });

  it("/ready answers 503 while admission is closed and 200 after the resume; /health stays 200", async () => {
    const server = await counter();
    expect((await fetch(`${server.url}/ready`)).status).toBe(200);
    await server.prepare();
    const closed = await fetch(`${server.url}/ready`);
    expect(closed.status).toBe(503);
    expect(await closed.json()).toMatchObject({
      status: "not_ready",
      reasons: [expect.stringMatching(/admission closed/)],
    });
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    await server.resume();
    expect((await fetch(`${server.url}/ready`)).status).toBe(200);
  });
});

/** A counter server whose log lines (parsed) collect in `lines`, request lines at `level`. */
function loggedCounter(level: "info" | "debug"): {
  lines: Record<string, unknown>[];
  server: CounterServer;
} {
  const lines: Record<string, unknown>[] = [];
  const logger = pino(
    { level: "debug" },
    { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) },
  );
  const server = new CounterServer({
    name: "logged",
    logger,
    telemetry: { request_log_level: level },
  });
  return { lines, server };
}

describe("request logs", () => {
  it("one line per request: method, route, status, duration, capture key, request id, trace id", async () => {
    const { lines, server } = loggedCounter("info");
    const { url } = await server.listen();
    try {
      const caller = trace.getTracer("test").startSpan("caller");
      const headers: Record<string, string> = {
        "content-type": "application/json",
        "x-request-id": "req-42",
      };
      propagation.inject(trace.setSpan(context.active(), caller), headers);
      caller.end();
      const res = await fetch(`${url}/ng-rollout/ep9/seed_session`, {
        method: "POST",
        headers,
        body: JSON.stringify(SEED),
      });
      expect(res.status).toBe(200);
      expect(res.headers.get("x-request-id")).toBe("req-42");
      const line = lines.find(
        (entry) => (entry.req as { id?: string } | undefined)?.id === "req-42",
      );
      expect(line).toMatchObject({
        level: 30,
        route: "/seed_session",
        capture_key: "ep9",
        trace_id: caller.spanContext().traceId,
        req: { method: "POST" },
        res: { statusCode: 200 },
      });
      expect(typeof line?.responseTime).toBe("number");
      expect(JSON.stringify(line)).not.toMatch(/authorization|cookie/i);
    } finally {
      await server.close();
    }
  });
});

describe("request logs without a given request id", () => {
  it("makes one, answers it in x-request-id and logs an unmatched route with the original url", async () => {
    const { lines, server } = loggedCounter("debug");
    const { url } = await server.listen();
    try {
      const res = await fetch(`${url}/ng-rollout/ep7/no_such_route`, { method: "POST" });
      expect(res.status).toBe(404);
      const id = res.headers.get("x-request-id");
      expect(id).toMatch(/^[0-9a-f-]{36}$/);
      const line = await vi.waitFor(() => {
        const found = lines.find((entry) => (entry.req as { id?: string } | undefined)?.id === id);
        if (found === undefined) throw new Error(`no line for request ${id} yet`);
        return found;
      });
      expect(line).toMatchObject({
        level: 20,
        msg: "request completed",
        route: "unmatched",
        capture_key: "ep7",
        req: { method: "POST", url: "/ng-rollout/ep7/no_such_route" },
        res: { statusCode: 404 },
      });
      // Its span is named by the method alone: no path (unbounded) and no route to name it by.
      const span = await vi.waitFor(() => {
        const found = spans
          .getFinishedSpans()
          .find((s) => s.attributes["url.path"] === "/ng-rollout/ep7/no_such_route");
        if (found === undefined) throw new Error("no span for the request yet");
        return found;
      });
      expect(span.name).toBe("POST");
      expect(span.attributes["http.route"]).toBeUndefined();
      expect(span.attributes["http.response.status_code"]).toBe(404);
    } finally {
      await server.close();
    }
  });
});

describe("trace context across servers", () => {
  it("a ServerClient call carries traceparent: the server's span is a child of the caller's", async () => {
    const server = await counter();
    const deployment = {
      checkpoint: null,
      servers: {
        counter: {
          kind: "resources",
          url: server.url,
          host: "127.0.0.1",
          port: 1,
          num_workers: 1,
          config: {},
        },
      },
    } as unknown as ResolvedDeployment;
    const client = new ServerClient(deployment);
    const caller = trace.getTracer("test").startSpan("caller");
    try {
      await context.with(trace.setSpan(context.active(), caller), async () => {
        await client.postText("counter", "/seed_session", SEED);
      });
    } finally {
      caller.end();
      await client.close();
    }
    const served = spans.getFinishedSpans().find((span) => span.name === "POST /seed_session");
    expect(served?.spanContext().traceId).toBe(caller.spanContext().traceId);
    expect(parentOf(served as ReadableSpan)).toBe(caller.spanContext().spanId);
  });
});
