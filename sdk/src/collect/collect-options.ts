/**
 * The options of a collection run, the usage error they can raise, and their numeric limits
 * checked and defaulted once, before anything is opened or sent.
 *
 * @see docs/collect.md
 */
import type { Logger } from "pino";
import type { Participants } from "../client/coordination.js";
import type { ServerClient } from "../client/server-client.js";
import type { CollectEvent } from "./collect-report.js";
import { DEFAULT_MAX_FAILURES } from "./failure-streak.js";

/** Options of {@link collect} and {@link Collection.start}. */
export interface CollectOptions {
  readonly client: ServerClient;
  /**
   * The deployment's participants (from `discover`), or null when it does not checkpoint: then
   * there are no checkpoints and no fencing, and a row whose `/run` got no reply is sent again
   * unfenced.
   */
  readonly participants: Participants | null;
  /** The JSON Lines file of tasks. */
  readonly input: string;
  /** The JSON Lines file rows are appended to as they end. */
  readonly output: string;
  /** Rows in flight at once. @default 16 */
  readonly concurrency?: number;
  /** Rollouts per task, each with its own rollout ID. @default 1 */
  readonly repeats?: number;
  /** The environment server of rows that name none. @default the deployment's only one */
  readonly environment?: string;
  /** The row field naming a row's environment server. @default "environment" */
  readonly routeField?: string;
  /** The task set of rows whose `task_id` is not an object. @default the input's base name */
  readonly taskset?: string;
  /** Where checkpoints, the dispatch log and the run file live; none: no checkpoints. */
  readonly checkpointDir?: string;
  /** Checkpoint this often while rows are in flight (ms). @default never */
  readonly checkpointEveryMs?: number;
  /** Continue the run `checkpointDir` holds (a new run when it holds none). */
  readonly resume?: boolean;
  /** Discard the run `checkpointDir` holds, and the output, and start over. */
  readonly reset?: boolean;
  /** Sends of a row that get no reply before it ends as a `no_reply` failure. @default 3 */
  readonly maxAttempts?: number;
  /**
   * Stop the run (status `failing`) once this many rollouts in a row, in the order they ended,
   * failed the same way (same failure kind and error code): the dataset or the deployment is
   * wrong, and going on would only write a failure row per row. Lowered to the run's rollouts
   * when it has fewer. The rollouts of the streak get no output row, so a resume sends them
   * again; failure rows are held back until the streak breaks. 0 turns the check off.
   * @default 20
   */
  readonly maxFailures?: number;
  /** Bound on each coordination step (prepare, commit, restore...), in ms. @default 60_000 */
  readonly stepTimeoutMs?: number;
  /** Bound on one `/run`, in ms. @default the client's data timeout */
  readonly runTimeoutMs?: number;
  readonly logger?: Logger;
  /** Told about checkpoints, restores and fences as they happen. */
  readonly onEvent?: (event: CollectEvent) => void;
}

/** A usage problem found before anything was sent. */
export class CollectError extends Error {
  override readonly name = "CollectError";
  constructor(
    message: string,
    /** What to do about it. */
    readonly hint?: string,
  ) {
    super(message);
  }
}

const DEFAULT_STEP_TIMEOUT_MS = 60_000;

/** The numeric options of a run, checked, with their defaults filled in. */
export interface CollectLimits {
  readonly concurrency: number;
  readonly repeats: number;
  readonly maxAttempts: number;
  readonly maxFailures: number;
  readonly stepTimeoutMs: number;
}

/** Checks and defaults the numeric options; throws {@link CollectError} naming a bad one. */
export function collectLimits(options: CollectOptions): CollectLimits {
  return {
    concurrency: positive(options.concurrency ?? 16, "concurrency"),
    repeats: positive(options.repeats ?? 1, "repeats"),
    maxAttempts: positive(options.maxAttempts ?? 3, "maxAttempts"),
    maxFailures: nonNegative(options.maxFailures ?? DEFAULT_MAX_FAILURES, "maxFailures"),
    stepTimeoutMs: positive(options.stepTimeoutMs ?? DEFAULT_STEP_TIMEOUT_MS, "stepTimeoutMs"),
  };
}

function nonNegative(value: number, name: string): number {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new CollectError(`${name} must be a whole number (0 or more), got ${value}`);
  }
  return value;
}

function positive(value: number, name: string): number {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new CollectError(`${name} must be a positive integer, got ${value}`);
  }
  return value;
}
