/**
 * `npm run bench:scale -- --rollouts 8000`: the demo's crash scenario at scale. Every rollout is
 * held inside its second model call (the per-rollout hold), the deployment is checkpointed, its
 * Gym processes are killed, restored and resumed, and the replacements run. Prints prepare per
 * stage, commit and restore seconds, rollouts in flight, exported, and replacement failures, and
 * checks the contract (every rollout finished before the checkpoint or was exported; every
 * exported one completes after the restore). Figures only: nothing here asserts on time.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import path from "node:path";
import { Command } from "commander";
import { DeploymentRun } from "../../demo/deployment-run.js";
import { runScenario } from "../../demo/scenario.js";
import { measureStoreBaseline, type StoreCost } from "./store-baseline.js";

const options = new Command("bench:scale")
  .option("--rollouts <n>", "rollouts to send", (v) => Number.parseInt(v, 10), 8000)
  .option("--dir <dir>", "run directory (default: a new temporary directory)")
  .option(
    "--quick-every <n>",
    "every n-th rollout finishes before the checkpoint (default 0: every rollout is held in flight)",
    (v) => Number.parseInt(v, 10),
    0,
  )
  .option(
    "--workers <n>",
    "worker processes of every participant server: environment, model, agent, resources (num_workers; default 1)",
    (v) => Number.parseInt(v, 10),
    1,
  )
  .option(
    "--cleanup-timeout <seconds>",
    "the environments' cleanup_timeout_seconds (default: 30 s + 10 ms per rollout)",
    (v) => Number.parseFloat(v),
  )
  .parse()
  .opts<{
    rollouts: number;
    dir?: string;
    cleanupTimeout?: number;
    quickEvery: number;
    workers: number;
  }>();
// Every rollout is sent at once: on two cores a session close queues behind thousands of others,
// so the bound on cleanup calls grows with the load (it is there to catch a hung server).
const cleanupTimeout = options.cleanupTimeout ?? 30 + options.rollouts / 100;

const KINDS = ["environment", "model", "agent", "resources"] as const;
const dir = options.dir ?? mkdtempSync(path.join(tmpdir(), "gym-scale-"));
const run = new DeploymentRun(dir, { GYM_CLEANUP_TIMEOUT_SECONDS: String(cleanupTimeout) });
if (options.workers > 1) {
  // Every participant server; the fake inference backend stays one process.
  const text = readFileSync(run.deploymentFile, "utf8").replace(
    /^( +)kind: (environment|model|agent|resources)$/gm,
    `$1kind: $2\n$1num_workers: ${options.workers}`,
  );
  writeFileSync(run.deploymentFile, text);
}
let last = 0;
let lastStage = "";
try {
  const report = await runScenario(run, {
    rollouts: options.rollouts,
    quickEvery: options.quickEvery,
    // A new stage prints at once; a stage's counters (thousands of updates) every 2 s.
    progress: (stage, detail) => {
      if (stage !== lastStage || Date.now() - last > 2000) {
        process.stderr.write(`${stage.padEnd(8)} ${detail ?? ""}\n`);
        last = Date.now();
        lastStage = stage;
      }
    },
  });
  const s = (x: number | undefined): string => (x === undefined ? "-" : x.toFixed(3));
  const rows: [string, string][] = [
    ["rollouts", String(report.rollouts)],
    ["workers per participant server", String(options.workers)],
    ["cleanup_timeout_seconds", String(cleanupTimeout)],
    ["in flight at the checkpoint", String(report.inFlight)],
    ["exported", String(report.exported)],
    ["generations cut", String(report.cutCalls)],
    ["prepare environment (s)", s(report.prepareSeconds.environment)],
    ["prepare model (s)", s(report.prepareSeconds.model)],
    ["prepare agent (s)", s(report.prepareSeconds.agent)],
    ["prepare resources (s)", s(report.prepareSeconds.resources)],
    ["commit (s)", s(report.commitSeconds)],
    ...KINDS.map((k): [string, string] => [`  commit ${k} (s)`, s(report.commitSecondsByKind[k])]),
    ["restore (s)", s(report.restoreSeconds)],
    ...KINDS.map((k): [string, string] => [
      `  restore ${k} (s)`,
      s(report.restoreSecondsByKind[k]),
    ]),
    ["replacement failures", String(report.replacementFailures)],
    ["contract problems", String(report.problems.length)],
  ];
  const width = Math.max(...rows.map(([k]) => k.length));
  process.stdout.write(`${rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join("\n")}\n`);
  for (const problem of report.problems.slice(0, 10)) process.stdout.write(`  - ${problem}\n`);
  await run.stop();
  // The baseline runs with the deployment stopped: nothing else competes for the cores. The
  // newest checkpoint is this run's (a reused --dir holds older ones too).
  const checkpoints = path.join(dir, "checkpoints");
  const newest = readdirSync(checkpoints)
    .map((name) => path.join(checkpoints, name))
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs)[0];
  if (newest !== undefined) {
    printBaseline(await measureStoreBaseline(newest), report.commitSeconds, report.restoreSeconds);
  }
  const ok = report.problems.length === 0;
  // A temporary run directory (thousands of ledger files) goes with a clean run.
  if (ok && options.dir === undefined) rmSync(dir, { recursive: true, force: true });
  else process.stderr.write(`the run's state and server logs are kept in ${dir}\n`);
  process.exit(ok ? 0 : 1);
} catch (error) {
  process.stderr.write(`bench failed: ${(error as Error).stack ?? String(error)}\n`);
  process.stderr.write(`the run's state and server logs are kept in ${dir}\n`);
  await run.stop().catch(() => undefined);
  process.exit(1);
}

/**
 * The store baseline and the ratios against it: each participant's records read and validated,
 * then written, in a fresh process of their own, one at a time. Its CPU summed over every
 * participant, divided by the cores, is the least a commit or a restore could take on this
 * machine with these records, even if nothing but the store cost anything.
 */
function printBaseline(costs: StoreCost[], commitSeconds: number, restoreSeconds: number): void {
  if (costs.length === 0) {
    process.stdout.write("store baseline: no participant holds records\n");
    return;
  }
  const cores = availableParallelism();
  const readMs = costs.reduce((sum, c) => sum + c.readCpuMs, 0);
  const writeMs = costs.reduce((sum, c) => sum + c.writeCpuMs, 0);
  const rows: [string, string][] = costs.map((c) => [
    `  ${c.participant} (${(c.bytes / 1e6).toFixed(1)} MB)`,
    `read ${c.readCpuMs.toFixed(0)} ms, write ${c.writeCpuMs.toFixed(0)} ms CPU`,
  ]);
  rows.push(
    [
      `  all, per ${cores} cores (s)`,
      `read ${(readMs / 1000 / cores).toFixed(3)}, write ${(writeMs / 1000 / cores).toFixed(3)}`,
    ],
    ["commit / store write", `${(commitSeconds / (writeMs / 1000 / cores)).toFixed(2)}x`],
    ["restore / store read", `${(restoreSeconds / (readMs / 1000 / cores)).toFixed(2)}x`],
  );
  const width = Math.max(...rows.map(([k]) => k.length));
  process.stdout.write(
    "store baseline (fresh process per participant, one at a time):\n" +
      `${rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join("\n")}\n`,
  );
}
