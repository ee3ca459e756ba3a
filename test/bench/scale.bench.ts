/**
 * `npm run bench:scale -- --rollouts 8000`: the demo's crash scenario at scale. Every rollout is
 * held inside its second model call (the per-rollout hold), the deployment is checkpointed, its
 * Gym processes are killed, restored and resumed, and the replacements run. Prints prepare per
 * stage, commit and restore seconds, rollouts in flight, exported, and replacement failures, and
 * checks the contract (every rollout finished before the checkpoint or was exported; every
 * exported one completes after the restore). Then the store baseline of the same run, and where
 * the commit's and the restore's time went in each server (Linux: main-thread CPU, other
 * threads' CPU, time queued for a core, idle). `--repeat N` runs it N times and prints medians
 * and ranges. Figures only: nothing here asserts on time.
 */
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import path from "node:path";
import { Command } from "commander";
import { DeploymentRun } from "../../demo/deployment-run.js";
import { runScenario } from "../../demo/scenario.js";
import {
  phaseCpu,
  schedstatSupported,
  snapshot,
  snapshotOf,
  type PhaseCpu,
  type Snapshot,
} from "./cpu-breakdown.js";
import { median } from "./median.js";
import { listenOverflows } from "./listen-overflows.js";
import { printProfiles, recordWindow, type PhaseWindow } from "./profile-window.js";
import { measureStoreBaseline, type StoreCost } from "./store-baseline.js";
import { breakdownRows, PauseRecorder, type PauseBreakdown } from "./pause-breakdown.js";
import { serverProcesses } from "../../demo/process-tree.js";

const options = new Command("bench:scale")
  .option("--rollouts <n>", "rollouts to send", (v) => Number.parseInt(v, 10), 8000)
  .option("--dir <dir>", "run directory (default: a new temporary directory per run)")
  .option(
    "--node-args <args>",
    "the servers' node_args instead of the deployment file's (space-separated, e.g. GC settings to compare)",
  )
  .option(
    "--cpu-prof <dir>",
    "write each server's CPU profile into <dir> (the crash then stops the servers gracefully) and print what ran during commit and restore",
  )
  .option(
    "--repeat <n>",
    "runs, each a fresh deployment; prints medians and ranges",
    (v) => Number.parseInt(v, 10),
    1,
  )
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
    repeat: number;
    cpuProf?: string;
    nodeArgs?: string;
  }>();
// Every rollout is sent at once: on two cores a session close queues behind thousands of others,
// so the bound on cleanup calls grows with the load (it is there to catch a hung server).
const cleanupTimeout = options.cleanupTimeout ?? 30 + options.rollouts / 100;

const KINDS = ["environment", "model", "agent", "resources"] as const;
type Phase = "commit" | "restore";

/** What one run measured. */
interface RunFigures {
  readonly rows: [string, string][];
  readonly problems: readonly string[];
  readonly replacementFailures: number;
  /** Every prepare stage, one after another: environment, model, agent, resources. */
  readonly prepareSeconds: number;
  readonly commitSeconds: number;
  readonly restoreSeconds: number;
  /** The store baseline per core: write (commit) and read (restore), in seconds; null: none. */
  readonly baseline: { readonly write: number; readonly read: number } | null;
  readonly cpu: Partial<Record<Phase, PhaseCpu[]>>;
  /** The checkpoint's pause, first prepare sent → last commit reply (the crash follows). */
  readonly pause: PauseBreakdown | null;
}

const s = (x: number | undefined): string => (x === undefined ? "-" : x.toFixed(3));

function table(rows: readonly [string, string][]): string {
  const width = Math.max(...rows.map(([k]) => k.length));
  return `${rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join("\n")}\n`;
}

