/**
 * `npm run demo`: the main job, a rollout collection over the reference servers' sample dataset,
 * preempted in the middle and resumed. `gym collect` runs with a checkpoint directory; once rows
 * are in flight it gets SIGTERM (how Slurm and Kubernetes announce preemption), checkpoints and
 * exits 75; every Gym server is then killed and started again (the node went away); `gym collect
 * --resume` restores the checkpoint and finishes the run. The demo checks that every row ended
 * exactly once with reward 1, and that no model call delivered before the preemption was made
 * again. Exits non-zero otherwise.
 *
 *   npm run demo -- [--concurrency 8] [--keep] [--json] [--dir D]
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Command } from "commander";
import { DeploymentRun } from "./deployment-run.js";
import { positiveInteger } from "./flags.js";
import { COMPILED_CLI, REPO } from "./gym-process.js";

const DATASET = path.join(REPO, "reference-servers", "datasets", "counter.jsonl");
const EXIT_PREEMPTED = 75;

const program = new Command("demo")
  .description("collect the sample dataset, preempted in the middle and resumed")
  .option("--concurrency <n>", "rows in flight at once", positiveInteger("--concurrency"), 8)
  .option("--keep", "leave the servers running (browse /docs on each)", false)
  .option("--json", "print the report as JSON", false)
  .option("--dir <dir>", "where the run keeps its state (default: a new temporary directory)");
program.parse();
const options = program.opts<{ concurrency: number; keep: boolean; json: boolean; dir?: string }>();

const dir = options.dir ?? mkdtempSync(path.join(tmpdir(), "gym-demo-"));
const checkpointDir = path.join(dir, "collection");
const output = path.join(checkpointDir, "rollouts.jsonl");
const run = new DeploymentRun(dir);
const say = (step: string, text: string): void => {
  if (!options.json) process.stderr.write(`\n${step.padEnd(8)} ${text}\n`);
};

interface BackendCall {
  readonly rollout: string | null;
  readonly model_call_id: string | null;
  readonly n_messages: number;
  readonly held: boolean;
  readonly returned: boolean;
  readonly continued_from: string | null;
}

/** Runs `gym collect` with the terminal as its display; resolves with its exit status. */
function collect(args: readonly string[], onStart?: (signal: (s: NodeJS.Signals) => void) => void) {
  const child = spawn(
    process.execPath,
    [
      COMPILED_CLI,
      "collect",
      DATASET,
      "--state",
      run.stateFile,
      "--checkpoint-dir",
      checkpointDir,
      "--concurrency",
      String(options.concurrency),
      ...args,
    ],
    {
      cwd: REPO,
      env: run.env,
      stdio: ["ignore", options.json ? "ignore" : "inherit", options.json ? "ignore" : "inherit"],
    },
  );
  onStart?.((signal) => child.kill(signal));
  return new Promise<number | null>((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (code) => resolve(code));
  });
}

async function until<T>(what: string, probe: () => Promise<T | null>, timeoutMs = 60_000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== null) return value;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const calls = async (): Promise<BackendCall[]> =>
  (await run.backend<{ calls: BackendCall[] }>("GET", "/_ctl/calls")).calls;

interface Report {
  rows: number;
  endedOnce: boolean;
  rewards: Record<string, number>;
  preemptedExit: number | null;
  resumedExit: number | null;
  inFlightAtPreemption: number;
  continued: number;
  repeatedDeliveredCalls: number;
  problems: string[];
}

