/**
 * `npm run bench:telemetry`: what telemetry costs on the data path. Two copies of the weather
 * resources server run side by side under `gym serve` (built): one with telemetry fully on
 * (Prometheus metrics, request logs at info, every span exported over OTLP to a receiver here),
 * one with it off (`OTEL_SDK_DISABLED`, no metrics route, no request logs). A cheap route
 * (`/get_weather`), so the overhead shows as much as it can, is loaded in ABBA rounds; prints the
 * median requests/s of each and their ratio, and (Linux) the server's CPU per request on its main
 * thread and on its other threads (GC, libuv's pool), which is steadier than a rate when the load
 * generator shares the cores. Figures only: nothing here asserts on time.
 *
 *   npm run bench:telemetry -- [--requests 20000] [--concurrency 32] [--rounds 4]
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { Command } from "commander";
import { median } from "./median.js";
import { Pool } from "undici";
import { REPO, gym } from "../../demo/gym-process.js";
import { phaseCpu, schedstatSupported, snapshot } from "./cpu-breakdown.js";

const options = new Command("bench:telemetry")
  .option("--requests <n>", "requests per round", (v) => Number.parseInt(v, 10), 20_000)
  .option("--concurrency <n>", "requests in flight", (v) => Number.parseInt(v, 10), 32)
  .option("--rounds <n>", "rounds per variant, in ABBA order", (v) => Number.parseInt(v, 10), 4)
  .option("--parts <list>", "what 'on' turns on: metrics,logs,traces", "metrics,logs,traces")
  .option("--sample <ratio>", "trace sampling ratio of 'on' (OTEL_TRACES_SAMPLER)", "1")
  .parse()
  .opts<{ requests: number; concurrency: number; rounds: number; parts: string; sample: string }>();
/** Linux only: the server's CPU per request, from its threads' scheduler statistics. */
const measured = schedstatSupported();
const parts = new Set(options.parts.split(",").map((part) => part.trim()));

// Spans go somewhere real: an OTLP/HTTP receiver that reads and drops them.
let spansReceived = 0;
const receiver = createServer((req, res) => {
  req.on("data", () => undefined);
  req.on("end", () => {
    spansReceived++;
    res.writeHead(200, { "content-type": "application/json" });
    res.end("{}");
  });
});
await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
const receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;

const dir = mkdtempSync(path.join(tmpdir(), "gym-bench-telemetry-"));
const variants = {
  on: {
    telemetry: {
      metrics: parts.has("metrics"),
      request_log_level: parts.has("logs") ? "info" : "silent",
    },
    env: parts.has("traces")
      ? {
          OTEL_TRACES_EXPORTER: "otlp",
          OTEL_EXPORTER_OTLP_ENDPOINT: receiverUrl,
          OTEL_TRACES_SAMPLER: "parentbased_traceidratio",
          OTEL_TRACES_SAMPLER_ARG: options.sample,
          LOG_LEVEL: "info",
        }
      : { LOG_LEVEL: "info" },
  },
  off: {
    telemetry: { metrics: false, request_log_level: "silent" },
    env: { OTEL_SDK_DISABLED: "true", LOG_LEVEL: "info" },
  },
} as const;

