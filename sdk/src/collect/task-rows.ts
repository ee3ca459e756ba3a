/**
 * The collector's input: a JSON Lines file of tasks, one row per non-blank line. A row is either
 * a task (`{task_id, task_input}`) or any object, which then becomes the `task_input` itself; its
 * `task_id` may be a `{taskset, task_id}` object, a string or number (in the run's task set), or
 * absent (the row's number). A routing field, when present, names the environment server.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import path from "node:path";
import { createInterface } from "node:readline";
import type { TaskId } from "../wire/environment.js";

/** A row of the input that cannot be sent, named by its line. */
export class TaskFileError extends Error {
  override readonly name = "TaskFileError";
  constructor(
    readonly file: string,
    /** 1-based line number, or 0 for the file as a whole. */
    readonly line: number,
    detail: string,
  ) {
    super(line === 0 ? `${file}: ${detail}` : `${file}:${line}: ${detail}`);
  }
}

/** How rows become tasks. */
export interface TaskRowOptions {
  /** The row field naming a row's environment server, removed from its task input. */
  readonly routeField: string;
  /** The task set of rows whose `task_id` is not an object. @default the file's base name */
  readonly taskset?: string;
}

/** One row of the input, ready to send. */
export interface TaskRow {
  /** 0-based among the file's non-blank lines. */
  readonly index: number;
  readonly line: number;
  readonly task: { readonly task_id: TaskId; readonly task_input: unknown };
  /** The environment server the row names, or null (the run's default). */
  readonly environment: string | null;
}

/** What one pass over the input found. */
export interface TaskFileSummary {
  readonly rows: number;
  /** sha256 of the file's bytes: a resumed run refuses an input that changed under it. */
  readonly digest: string;
  /** Environment servers named by rows (routing field), sorted. */
  readonly environments: readonly string[];
  /** Rows that name no environment server (they go to the run's default). */
  readonly unrouted: number;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The task set rows fall in by default: the input's base name without its extensions. */
export function defaultTaskset(file: string): string {
  const base = path.basename(file).replace(/\..*$/, "");
  return base === "" ? "tasks" : base;
}

/** Turns one parsed line into a row; throws {@link TaskFileError} naming what is wrong. */
export function taskRow(
  value: unknown,
  index: number,
  line: number,
  file: string,
  options: TaskRowOptions,
): TaskRow {
  if (!isPlainObject(value)) throw new TaskFileError(file, line, "a row must be a JSON object");
  const taskset = options.taskset ?? defaultTaskset(file);
  let environment: string | null = null;
  if (Object.hasOwn(value, options.routeField)) {
    const named = value[options.routeField];
    if (typeof named !== "string" || named === "") {
      throw new TaskFileError(
        file,
        line,
        `"${options.routeField}" must name an environment server (a non-empty string)`,
      );
    }
    environment = named;
  }
  const rawId = value.task_id;
  let taskId: TaskId;
  if (rawId === undefined) {
    taskId = { taskset, task_id: String(index) };
  } else if (typeof rawId === "string" || typeof rawId === "number") {
    if (String(rawId) === "") throw new TaskFileError(file, line, "task_id must not be empty");
    taskId = { taskset, task_id: String(rawId) };
  } else if (
    isPlainObject(rawId) &&
    typeof rawId.taskset === "string" &&
    rawId.taskset !== "" &&
    typeof rawId.task_id === "string" &&
    rawId.task_id !== "" &&
    Object.keys(rawId).length === 2
  ) {
    taskId = { taskset: rawId.taskset, task_id: rawId.task_id };
  } else {
    throw new TaskFileError(
      file,
      line,
      "task_id must be a string, a number, or {taskset, task_id} with non-empty strings",
    );
  }
  let taskInput: unknown;
  if (Object.hasOwn(value, "task_input")) {
    taskInput = value.task_input;
  } else {
    const rest: Record<string, unknown> = { ...value };
    delete rest.task_id;
    delete rest[options.routeField];
    taskInput = rest;
  }
  return { index, line, task: { task_id: taskId, task_input: taskInput }, environment };
}

/** Streams the rows of `file` in order; a bad row throws {@link TaskFileError}. */
export async function* readTaskRows(
  file: string,
  options: TaskRowOptions,
  onChunk?: (chunk: Buffer) => void,
): AsyncGenerator<TaskRow> {
  const stream = createReadStream(file);
  if (onChunk !== undefined) stream.on("data", (chunk) => onChunk(chunk as Buffer));
  const lines = createInterface({ input: stream, crlfDelay: Infinity });
  let index = 0;
  let line = 0;
  try {
    for await (const text of lines) {
      line++;
      if (text.trim() === "") continue;
      let value: unknown;
      try {
        value = JSON.parse(text);
      } catch (error) {
        throw new TaskFileError(file, line, `not JSON (${(error as Error).message})`);
      }
      yield taskRow(value, index, line, file, options);
      index++;
    }
  } finally {
    lines.close();
  }
}

/**
 * Reads the whole input once: checks every row, counts them, digests the bytes. `keep` names rows
 * (by index) whose task the caller needs now, returned in `kept`.
 */
export async function scanTaskFile(
  file: string,
  options: TaskRowOptions,
  keep: ReadonlySet<number> = new Set(),
): Promise<TaskFileSummary & { readonly kept: ReadonlyMap<number, TaskRow> }> {
  const hash = createHash("sha256");
  const environments = new Set<string>();
  const kept = new Map<number, TaskRow>();
  let rows = 0;
  let unrouted = 0;
  try {
    for await (const row of readTaskRows(file, options, (chunk) => hash.update(chunk))) {
      if (row.environment !== null) environments.add(row.environment);
      else unrouted++;
      if (keep.has(row.index)) kept.set(row.index, row);
      rows++;
    }
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") {
      throw new TaskFileError(file, 0, "no such file");
    }
    throw error;
  }
  return {
    rows,
    digest: hash.digest("hex"),
    environments: [...environments].sort(),
    unrouted,
    kept,
  };
}