let report: Report;
try {
  say("serve", "starting the reference deployment (reference-servers/deployment.yaml)");
  await run.serve();
  // The fake model answers at once; holding the calls after the first 24 lets the preemption
  // land with rows in flight (each row makes two calls: a tool call, then its answer).
  await run.backend("POST", "/_ctl/hold", { after_calls: 24 });
  say("collect", `gym collect ${path.relative(REPO, DATASET)} --checkpoint-dir ${checkpointDir}`);
  let signal: (s: NodeJS.Signals) => void = () => undefined;
  const first = collect([], (send) => (signal = send));
  const held = await until("rows in flight", async () => {
    const waiting = (await calls()).filter((call) => call.held && !call.returned);
    return waiting.length >= options.concurrency ? waiting : null;
  });
  say(
    "preempt",
    `SIGTERM with ${held.length} rows in flight: checkpoint, then exit ${EXIT_PREEMPTED}`,
  );
  signal("SIGTERM");
  const preemptedExit = await first;
  say("crash", "every Gym server killed (the node went away), then started again");
  await run.crash();
  await run.serve({ afterCrash: true });
  await run.backend("POST", "/_ctl/release");
  say("resume", "gym collect ... --resume");
  const resumedExit = await collect(["--resume"]);

  const rows = readFileSync(output, "utf8")
    .split("\n")
    .filter((line) => line !== "")
    .map(
      (line) => JSON.parse(line) as { rollout_id: string; attempt: number; reward: number | null },
    );
  const dataset = readFileSync(DATASET, "utf8")
    .split("\n")
    .filter((line) => line !== "").length;
  const problems: string[] = [];
  if (preemptedExit !== EXIT_PREEMPTED) problems.push(`the preempted run exited ${preemptedExit}`);
  if (resumedExit !== 0) problems.push(`the resumed run exited ${resumedExit}`);
  const ids = new Set(rows.map((row) => row.rollout_id));
  if (rows.length !== dataset || ids.size !== dataset) {
    problems.push(`${rows.length} rows (${ids.size} distinct) for ${dataset} tasks`);
  }
  const rewards: Record<string, number> = {};
  for (const row of rows) rewards[String(row.reward)] = (rewards[String(row.reward)] ?? 0) + 1;
  if (rows.some((row) => row.reward !== 1)) problems.push("a row was not rewarded 1");
  // Continued rows: attempt 1, and none of their calls repeats a call delivered before.
  const log = await calls();
  const continued = rows.filter((row) => row.attempt === 1);
  let repeated = 0;
  for (const row of continued) {
    const before = log.filter((call) => call.rollout === row.rollout_id);
    const after = log.filter((call) => call.rollout === `${row.rollout_id}-a1`);
    const delivered = Math.max(0, ...before.filter((c) => c.returned).map((c) => c.n_messages));
    repeated += after.filter((call) => call.n_messages <= delivered).length;
  }
  if (repeated > 0) problems.push(`${repeated} delivered model calls were made again`);
  if (continued.length === 0) problems.push("no row was continued from the checkpoint");
  report = {
    rows: rows.length,
    endedOnce: rows.length === ids.size,
    rewards,
    preemptedExit,
    resumedExit,
    inFlightAtPreemption: held.length,
    continued: continued.length,
    repeatedDeliveredCalls: repeated,
    problems,
  };
} catch (error) {
  process.stderr.write(`demo failed: ${(error as Error).stack ?? String(error)}\n`);
  process.stderr.write(`the run's state and server logs are kept in ${dir}\n`);
  await run.stop().catch(() => undefined);
  process.exit(1);
}

if (options.json) {
  process.stdout.write(`${JSON.stringify({ ...report, dir }, null, 2)}\n`);
} else if (report.problems.length === 0) {
  process.stdout.write(
    `\nevery one of ${report.rows} rows ended exactly once with reward 1; ${report.continued} ` +
      `continued from the checkpoint as attempt 1 without repeating a delivered model call\n`,
  );
} else {
  process.stdout.write(`\n${report.problems.length} problems:\n`);
  for (const problem of report.problems) process.stdout.write(`  - ${problem}\n`);
}
const ok = report.problems.length === 0;
if (options.keep) {
  process.stderr.write(`servers left running; stop with: npx gym stop --state ${run.stateFile}\n`);
} else {
  await run.stop();
  if (ok && options.dir === undefined) rmSync(dir, { recursive: true, force: true });
  else process.stderr.write(`the run's state, checkpoints and server logs are in ${dir}\n`);
}
process.exit(ok ? 0 : 1);
