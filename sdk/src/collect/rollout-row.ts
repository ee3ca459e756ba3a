/**
 * The collector's output: one JSON line per ended rollout, written as it ends. A rollout that
 * failed still ends: its row says how (`failure.kind`) and, for a refusal, the server's code.
 */
import { ServerReplyError, ServerUnreachableError } from "../client/errors.js";
import type { EpisodeId } from "../identity/episode-id.js";
import type { TaskId } from "../wire/environment.js";
import { JournalCorruptError, JsonlJournal } from "./jsonl-journal.js";

/**
 * How a rollout failed: the environment ended the episode with a failure (`episode_failed`), a
 * server refused the `/run` with a 4xx (`refused`) or failed it with a 5xx (`server_error`), or no
 * reply came in any attempt the run allowed (`no_reply`).
 */
export type FailureKind = "episode_failed" | "refused" | "server_error" | "no_reply";

/** Why a rollout failed. */
export interface RowFailure {
  readonly kind: FailureKind;
  /** The error envelope's code (`stale_attempt`, ...), when a server refused. */
  readonly code: string | null;
  /** The HTTP status, when a server answered. */
  readonly status: number | null;
  readonly message: string;
}

/** One line of the output. */
export interface RolloutRow {
  readonly rollout_id: string;
  readonly attempt: number;
  /** The task's row in the input (0-based among non-blank lines) and which repeat this is. */
  readonly row: number;
  readonly repeat: number;
  readonly task_id: TaskId;
  readonly environment: string;
  readonly status: "finished" | "failed";
  /** `result.reward` when it is a number. */
  readonly reward: number | null;
  /** What the environment returned (`result` of the `/run` reply), or null. */
  readonly result: unknown;
  readonly failure: RowFailure | null;
  /** When the attempt that ended was sent, and when it ended (ISO 8601). */
  readonly started_at: string;
  readonly finished_at: string;
  /** Seconds the ending attempt took. */
  readonly seconds: number;
}

/** How one `/run` ended, as the collector acts on it. */
export type RunOutcome =
  | { readonly kind: "replied"; readonly result: unknown; readonly failure: RowFailure | null }
  /** Refused before anything ran (`admission_closed`): the same attempt may be sent again. */
  | { readonly kind: "not_admitted" }
  /** No reply: the attempt may be running; it must be fenced before the row is sent again. */
  | { readonly kind: "no_reply"; readonly message: string };

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Classifies what a `/run` call returned or threw. */
export function runOutcome(reply: unknown, error?: unknown): RunOutcome {
  if (error !== undefined) {
    if (error instanceof ServerReplyError) {
      if (error.status === 409 && error.code === "admission_closed")
        return { kind: "not_admitted" };
      return {
        kind: "replied",
        result: null,
        failure: {
          kind: error.status >= 500 ? "server_error" : "refused",
          code: error.code,
          status: error.status,
          message: error.detail,
        },
      };
    }
    const message =
      error instanceof ServerUnreachableError
        ? error.message
        : error instanceof Error
          ? error.message
          : String(error);
    return { kind: "no_reply", message };
  }
  const body = isObject(reply) ? reply : {};
  const failure = isObject(body.failure) ? body.failure : null;
  if (failure !== null) {
    const reason = typeof failure.failure_reason === "string" ? failure.failure_reason : "failed";
    return {
      kind: "replied",
      result: body.result ?? null,
      failure: { kind: "episode_failed", code: null, status: 200, message: reason },
    };
  }
  return { kind: "replied", result: body.result ?? null, failure: null };
}

/** The reward a `/run` result carries, or null. */
export function rewardOf(result: unknown): number | null {
  return isObject(result) && typeof result.reward === "number" ? result.reward : null;
}

/** Totals over the rows of an output. */
export interface OutputTotals {
  finished: number;
  failed: number;
  rewardSum: number;
  rewarded: number;
}

/** The output file: the rollouts that ended, read back when opened, appended as more end. */
export class OutputFile {
  readonly totals: OutputTotals = { finished: 0, failed: 0, rewardSum: 0, rewarded: 0 };

  private constructor(
    readonly journal: JsonlJournal,
    /** Rollout IDs with a row (read back, and appended since). */
    readonly ended: Set<string>,
  ) {}

  /** Opens (or creates) the output and reads the rows it holds. */
  static async open(file: string): Promise<OutputFile> {
    const ended = new Set<string>();
    const rows: RolloutRow[] = [];
    const journal = await JsonlJournal.open(file, (value, line) => {
      if (!isObject(value) || typeof value.rollout_id !== "string") {
        throw new JournalCorruptError(file, line, "not an output row");
      }
      rows.push(value as unknown as RolloutRow);
    });
    const output = new OutputFile(journal, ended);
    for (const row of rows) output.#count(row);
    return output;
  }

  #count(row: RolloutRow): void {
    this.ended.add(row.rollout_id);
    if (row.status === "finished") this.totals.finished++;
    else this.totals.failed++;
    if (typeof row.reward === "number") {
      this.totals.rewardSum += row.reward;
      this.totals.rewarded++;
    }
  }

  /** Whether `rolloutId` already has its row. */
  has(rolloutId: string): boolean {
    return this.ended.has(rolloutId);
  }

  /** Writes a row unless its rollout has one; resolves once it is durable. */
  async write(row: RolloutRow): Promise<boolean> {
    if (this.ended.has(row.rollout_id)) return false;
    this.#count(row);
    await this.journal.append(row);
    return true;
  }

  async close(): Promise<void> {
    await this.journal.close();
  }
}

/** The row of an episode that ended with `outcome`. */
export function rolloutRow(
  episode: EpisodeId,
  fields: {
    readonly row: number;
    readonly repeat: number;
    readonly taskId: TaskId;
    readonly environment: string;
    readonly startedAt: number;
    readonly result: unknown;
    readonly failure: RowFailure | null;
  },
): RolloutRow {
  const finishedAt = Date.now();
  return {
    rollout_id: episode.rollout_id,
    attempt: episode.attempt,
    row: fields.row,
    repeat: fields.repeat,
    task_id: fields.taskId,
    environment: fields.environment,
    status: fields.failure === null ? "finished" : "failed",
    reward: fields.failure === null ? rewardOf(fields.result) : null,
    result: fields.result ?? null,
    failure: fields.failure,
    started_at: new Date(fields.startedAt).toISOString(),
    finished_at: new Date(finishedAt).toISOString(),
    seconds: Math.max(0, finishedAt - fields.startedAt) / 1000,
  };
}
