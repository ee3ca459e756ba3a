/**
 * `npm run demo:crash`: the reference deployment checkpointed with rollouts in flight, crashed, and
 * continued in fresh processes. Prints what happened and exits non-zero if any rollout was lost,
 * ran twice or was rewarded wrong.
 *
 *   npm run demo:crash -- --rollouts 64 [--keep] [--json]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Command } from "commander";
import { DeploymentRun } from "./deployment-run.js";
import { positiveInteger } from "./flags.js";
import { runScenario, type ScenarioReport } from "./scenario.js";

const program = new Command("demo:crash")
  .description("checkpoint the reference deployment mid-flight, crash it, and continue")
  .option("--rollouts <n>", "rollouts to send", positiveInteger("--rollouts"), 64)
  .option("--keep", "leave the restored servers running (browse /docs on each)", false)
  .option("--json", "print the report as JSON", false)
  .option("--dir <dir>", "where the run keeps its state (default: a new temporary directory)");
program.parse();
const options = program.opts<{ rollouts: number; keep: boolean; json: boolean; dir?: string }>();

const live = process.stderr.isTTY && !options.json;
let last = "";
function progress(stage: string, detail = ""): void {
  const line = `${stage.padEnd(8)} ${detail}`;
  if (live) process.stderr.write(`\r\x1b[2K${line}`);
  else if (line !== last && !options.json) process.stderr.write(`${line}\n`);
  last = line;
}

const dir = options.dir ?? mkdtempSync(path.join(tmpdir(), "gym-demo-"));
const run = new DeploymentRun(dir);
let report: ScenarioReport;
const started = performance.now();
try {
  report = await runScenario(run, { rollouts: options.rollouts, progress });
} catch (error) {
  if (live) process.stderr.write("\n");
  process.stderr.write(`demo failed: ${(error as Error).stack ?? String(error)}\n`);
  process.stderr.write(`the run's state and server logs are kept in ${dir}\n`);
  await run.stop().catch(() => undefined);
  process.exit(1);
}
if (live) process.stderr.write("\r\x1b[2K");
const seconds = (performance.now() - started) / 1000;

if (options.json) {
  process.stdout.write(`${JSON.stringify({ ...report, seconds, dir }, null, 2)}\n`);
} else {
  const s = (x: number | undefined): string => (x === undefined ? "-" : `${x.toFixed(3)} s`);
  const rows: [string, string][] = [
    ["rollouts", String(report.rollouts)],
    ["finished before the checkpoint", String(report.finishedBeforeCheckpoint)],
    ["in flight at the checkpoint", String(report.inFlight)],
    ["exported (environment commit)", String(report.exported)],
    ["restarts", String(report.restarts)],
    ["generations cut", String(report.cutCalls)],
    ["prepare: environment", s(report.prepareSeconds.environment)],
    ["prepare: model", s(report.prepareSeconds.model)],
    ["prepare: agent", s(report.prepareSeconds.agent)],
    ["prepare: resources", s(report.prepareSeconds.resources)],
    ["commit", s(report.commitSeconds)],
    ["restore", s(report.restoreSeconds)],
    ["replacements continued from a cut", String(report.continuedFromCut)],
    ["replacement failures", String(report.replacementFailures)],
    [
      "rewards",
      Object.entries(report.rewards)
        .map(([reward, n]) => `${n} × ${reward}`)
        .join(", "),
    ],
    ["whole run", `${seconds.toFixed(1)} s`],
  ];
  const width = Math.max(...rows.map(([k]) => k.length));
  process.stdout.write(`\n${rows.map(([k, v]) => `  ${k.padEnd(width)}  ${v}`).join("\n")}\n\n`);
  if (report.problems.length === 0) {
    process.stdout.write("every rollout finished exactly once with the right reward\n");
  } else {
    process.stdout.write(`${report.problems.length} problems:\n`);
    for (const problem of report.problems.slice(0, 20)) process.stdout.write(`  - ${problem}\n`);
  }
}
const ok = report.problems.length === 0;
if (options.keep) {
  process.stderr.write(`servers left running; stop with: npx gym stop --state ${run.stateFile}\n`);
} else {
  await run.stop();
  // A temporary run directory goes with a clean run; a failed one keeps its logs to read.
  if (ok && options.dir === undefined) rmSync(dir, { recursive: true, force: true });
  else process.stderr.write(`the run's state and server logs are kept in ${dir}\n`);
}
process.exit(ok ? 0 : 1);
