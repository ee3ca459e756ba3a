/**
 * `npm run bench:collect`: rollout collection through the reference deployment, with a
 * checkpoint every 10 s against none, measured in the same run on the same servers. Prints rows/s
 * of each (medians over `--runs`), their ratio, and the dispatch pause of each checkpoint
 * (prepare through resume) with its parts: each stage's control calls per server, the publish
 * between commit and resume, and on Linux where each stage's time went in each server (main
 * CPU, other threads, queued). Figures only: nothing here asserts on time.
 *
 *   npm run bench:collect -- [--rows 10000] [--concurrency 1000] [--every 10s] [--runs 1]
 *     [--breakdowns] (print every checkpoint's breakdown, and one JSON line each)
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Command } from "commander";
import { median } from "./median.js";
import { schedstatSupported, snapshotOf } from "./cpu-breakdown.js";
import {
  breakdownLine,
  breakdownRows,
  PauseRecorder,
  type PauseBreakdown,
} from "./pause-breakdown.js";
import { serverProcesses } from "../../demo/process-tree.js";
import { DeploymentRun } from "../../demo/deployment-run.js";
import type { CollectSummary } from "#sdk/collect/collect-report.js";
import { collect } from "#sdk/collect/collector.js";
import { parseDuration } from "#sdk/cli/duration.js";

const options = new Command("bench:collect")
  .option("--rows <n>", "rows in the dataset", (v) => Number.parseInt(v, 10), 10_000)
  .option("--concurrency <n>", "rows in flight", (v) => Number.parseInt(v, 10), 1_000)
  .option("--every <duration>", "checkpoint interval of the checkpointed runs", "10s")
  .option(
    "--runs <n>",
    "runs of each variant, in ABBA order (drift favours neither)",
    (v) => Number.parseInt(v, 10),
    2,
  )
  .option("--dir <dir>", "run directory (default: a new temporary directory)")
  .option("--breakdowns", "print every checkpoint's pause breakdown (and one JSON line each)")
  .parse()
  .opts<{
    rows: number;
    concurrency: number;
    every: string;
    runs: number;
    dir?: string;
    breakdowns?: boolean;
  }>();
const everyMs = parseDuration(options.every, "--every");

const INCREMENT = {
  type: "function",
  name: "increment_counter",
  description: "Add count to the counter",
  parameters: { type: "object", properties: { count: { type: "integer" } }, required: ["count"] },
};

const dir = options.dir ?? mkdtempSync(path.join(tmpdir(), "gym-bench-collect-"));
const tasks = path.join(dir, "tasks.jsonl");
writeFileSync(
  tasks,
  Array.from(
    { length: options.rows },
    (_, i) =>
      `${JSON.stringify({
        task_id: `counter-${i}`,
        environment: "counter_env",
        task_input: {
          responses_create_params: { input: "Increment the counter once.", tools: [INCREMENT] },
          task_data: { initial_count: 0, target: 1 },
        },
      })}\n`,
  ).join(""),
);

const run = new DeploymentRun(dir);
try {
  process.stderr.write(`serve    the reference deployment\n`);
  await run.serve();
  const participants = await run.participants();
  const processes = serverProcesses(run.serverPids());
  const recorder = new PauseRecorder(
    new Map(participants.members.map((m) => [m.name, m.kind])),
    schedstatSupported() ? () => snapshotOf(processes) : null,
  );
  recorder.attach(participants.client);
  // A warm-up run first (not measured): the first rows through fresh servers pay for JIT.
  const warmup = path.join(dir, "warmup");
  await collect({
    client: participants.client,
    participants,
    input: tasks,
    output: path.join(warmup, "rollouts.jsonl"),
    checkpointDir: warmup,
    concurrency: options.concurrency,
  });
  process.stderr.write(`warm-up  ${options.rows} rows (not measured)\n`);
  const rates: Record<"none" | "every", number[]> = { none: [], every: [] };
  const pauses: number[] = [];
  const breakdowns: PauseBreakdown[] = [];
  let published = 0;
  let missed = 0;
  for (let i = 0; i < options.runs; i++) {
    const order = i % 2 === 0 ? (["none", "every"] as const) : (["every", "none"] as const);
    for (const variant of order) {
      const checkpointDir = path.join(dir, `${variant}-${i}`);
      const started = performance.now();
      const summary: CollectSummary = await collect({
        client: participants.client,
        participants,
        input: tasks,
        output: path.join(checkpointDir, "rollouts.jsonl"),
        checkpointDir,
        concurrency: options.concurrency,
        ...(variant === "every" ? { checkpointEveryMs: everyMs } : {}),
        onEvent: (event) => {
          if (event.type !== "checkpoint") return;
          const outcome = event.outcome;
          if (outcome.status === "published") {
            published++;
            pauses.push(outcome.pauseMs);
            const breakdown = recorder.finish({ pauseMs: outcome.pauseMs });
            breakdowns.push(breakdown);
            if (options.breakdowns === true) {
              process.stdout.write(breakdownLine(breakdown));
              process.stderr.write(table(breakdownRows(breakdown)));
            }
          } else if (outcome.status !== "unavailable") missed++;
          process.stderr.write(
            `  checkpoint ${outcome.status}${"pauseMs" in outcome ? ` (paused ${Math.round(outcome.pauseMs)} ms)` : ""}${outcome.status === "published" ? `, ${outcome.continued} rows continued` : ""}\n`,
          );
        },
      });
      const seconds = (performance.now() - started) / 1000;
      if (summary.finished !== options.rows) {
        throw new Error(`${variant}: ${summary.finished} of ${options.rows} rows finished`);
      }
      const rate = options.rows / seconds;
      rates[variant].push(rate);
      process.stderr.write(
        `collect  ${variant === "none" ? "no checkpoints" : `a checkpoint every ${options.every}`}: ${options.rows} rows in ${seconds.toFixed(1)} s, ${rate.toFixed(1)} rows/s\n`,
      );
    }
  }
  const none = median(rates.none);
  const every = median(rates.every);
  const rows: [string, string][] = [
    ["rows", String(options.rows)],
    ["concurrency", String(options.concurrency)],
    ["runs of each variant", String(options.runs)],
    ["rows/s without checkpoints (median)", none.toFixed(1)],
    [`rows/s with a checkpoint every ${options.every} (median)`, every.toFixed(1)],
    ["ratio (with / without)", (every / none).toFixed(3)],
    ["checkpoints published / missed", `${published} / ${missed}`],
    [
      "dispatch pause per checkpoint (median, max)",
      pauses.length === 0
        ? "-"
        : `${median(pauses).toFixed(0)} ms, ${Math.max(...pauses).toFixed(0)} ms`,
    ],
  ];
  process.stdout.write(table(rows));
  if (breakdowns.length > 0) {
    process.stdout.write(
      `the pause per stage, median over ${breakdowns.length} checkpoints (the slowest server of a stage sets it):\n${table(medianRows(breakdowns))}`,
    );
  }
} finally {
  await run.stop().catch(() => undefined);
  if (options.dir === undefined) rmSync(dir, { recursive: true, force: true });
}

function table(rows: readonly [string, string][]): string {
  const width = Math.max(...rows.map(([k]) => k.length));
  return `${rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join("\n")}\n`;
}

/** Each stage's median ms, its servers' and its CPU split (median main / other / queued). */
function medianRows(all: readonly PauseBreakdown[]): [string, string][] {
  const ms = (values: number[]): string => `${median(values).toFixed(1)} ms`;
  const rows: [string, string][] = [["pause", ms(all.map((b) => b.pauseMs))]];
  const names = [...new Set(all.flatMap((b) => b.stages.map((s) => s.name)))];
  for (const name of names) {
    const stages = all.flatMap((b) => b.stages.filter((s) => s.name === name));
    rows.push([`  ${name}`, ms(stages.map((s) => s.ms))]);
    const servers = [...new Set(stages.flatMap((s) => s.servers.map((x) => x.server)))];
    const cpuServers = [...new Set(stages.flatMap((s) => (s.cpu ?? []).map((c) => c.server)))];
    for (const server of cpuServers) {
      const rowsOf = stages.flatMap((s) => (s.cpu ?? []).filter((c) => c.server === server));
      const main = rowsOf.map((c) => c.mainCpu * 1000);
      const other = rowsOf.map((c) => c.otherCpu * 1000);
      if (median(main) + median(other) < 1) continue;
      const call = servers.includes(server)
        ? `call ${ms(stages.flatMap((s) => s.servers.filter((x) => x.server === server).map((x) => x.ms)))}; `
        : "";
      rows.push([
        `    ${server}`,
        `${call}main CPU ${ms(main)} | other threads ${ms(other)} | queued ${ms(rowsOf.map((c) => c.mainQueued * 1000))}`,
      ]);
    }
  }
  rows.push(["  unaccounted", ms(all.map((b) => b.unaccountedMs))]);
  return rows;
}
