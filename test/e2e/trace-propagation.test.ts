/**
 * One rollout attempt is one trace: the reference deployment runs with `OTEL_TRACES_EXPORTER=otlp`
 * pointed at a small OTLP/HTTP receiver here, one `/run` goes to the environment server, and the
 * spans every server exports (environment, agent, policy model, resources) share its trace ID,
 * each server's request span a child of its caller's.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { DeploymentRun } from "../../demo/deployment-run.js";
import { gym } from "../../demo/gym-process.js";
import { counterRow } from "./collect-harness.js";
import { killEverything } from "./helpers.js";
import { until } from "./crash-harness.js";

interface ExportedSpan {
  readonly service: string;
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
  readonly name: string;
}

/** Collects the spans OTLP/HTTP (JSON) exporters post to `/v1/traces`. */
class OtlpReceiver {
  readonly spans: ExportedSpan[] = [];
  #server: Server | null = null;
  url = "";

  async start(): Promise<void> {
    this.#server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (chunk: Buffer) => chunks.push(chunk));
      req.on("end", () => {
        try {
          this.#take(JSON.parse(Buffer.concat(chunks).toString("utf8")));
        } catch {
          // not a JSON export: ignored
        }
        res.writeHead(200, { "content-type": "application/json" });
        res.end("{}");
      });
    });
    await new Promise<void>((resolve) => this.#server?.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  #take(body: {
    resourceSpans?: {
      resource?: { attributes?: { key: string; value: { stringValue?: string } }[] };
      scopeSpans?: { spans?: Omit<ExportedSpan, "service">[] }[];
    }[];
  }): void {
    for (const resource of body.resourceSpans ?? []) {
      const service =
        resource.resource?.attributes?.find((a) => a.key === "service.name")?.value.stringValue ??
        "";
      for (const scope of resource.scopeSpans ?? []) {
        for (const span of scope.spans ?? []) {
          this.spans.push({
            service,
            traceId: span.traceId,
            spanId: span.spanId,
            parentSpanId: span.parentSpanId ?? "",
            name: span.name,
          });
        }
      }
    }
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => this.#server?.close(() => resolve()));
  }
}

const dir = mkdtempSync(path.join(tmpdir(), "gym-e2e-trace-"));
const receiver = new OtlpReceiver();
let run: DeploymentRun;

afterAll(async () => {
  await run?.stop().catch(() => undefined);
  await killEverything(dir, [path.join(dir, "run.json")]);
  await receiver.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("trace context through the reference deployment", () => {
  it(
    "one rollout attempt is one trace across environment, agent, policy model and resources",
    { timeout: 120_000 },
    async () => {
      await receiver.start();
      // The built CLI and servers start in about half the time.
      run = new DeploymentRun(
        dir,
        {
          OTEL_TRACES_EXPORTER: "otlp",
          OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
          // The receiver reads JSON (the default encoding is protobuf).
          OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
          OTEL_BSP_SCHEDULE_DELAY: "100",
        },
        { compiled: true },
      );
      await run.serve();
      const row = counterRow(0);
      const res = await fetch(`${run.url("counter_env")}/run`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          episode_id: { rollout_id: "traced-1", attempt: 0 },
          task: { task_id: { taskset: "counter", task_id: "0" }, task_input: row.task_input },
        }),
      });
      expect(res.status).toBe(200);
      const root = await until("the /run span", () =>
        receiver.spans.find((span) => span.service === "counter_env" && span.name === "POST /run"),
      );
      const services = ["counter_env", "simple_agent", "policy", "counter"];
      const trace = await until(
        "spans of every server in the rollout's trace",
        () => {
          const mine = receiver.spans.filter((span) => span.traceId === root.traceId);
          return services.every((service) => mine.some((span) => span.service === service))
            ? mine
            : null;
        },
        30_000,
      );
      // Every server's request span has a parent in the trace (its caller's), but the root's.
      const ids = new Set(trace.map((span) => span.spanId));
      for (const span of trace) {
        if (span === root) continue;
        expect(ids.has(span.parentSpanId), `${span.service} ${span.name}`).toBe(true);
      }
      expect(root.parentSpanId).toBe("");

      // `gym top --once` reads the same servers' readiness and metrics.
      const top = await gym(["top", "--once", "--state", run.stateFile], {
        env: run.env,
        compiled: true,
      });
      expect(top.code, top.stderr).toBe(0);
      const line = top.stdout.split("\n").find((row) => row.startsWith("counter_env "));
      expect(line).toMatch(/environment\s+ready\s+idle\s+open\s/);
      // REQUESTS, counted from the end of the row (…, REQUESTS, COMMITS, CLOCK).
      expect(Number(line?.trim().split(/\s+/).at(-3))).toBeGreaterThanOrEqual(1);
      expect(top.stdout).not.toMatch(/\binference\b/); // the backend is no participant
    },
  );
});