/** Runs the scenario once on a fresh deployment and measures it. */
async function runOnce(index: number): Promise<RunFigures> {
  const dir = options.dir ?? mkdtempSync(path.join(tmpdir(), "gym-scale-"));
  // Built servers (no TypeScript loader: a process starts on about half the CPU), and with
  // several workers a longer health wait (three processes per server start at once).
  const run = new DeploymentRun(
    dir,
    { GYM_CLEANUP_TIMEOUT_SECONDS: String(cleanupTimeout) },
    { compiled: true, workers: options.workers },
  );
  if (options.nodeArgs !== undefined) {
    const args = options.nodeArgs.split(/\s+/).filter((arg) => arg !== "");
    const text = readFileSync(run.deploymentFile, "utf8").replace(
      /node_args: &node_args \[[^\]]*\]/,
      `node_args: &node_args ${JSON.stringify(args)}`,
    );
    writeFileSync(run.deploymentFile, text);
  }
  const profileDir = options.cpuProf === undefined ? null : path.resolve(options.cpuProf);
  if (profileDir !== null) {
    mkdirSync(profileDir, { recursive: true });
    run.gracefulCrash = true;
    const text = readFileSync(run.deploymentFile, "utf8").replace(
      /node_args: &node_args \[([^\]]*)\]/,
      `node_args: &node_args [$1, --cpu-prof, "--cpu-prof-dir=${profileDir}"]`,
    );
    writeFileSync(run.deploymentFile, text);
  }
  const windows: PhaseWindow[] = [];
  const overflowsBefore = listenOverflows();
  const measureCpu = schedstatSupported();
  const starts: Partial<Record<Phase, Snapshot>> = {};
  const cpu: Partial<Record<Phase, PhaseCpu[]>> = {};
  let last = 0;
  let lastStage = "";
  // The first participants the scenario asks for are the ones it checkpoints: their control
  // calls are timed (the restore's come from fresh processes, asked for later).
  let recorder: PauseRecorder | null = null;
  const participantsOf = run.participants.bind(run);
  run.participants = async () => {
    const participants = await participantsOf();
    if (recorder === null) {
      const processes = serverProcesses(run.serverPids());
      recorder = new PauseRecorder(
        new Map(participants.members.map((m) => [m.name, m.kind])),
        measureCpu ? () => snapshotOf(processes) : null,
      );
      recorder.attach(participants.client);
    }
    return participants;
  };
  try {
    const report = await runScenario(run, {
      rollouts: options.rollouts,
      quickEvery: options.quickEvery,
      // A new stage prints at once; a stage's counters (thousands of updates) every 2 s.
      progress: (stage, detail) => {
        if (stage !== lastStage || Date.now() - last > 2000) {
          const prefix = options.repeat > 1 ? `[run ${index + 1}] ` : "";
          process.stderr.write(`${prefix}${stage.padEnd(8)} ${detail ?? ""}\n`);
          last = Date.now();
          lastStage = stage;
        }
      },
      phase: (phase, edge) => {
        if (profileDir !== null) recordWindow(windows, phase, edge, run.serverPids());
        if (!measureCpu) return;
        const now = snapshot(run.serverPids());
        if (edge === "start") starts[phase] = now;
        else if (starts[phase] !== undefined) cpu[phase] = phaseCpu(starts[phase], now);
      },
    });
    const pause = (recorder as PauseRecorder | null)?.finishCalls() ?? null;
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
      ...KINDS.map((k): [string, string] => [
        `  commit ${k} (s)`,
        s(report.commitSecondsByKind[k]),
      ]),
      ["restore (s)", s(report.restoreSeconds)],
      ...KINDS.map((k): [string, string] => [
        `  restore ${k} (s)`,
        s(report.restoreSecondsByKind[k]),
      ]),
      ["replacement failures", String(report.replacementFailures)],
      ["contract problems", String(report.problems.length)],
    ];
    const overflowsAfter = listenOverflows();
    if (overflowsBefore !== null && overflowsAfter !== null) {
      // The whole machine's: anything else running meanwhile counts too.
      rows.push(["accept queue overflows (machine)", String(overflowsAfter - overflowsBefore)]);
    }
    await run.stop();
    if (profileDir !== null) printProfiles(profileDir, windows);
    // The baseline runs with the deployment stopped: nothing else competes for the cores. The
    // newest checkpoint is this run's (a reused --dir holds older ones too).
    const checkpoints = path.join(dir, "checkpoints");
    const newest = readdirSync(checkpoints)
      .map((name) => path.join(checkpoints, name))
      .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs)[0];
    const costs = newest === undefined ? [] : await measureStoreBaseline(newest);
    const baseline = costs.length === 0 ? null : baselineOf(costs);
    if (options.repeat === 1) {
      process.stdout.write(table(rows));
      if (pause !== null) {
        process.stdout.write(
          `the pause, first prepare sent → last commit reply (the crash follows, no resume):\n${table(breakdownRows(pause))}`,
        );
      }
      for (const problem of report.problems.slice(0, 10)) process.stdout.write(`  - ${problem}\n`);
      printBaseline(costs, report.commitSeconds, report.restoreSeconds);
    } else {
      // The medians only count problems: say which, as they happen.
      for (const problem of report.problems.slice(0, 5)) {
        process.stderr.write(`[run ${index + 1}] problem  ${problem}\n`);
      }
      const overflows = rows.find(([name]) => name.startsWith("accept queue overflows"));
      if (overflows !== undefined) {
        process.stderr.write(`[run ${index + 1}] ${overflows[0]}: ${overflows[1]}\n`);
      }
    }
    // A temporary run directory (thousands of ledger files) goes with a clean run.
    if (report.problems.length === 0 && options.dir === undefined) {
      rmSync(dir, { recursive: true, force: true });
    } else {
      process.stderr.write(`the run's state and server logs are kept in ${dir}\n`);
    }
    return {
      rows,
      problems: report.problems,
      replacementFailures: report.replacementFailures,
      prepareSeconds: Object.values(report.prepareSeconds).reduce((sum, x) => sum + (x ?? 0), 0),
      commitSeconds: report.commitSeconds,
      restoreSeconds: report.restoreSeconds,
      baseline,
      cpu,
      pause,
    };
  } catch (error) {
    process.stderr.write(`the run's state and server logs are kept in ${dir}\n`);
    await run.stop().catch(() => undefined);
    throw error;
  }
}

