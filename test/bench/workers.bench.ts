/**
 * Data-path throughput of a CPU-bound route with 1 and with 2 worker processes, each started by
 * the real `gym serve` (built CLI). Each run sends `--requests` requests, `--concurrency` at a
 * time over as many connections (a connection stays on one worker, so fewer connections than
 * workers would measure one worker). Prints the median requests per second of each worker count,
 * how the requests spread over the worker processes, and the ratio 2 workers / 1 worker
 * measured in this run. Asserts nothing.
 *
 *   npm run bench:workers [-- --requests 200 --concurrency 16 --iterations 100000 --runs 3]
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Pool } from "undici";
import { gym } from "../../demo/gym-process.js";

function arg(name: string, fallback: number): number {
  const at = process.argv.indexOf(`--${name}`);
  return at >= 0 ? Number(process.argv[at + 1]) : fallback;
}

const REQUESTS = arg("requests", 200);
const CONCURRENCY = arg("concurrency", 16);
const ITERATIONS = arg("iterations", 100_000);
const RUNS = arg("runs", 3);
const SERVER = fileURLToPath(new URL("../fixtures/servers/cpu-bound.ts", import.meta.url));

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** One timed run: requests per second, and how many each process served. */
async function run(pool: Pool): Promise<{ rate: number; byPid: Map<number, number> }> {
  const byPid = new Map<number, number>();
  let next = 0;
  const body = JSON.stringify({ input: "payload", iterations: ITERATIONS });
  const started = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < REQUESTS) {
        next++;
        const res = await pool.request({
          method: "POST",
          path: "/work",
          headers: { "content-type": "application/json" },
          body,
        });
        const reply = (await res.body.json()) as { pid: number };
        if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}`);
        byPid.set(reply.pid, (byPid.get(reply.pid) ?? 0) + 1);
      }
    }),
  );
  return { rate: REQUESTS / ((performance.now() - started) / 1000), byPid };
}

async function measure(workers: number): Promise<number> {
  const dir = mkdtempSync(path.join(tmpdir(), `gym-bench-workers-${workers}-`));
  const file = path.join(dir, "deployment.yaml");
  const state = path.join(dir, "run.json");
  writeFileSync(
    file,
    [
      "servers:",
      "  cpu:",
      "    kind: backend",
      `    entrypoint: ${SERVER}`,
      `    num_workers: ${workers}`,
      "",
    ].join("\n"),
  );
  const env = { ...process.env, LOG_LEVEL: "warn" };
  const served = await gym(["serve", file, "--detach", "--state", state], {
    env,
    timeoutMs: 120_000,
    compiled: true,
  });
  if (served.code !== 0) throw new Error(`gym serve failed:\n${served.stderr}`);
  const url = (JSON.parse(readFileSync(state, "utf8")) as { servers: { cpu: { url: string } } })
    .servers.cpu.url;
  const pool = new Pool(url, { connections: CONCURRENCY });
  try {
    await run(pool); // warm-up: JIT, connections
    const rates: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      const { rate, byPid } = await run(pool);
      rates.push(rate);
      console.log(
        `  ${workers} worker(s), run ${i + 1}: ${rate.toFixed(1)} req/s; per process: ${[...byPid.values()].join(" / ")}`,
      );
    }
    return median(rates);
  } finally {
    await pool.close();
    await gym(["stop", "--state", state], { env, timeoutMs: 60_000, compiled: true });
    rmSync(dir, { recursive: true, force: true });
  }
}

console.log(
  `CPU-bound route (PBKDF2 ${ITERATIONS} rounds), ${REQUESTS} requests, ${CONCURRENCY} connections, ${RUNS} runs`,
);
const one = await measure(1);
const two = await measure(2);
console.log(`median: 1 worker ${one.toFixed(1)} req/s, 2 workers ${two.toFixed(1)} req/s`);
console.log(`ratio 2 workers / 1 worker: ${(two / one).toFixed(2)}x`);
