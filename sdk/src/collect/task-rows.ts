/**
 * The collector's input: a JSON Lines file of tasks, one row per non-blank line. A row is either
 * a task (`{task_id, task_input}`) or any object, which then becomes the `task_input` itself; its
 * `task_id` may be a `{taskset, task_id}` object, a string or number (in the run's task set), or
 * absent (the row's number). A routing field, when present, names the environment server.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import path from "node:path";
import { createInterface } from "node:readline";
import type { TaskId } from "../wire/environment.js";

/**
 * A row of the input that cannot be sent, named by its line; or (line 0) an input that cannot
 * be read at all, from {@link TaskFileError.unreadable}.
 */
export class TaskFileError extends Error {
  override readonly name = "TaskFileError";
  constructor(
    readonly file: string,
    /** 1-based line number, or 0 for the file as a whole. */
    readonly line: number,
    /** What is wrong: with the file and line in front, unless `line` is 0 (then it is all). */
    detail: string,
    options?: ErrorOptions,
  ) {
    super(line === 0 ? detail : `${file}:${line}: ${detail}`, options);
  }

  /** The input cannot be opened (`error` from the file system): missing, a directory, denied. */
  static unreadable(file: string, error: NodeJS.ErrnoException): TaskFileError {
    const detail =
      error.code === "ENOENT" || error.code === "ENOTDIR"
        ? `no such file: ${file}`
        : error.code === "EISDIR"
          ? `${file} is a directory, not a file of tasks`
          : error.code === "EACCES" || error.code === "EPERM"
            ? `cannot read ${file}: permission denied`
            : `cannot read ${file}: ${error.message}`;
    return new TaskFileError(file, 0, detail, { cause: error });
  }
}

/** What reading `file` threw, as a {@link TaskFileError} when the file system refused it. */
function unreadableOr(file: string, error: unknown): unknown {
  const code = (error as NodeJS.ErrnoException).code;
  return code !== undefined && ["ENOENT", "ENOTDIR", "EISDIR", "EACCES", "EPERM"].includes(code)
    ? TaskFileError.unreadable(file, error as NodeJS.ErrnoException)
    : error;
}

/** Throws {@link TaskFileError.unreadable} unless `file` can be opened and is not a directory. */
export async function checkTaskFile(file: string): Promise<void> {
  let handle: FileHandle;
  try {
    handle = await open(file, "r");
  } catch (error) {
    throw unreadableOr(file, error);
  }
  try {
    if ((await handle.stat()).isDirectory()) {
      throw new TaskFileError(file, 0, `${file} is a directory, not a file of tasks`);
    }
  } finally {
    await handle.close();
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
  /** The first line naming each of {@link environments}. */
  readonly firstLines: ReadonlyMap<string, number>;
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
  const firstLines = new Map<string, number>();
  const kept = new Map<number, TaskRow>();
  let rows = 0;
  let unrouted = 0;
  try {
    for await (const row of readTaskRows(file, options, (chunk) => hash.update(chunk))) {
      if (row.environment === null) unrouted++;
      else if (!firstLines.has(row.environment)) firstLines.set(row.environment, row.line);
      if (keep.has(row.index)) kept.set(row.index, row);
      rows++;
    }
  } catch (error) {
    throw unreadableOr(file, error);
  }
  return {
    rows,
    digest: hash.digest("hex"),
    environments: [...firstLines.keys()].sort(),
    firstLines,
    unrouted,
    kept,
  };
}