/** The store baseline per core: its write CPU (a commit's floor) and read CPU (a restore's). */
function baselineOf(costs: readonly StoreCost[]): { write: number; read: number } {
  const cores = availableParallelism();
  return {
    write: costs.reduce((sum, c) => sum + c.writeCpuMs, 0) / 1000 / cores,
    read: costs.reduce((sum, c) => sum + c.readCpuMs, 0) / 1000 / cores,
  };
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
  const { read, write } = baselineOf(costs);
  const rows: [string, string][] = costs.map((c) => [
    `  ${c.participant} (${(c.bytes / 1e6).toFixed(1)} MB)`,
    `read ${c.readCpuMs.toFixed(0)} ms, write ${c.writeCpuMs.toFixed(0)} ms CPU`,
  ]);
  rows.push(
    [`  all, per ${cores} cores (s)`, `read ${read.toFixed(3)}, write ${write.toFixed(3)}`],
    ["commit / store write", `${(commitSeconds / write).toFixed(2)}x`],
    ["restore / store read", `${(restoreSeconds / read).toFixed(2)}x`],
  );
  process.stdout.write(
    `store baseline (fresh process per participant, one at a time):\n${table(rows)}`,
  );
}

/** `median (min–max)` of some figures, with `digits` decimals. */
function spread(values: readonly number[], digits = 3): string {
  if (values.length === 1) return (values[0] ?? 0).toFixed(digits);
  const low = Math.min(...values).toFixed(digits);
  const high = Math.max(...values).toFixed(digits);
  return `${median(values).toFixed(digits)} (${low}–${high})`;
}

/**
 * Where each phase's time went, per server: seconds of main-thread CPU, of the other threads'
 * CPU, queued for a core, and idle, with each phase's total CPU per core next to the wall time
 * and the store baseline (medians over the runs when there are several).
 */
