/**
 * `gym collect`: rollout collection over a dataset against the running deployment, with
 * checkpoints on SIGUSR1 (and `--checkpoint-every`), a checkpoint-and-stop on SIGTERM or SIGINT
 * (exit 75: requeue and `--resume`), a stop when rollouts keep failing the same way (exit 3:
 * fix, then `--resume`), a live progress display and a summary.
 */
import path from "node:path";
import { pino } from "pino";
import { CoordinationError, discover, type Participants } from "../client/coordination.js";
import { ServerClient } from "../client/server-client.js";
import { CollectionDirError } from "../collect/collection-dir.js";
import { CollectError } from "../collect/collect-options.js";
import { EXIT_FAILING, EXIT_PREEMPTED, type CollectSummary } from "../collect/collect-report.js";
import { Collection } from "../collect/collector.js";
import { DEFAULT_MAX_FAILURES, type FailureStreak } from "../collect/failure-streak.js";
import { JournalCorruptError } from "../collect/jsonl-journal.js";
import { TaskFileError } from "../collect/task-rows.js";
import { startTelemetry, stopTelemetry } from "../telemetry/setup.js";
import { duration, positiveDuration } from "./actions.js";
import { CollectDisplay, eventLine, summaryLines } from "./collect-display.js";
import { CliError, EXIT_OK, UsageError, commandOf, shownPath, type Io } from "./output.js";
import { openRun } from "./open-run.js";
import { waitReady } from "./wait-ready.js";

/** The flags of `gym collect`, as commander parses them. */
export interface CollectFlags {
  readonly output?: string;
  readonly state?: string;
  readonly deployment?: string;
  readonly concurrency?: string;
  readonly repeats?: string;
  readonly environment?: string;
  readonly routeField?: string;
  readonly taskset?: string;
  readonly checkpointDir?: string;
  readonly checkpointEvery?: string;
  readonly resume?: boolean;
  readonly reset?: boolean;
  readonly maxAttempts?: string;
  readonly maxFailures?: string;
  readonly stepTimeout?: string;
  readonly runTimeout?: string;
  readonly waitReady?: string;
  readonly json?: boolean;
}

function wholeNumber(value: string | undefined, flag: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value.trim()) || Number(value) < 1 || !Number.isSafeInteger(Number(value))) {
    throw new UsageError(`${flag} must be a positive integer, got ${JSON.stringify(value)}`);
  }
  return Number(value);
}

/** `--max-failures N` (0 or `none`: never stop on failures). */
function maxFailuresFlag(value: string | undefined): number {
  if (value === undefined) return DEFAULT_MAX_FAILURES;
  const text = value.trim().toLowerCase();
  if (text === "none" || text === "off") return 0;
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(Number(text))) {
    throw new UsageError(
      `--max-failures must be a whole number or none, got ${JSON.stringify(value)}`,
      `e.g. --max-failures ${DEFAULT_MAX_FAILURES}, or --max-failures 0 to never stop on failures`,
    );
  }
  return Number(text);
}

/**
 * Runs `gym collect`; returns the exit status (0 complete, 75 stopped, 3 stopped because
 * rollouts kept failing the same way, 1 failed).
 */