const urls: Record<string, string> = {};
const pids: Record<string, number> = {};
try {
  for (const [name, variant] of Object.entries(variants)) {
    const deployment = path.join(dir, `${name}.yaml`);
    writeFileSync(
      deployment,
      JSON.stringify({
        checkpoint: { enabled: true, control_auth_token: "bench" },
        telemetry: variant.telemetry,
        servers: {
          weather: {
            kind: "resources",
            entrypoint: path.join(REPO, "reference-servers", "weather", "dist", "index.js"),
            ...(process.env.BENCH_PROFILE
              ? { node_args: ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_PROFILE}/${name}`] }
              : {}),
          },
        },
      }),
    );
    const state = path.join(dir, `${name}.json`);
    const served = await gym(["serve", deployment, "--detach", "--state", state], {
      env: { ...process.env, ...variant.env, GYM_RUN_DIR: path.join(dir, name) },
      compiled: true,
      timeoutMs: 120_000,
    });
    if (served.code !== 0) throw new Error(`gym serve (${name}) failed:\n${served.stderr}`);
    const resolved = JSON.parse(readFileSync(state, "utf8")) as {
      deployment: { servers: { weather: { url: string } } };
      servers: { weather: { pid: number } };
    };
    urls[name] = resolved.deployment.servers.weather.url;
    pids[name] = resolved.servers.weather.pid;
  }

  const body = JSON.stringify({ city: "Paris" });
  /** The server's CPU per request in the last round, µs: main thread, other threads. */
  let lastCpu: { main: number; other: number } | null = null;
  async function round(name: string): Promise<number> {
    const url = urls[name] as string;
    const server = new Map([[name, pids[name] as number]]);
    const before = measured ? snapshot(server) : null;
    const pool = new Pool(url, { connections: options.concurrency });
    let next = 0;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: options.concurrency }, async () => {
        while (next < options.requests) {
          next++;
          const res = await pool.request({
            method: "POST",
            path: "/get_weather",
            headers: { "content-type": "application/json" },
            body,
          });
          await res.body.text();
          if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}`);
        }
      }),
    );
    const rate = options.requests / ((performance.now() - started) / 1000);
    if (before !== null) {
      const [cpu] = phaseCpu(before, snapshot(server));
      lastCpu =
        cpu === undefined
          ? null
          : {
              main: (cpu.mainCpu * 1e6) / options.requests,
              other: (cpu.otherCpu * 1e6) / options.requests,
            };
    }
    await pool.close();
    return rate;
  }

  // Warm both (JIT), unmeasured.
  for (const name of ["on", "off"]) await round(name);
  const rates: Record<string, number[]> = { on: [], off: [] };
  const mainCpu: Record<string, number[]> = { on: [], off: [] };
  const otherCpu: Record<string, number[]> = { on: [], off: [] };
  for (let i = 0; i < options.rounds; i++) {
    const order = i % 2 === 0 ? ["off", "on"] : ["on", "off"];
    for (const name of order) {
      const rate = await round(name);
      rates[name]?.push(rate);
      const cpu = lastCpu as { main: number; other: number } | null;
      if (cpu !== null) {
        mainCpu[name]?.push(cpu.main);
        otherCpu[name]?.push(cpu.other);
      }
      const cpuText = cpu === null ? "" : `, ${cpu.main.toFixed(0)} µs main thread per request`;
      process.stderr.write(`round ${i + 1} ${name.padEnd(3)} ${rate.toFixed(0)} req/s${cpuText}\n`);
    }
  }
  const on = median(rates.on ?? []);
  const off = median(rates.off ?? []);
  const cpuRows: [string, string][] = measured
    ? [
        [
          "server µs per request, main thread (off / on)",
          `${median(mainCpu.off ?? []).toFixed(0)} / ${median(mainCpu.on ?? []).toFixed(0)}`,
        ],
        [
          "server µs per request, other threads (off / on)",
          `${median(otherCpu.off ?? []).toFixed(0)} / ${median(otherCpu.on ?? []).toFixed(0)}`,
        ],
      ]
    : [];
  const rows: [string, string][] = [
    ["requests per round", String(options.requests)],
    ["concurrency", String(options.concurrency)],
    ["rounds per variant", String(options.rounds)],
    ["on", [...parts].join(", ")],
    ["trace sampling ratio", options.sample],
    ["req/s, telemetry off (median)", off.toFixed(0)],
    ["req/s, telemetry fully on (median)", on.toFixed(0)],
    ["ratio on / off", (on / off).toFixed(3)],
    ...cpuRows,
    ["OTLP export requests received", String(spansReceived)],
  ];
  const width = Math.max(...rows.map(([k]) => k.length));
  process.stdout.write(`${rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join("\n")}\n`);
} finally {
  for (const name of Object.keys(variants)) {
    await gym(["stop", "--state", path.join(dir, `${name}.json`)], { compiled: true }).catch(
      () => undefined,
    );
  }
  receiver.close();
  rmSync(dir, { recursive: true, force: true });
}
