/**
 * `gym collect`: rollout collection over a dataset against the running deployment, with
 * checkpoints on SIGUSR1 (and `--checkpoint-every`), a checkpoint-and-stop on SIGTERM or SIGINT
 * (exit 75: requeue and `--resume`), a live progress display and a summary.
 */
import path from "node:path";
import { pino } from "pino";
import { CoordinationError, discover, type Participants } from "../client/coordination.js";
import { ServerClient } from "../client/server-client.js";
import { CollectionDirError } from "../collect/collection-dir.js";
import {
  Collection,
  CollectError,
  EXIT_PREEMPTED,
  type CollectSummary,
} from "../collect/collector.js";
import { JournalCorruptError } from "../collect/jsonl-journal.js";
import { TaskFileError } from "../collect/task-rows.js";
import { startTelemetry, stopTelemetry } from "../telemetry/setup.js";
import { duration, positiveDuration } from "./actions.js";
import { CollectDisplay, eventLine, summaryLines } from "./collect-display.js";
import { CliError, EXIT_OK, UsageError, commandOf, type Io } from "./output.js";
import { openRun } from "./open-run.js";

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
  readonly stepTimeout?: string;
  readonly runTimeout?: string;
  readonly json?: boolean;
}

function wholeNumber(value: string | undefined, flag: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value.trim()) || Number(value) < 1 || !Number.isSafeInteger(Number(value))) {
    throw new UsageError(`${flag} must be a positive integer, got ${JSON.stringify(value)}`);
  }
  return Number(value);
}

/** Runs `gym collect`; returns the exit status (0 complete, 75 stopped, 1 failed). */
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
    throw asCollectCliError(error, gym);
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
    throw asCollectCliError(error, gym);
  } finally {
    process.off("SIGUSR1", onCheckpoint);
    process.off("SIGTERM", onStop);
    process.off("SIGINT", onStop);
    display.stop();
    await client.destroy();
    await stopTelemetry(); // flushes the spans still batched
  }
  if (flags.json === true) io.out(JSON.stringify(summary, null, 2));
  else for (const line of summaryLines(summary)) io.out(line);
  return summary.status === "complete" ? EXIT_OK : EXIT_PREEMPTED;
}

/** A collector failure as the `gym` command reports it. */
function asCollectCliError(error: unknown, gym: string): unknown {
  if (error instanceof CollectError) return new CliError(error.message, error.hint ?? null);
  if (error instanceof TaskFileError) {
    return new CliError(error.message, "fix the row (one JSON object per line) and run again");
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