export async function collectCommand(input: string, flags: CollectFlags, io: Io): Promise<number> {
  const gym = commandOf(io);
  const checkpointDir =
    flags.checkpointDir === undefined ? undefined : path.resolve(io.cwd, flags.checkpointDir);
  const outputFlag =
    flags.output ??
    (checkpointDir === undefined ? undefined : path.join(checkpointDir, "rollouts.jsonl"));
  if (outputFlag === undefined) {
    throw new UsageError("where do the rows go?", "pass --output FILE (or --checkpoint-dir DIR)");
  }
  const concurrency = wholeNumber(flags.concurrency, "--concurrency", 16);
  const repeats = wholeNumber(flags.repeats, "--repeats", 1);
  const maxAttempts = wholeNumber(flags.maxAttempts, "--max-attempts", 3);
  const maxFailures = maxFailuresFlag(flags.maxFailures);
  const stepTimeoutMs = positiveDuration(flags.stepTimeout, "--step-timeout", 60_000);
  const every = duration(flags.checkpointEvery, "--checkpoint-every", 0);
  if (every > 0 && checkpointDir === undefined) {
    throw new UsageError("--checkpoint-every needs --checkpoint-dir", "pass where checkpoints go");
  }
  const runTimeoutMs =
    flags.runTimeout === undefined
      ? undefined
      : positiveDuration(flags.runTimeout, "--run-timeout", 0);

  // The controller's spans (gym.collect.*, gym.checkpoint.coordinate.*) when OTEL_* asks.
  const logger = pino({ level: io.env.LOG_LEVEL ?? "warn" }, pino.destination(2));
  startTelemetry({
    serviceName: "gym-collect",
    prometheus: false,
    env: io.env,
    onWarning: (message) => logger.warn(message),
  });
  const { stateFile, state, restartHint } = openRun(flags, io);
  const client = new ServerClient(state.deployment);
  const waitMs = duration(flags.waitReady, "--wait-ready", 0);
  if (waitMs > 0) {
    try {
      await waitReady(client, io, { timeoutMs: waitMs });
    } catch (error) {
      await client.close();
      throw error;
    }
  }
  let participants: Participants | null = null;
  const checkpoint = state.deployment.checkpoint;
  if (checkpoint?.enabled === true && checkpoint.control_auth_token) {
    try {
      participants = await discover(client, checkpoint.control_auth_token, {
        requireModel: false,
        probeTimeoutMs: 30_000,
        logger,
      });
    } catch (error) {
      await client.close();
      if (error instanceof CoordinationError) {
        throw new CliError(
          `cannot reach the deployment's participants: ${error.message}`,
          restartHint ??
            `is it running? \`${gym} ckpt status --state ${stateFile}\` probes every participant`,
        );
      }
      throw error;
    }
  }

  const terminal = flags.json !== true && process.stderr.isTTY === true;
  let display: CollectDisplay | null = null;
  let collection: Collection;
  try {
    collection = await Collection.start({
      client,
      participants,
      input: path.resolve(io.cwd, input),
      output: path.resolve(io.cwd, outputFlag),
      concurrency,
      repeats,
      maxAttempts,
      maxFailures,
      stepTimeoutMs,
      ...(flags.environment === undefined ? {} : { environment: flags.environment }),
      ...(flags.routeField === undefined ? {} : { routeField: flags.routeField }),
      ...(flags.taskset === undefined ? {} : { taskset: flags.taskset }),
      ...(checkpointDir === undefined ? {} : { checkpointDir }),
      ...(every > 0 ? { checkpointEveryMs: every } : {}),
      ...(runTimeoutMs === undefined ? {} : { runTimeoutMs }),
      resume: flags.resume === true,
      reset: flags.reset === true,
      logger,
      onEvent: (event) => {
        const line = eventLine(event);
        if (display !== null) display.line(line);
        else io.err(line);
      },
    });
  } catch (error) {
    await client.close();
    throw asCollectCliError(error, gym, io);
  }

  display = new CollectDisplay(
    () => collection.progress(),
    (line) => io.err(line),
    terminal ? (text) => void process.stderr.write(text) : null,
  );
  display.start();
  let interrupts = 0;
  const onCheckpoint = (): void => {
    void collection.checkpoint();
  };
  const onStop = (signal: NodeJS.Signals): void => {
    interrupts++;
    if (interrupts > 1) {
      io.err(`gym collect: ${signal} again: exiting without waiting for the checkpoint`);
      process.exit(130);
    }
    display?.line(`${signal}: checkpointing, then stopping (exit ${EXIT_PREEMPTED})`);
    void collection.stop();
  };
  process.on("SIGUSR1", onCheckpoint);
  process.on("SIGTERM", onStop);
  process.on("SIGINT", onStop);
  let summary: CollectSummary;
  try {
    summary = await collection.done;
  } catch (error) {
    throw asCollectCliError(error, gym, io);
  } finally {
    process.off("SIGUSR1", onCheckpoint);
    process.off("SIGTERM", onStop);
    process.off("SIGINT", onStop);
    display.stop();
    await client.destroy();
    await stopTelemetry(); // flushes the spans still batched
  }
  if (summary.failureStreak !== null) {
    // Printed by the CLI with the error: the summary as JSON on stdout, the reason on stderr.
    if (flags.json !== true) for (const line of summaryLines(summary)) io.out(line);
    const failing = failingError(
      summary.ended,
      summary.failureStreak,
      input,
      checkpointDir,
      io,
      gym,
    );
    failing.json = summary;
    throw failing;
  }
  if (flags.json === true) io.out(JSON.stringify(summary, null, 2));
  else for (const line of summaryLines(summary)) io.out(line);
  return summary.status === "complete" ? EXIT_OK : EXIT_PREEMPTED;
}

/** How a run stopped by its failures is reported: the failure, one example, what to do. */
function failingError(
  ended: number,
  streak: FailureStreak,
  input: string,
  checkpointDir: string | undefined,
  io: Io,
  gym: string,
): CliError {
  const how = [
    streak.kind,
    ...(streak.code === null ? [] : [streak.code]),
    ...(streak.status === null || streak.kind === "episode_failed"
      ? []
      : [`HTTP ${streak.status}`]),
  ].join(", ");
  const example = streak.example;
  const message =
    example.message.length > 300 ? `${example.message.slice(0, 300)}…` : example.message;
  const resumable = checkpointDir !== undefined;
  const where = resumable ? ` --checkpoint-dir ${shownPath(io, checkpointDir)}` : "";
  const todo = resumable
    ? `if the rows are wrong, fix the input, then start over with \`${gym} collect ${input}${where} --reset\` (a changed input cannot be resumed; --reset discards the ${ended} rows written); if the servers are, fix them, then \`${gym} collect ${input}${where} --resume\` keeps the rows written and sends these ${streak.rollouts} rollouts again`
    : "fix the input or the servers, then run again with a new --output (or --reset)";
  return new CliError(
    `stopped: ${streak.rollouts} rollouts in a row failed the same way (${how}); for example row ${example.row} (task ${example.task_id.taskset}/${example.task_id.task_id}): ${message}`,
    `${todo}. --max-failures 0 turns this check off.`,
    EXIT_FAILING,
  );
}

/** A collector failure as the `gym` command reports it. */
function asCollectCliError(error: unknown, gym: string, io: Io): unknown {
  if (error instanceof CollectError) return new CliError(error.message, error.hint ?? null);
  if (error instanceof TaskFileError) {
    return new CliError(
      error.message,
      error.line === 0
        ? `check the path (a relative one is read from ${io.cwd})`
        : "fix the row (one JSON object per line) and run again",
    );
  }
  if (error instanceof JournalCorruptError || error instanceof CollectionDirError) {
    return new CliError(
      error.message,
      `restore the file, or start over with \`${gym} collect ... --reset\``,
    );
  }
  if (error instanceof CoordinationError) {
    return new CliError(error.message, `check the deployment: \`${gym} ckpt status\``);
  }
  return error;
}