function printCpu(runs: readonly RunFigures[]): void {
  if (!schedstatSupported()) {
    process.stdout.write(
      "CPU breakdown: not measured (needs Linux's /proc/<pid>/task/*/schedstat)\n",
    );
    return;
  }
  const cores = availableParallelism();
  for (const phase of ["commit", "restore"] as const) {
    const measured = runs.filter((r) => r.cpu[phase] !== undefined);
    if (measured.length === 0) continue;
    const servers = [...new Set(measured.flatMap((r) => r.cpu[phase]!.map((row) => row.server)))];
    const of = (server: string, pick: (row: PhaseCpu) => number): number[] =>
      measured.map((r) => {
        const row = r.cpu[phase]!.find((candidate) => candidate.server === server);
        return row === undefined ? 0 : pick(row);
      });
    const rows: [string, string][] = [["  server", "main CPU | other threads | queued | idle (s)"]];
    for (const server of servers) {
      rows.push([
        `  ${server}`,
        [
          spread(of(server, (row) => row.mainCpu)),
          spread(of(server, (row) => row.otherCpu)),
          spread(of(server, (row) => row.mainQueued)),
          spread(of(server, (row) => row.mainIdle)),
        ].join(" | "),
      ]);
    }
    const totalCpu = measured.map((r) =>
      r.cpu[phase]!.reduce((sum, row) => sum + row.mainCpu + row.otherCpu, 0),
    );
    const mainCpu = measured.map((r) => r.cpu[phase]!.reduce((sum, row) => sum + row.mainCpu, 0));
    const wall = measured.map((r) => (phase === "commit" ? r.commitSeconds : r.restoreSeconds));
    const floor = measured
      .map((r) =>
        r.baseline === null ? null : phase === "commit" ? r.baseline.write : r.baseline.read,
      )
      .filter((x): x is number => x !== null);
    rows.push(
      ["  all servers: CPU, main threads (s)", spread(mainCpu)],
      ["  all servers: CPU, every thread (s)", spread(totalCpu)],
      [`  CPU per ${cores} cores (s)`, spread(totalCpu.map((x) => x / cores))],
      [`  ${phase} wall time (s)`, spread(wall)],
    );
    if (floor.length > 0) {
      rows.push([
        `  store baseline, ${phase === "commit" ? "write" : "read"} per ${cores} cores (s)`,
        spread(floor),
      ]);
    }
    process.stdout.write(`${phase}: where the time went, per server\n${table(rows)}`);
  }
}

/** The pause and each of its stages, medians (min–max) over the runs that measured it. */
function pauseMedians(all: readonly RunFigures[]): [string, string][] {
  const pauses = all.map((r) => r.pause).filter((p): p is PauseBreakdown => p !== null);
  if (pauses.length === 0) return [];
  const rows: [string, string][] = [
    ["pause: prepare + commit (s)", spread(pauses.map((p) => p.pauseMs / 1000))],
  ];
  for (const name of [...new Set(pauses.flatMap((p) => p.stages.map((x) => x.name)))]) {
    const ms = pauses.flatMap((p) => p.stages.filter((x) => x.name === name).map((x) => x.ms));
    rows.push([`  ${name} (s)`, spread(ms.map((x) => x / 1000))]);
  }
  rows.push(["  unaccounted (s)", spread(pauses.map((p) => p.unaccountedMs / 1000))]);
  const ratios = all
    .filter((r) => r.pause !== null && r.baseline !== null)
    .map((r) => r.pause!.pauseMs / 1000 / r.baseline!.write);
  if (ratios.length > 0) rows.push(["pause / store write", `${spread(ratios, 2)}x`]);
  return rows;
}

const runs: RunFigures[] = [];
try {
  for (let index = 0; index < options.repeat; index++) runs.push(await runOnce(index));
} catch (error) {
  process.stderr.write(`bench failed: ${(error as Error).stack ?? String(error)}\n`);
  process.exit(1);
}
if (options.repeat > 1) {
  const ratio = (pick: (r: RunFigures) => number, floor: "write" | "read"): number[] =>
    runs.filter((r) => r.baseline !== null).map((r) => pick(r) / r.baseline![floor]);
  const rows: [string, string][] = [
    ["runs", String(runs.length)],
    ["rollouts", String(options.rollouts)],
    ["workers per participant server", String(options.workers)],
    ["node_args", options.nodeArgs ?? "(the deployment file's)"],
    ["prepare, every stage (s)", spread(runs.map((r) => r.prepareSeconds))],
    ["commit (s)", spread(runs.map((r) => r.commitSeconds))],
    ["restore (s)", spread(runs.map((r) => r.restoreSeconds))],
    [
      "commit / store write",
      `${spread(
        ratio((r) => r.commitSeconds, "write"),
        2,
      )}x`,
    ],
    [
      "restore / store read",
      `${spread(
        ratio((r) => r.restoreSeconds, "read"),
        2,
      )}x`,
    ],
    ...pauseMedians(runs),
    [
      "replacement failures (all runs)",
      String(runs.reduce((sum, r) => sum + r.replacementFailures, 0)),
    ],
    ["contract problems", String(runs.reduce((sum, r) => sum + r.problems.length, 0))],
  ];
  process.stdout.write(`medians (min–max) over ${runs.length} runs:\n${table(rows)}`);
}
printCpu(runs);
process.exit(runs.every((r) => r.problems.length === 0) ? 0 : 1);
