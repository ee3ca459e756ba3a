/**
 * The run's state file (`.gym/run.json` next to the deployment by default): what `gym serve`
 * started, so `gym stop` and `gym ckpt` can find it. Everything a run writes lives in the state
 * file's directory: the resolved deployment, `logs/<name>.log`, the last prepare.
 *
 * @see docs/deployment.md
 */
import { readFileSync, statSync } from "node:fs";
import path from "node:path";
import { CliError, UsageError } from "./output.js";
import {
  LastPrepareSchema,
  RunStateSchema,
  type LastPrepare,
  type RunState,
} from "./state-schema.js";
import {
  STATE_DIR_NAME,
  STATE_FILE_NAME,
  chooseStateFile,
  findStateFile,
  writeFileAtomic,
  writeStateFile,
} from "./state-io.js";

export {
  LAST_PREPARE_FILE_NAME,
  RESOLVED_FILE_NAME,
  STATE_DIR_NAME,
  STATE_FILE_NAME,
  chooseStateFile,
  findStateFile,
  removeFromState,
  statePaths,
  writeFileAtomic,
} from "./state-io.js";
export type { StatePaths } from "./state-io.js";
export type { LastPrepare, RunState, StateServer } from "./state-schema.js";

function readJson(file: string): unknown {
  return JSON.parse(readFileSync(file, "utf8")) as unknown;
}

/** Reads the state file, or null when there is none. Throws {@link CliError} when it is unreadable. */
export function readState(stateFile: string): RunState | null {
  let value: unknown;
  try {
    value = readJson(stateFile);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw new CliError(
      `cannot read the state file ${stateFile}: ${(error as Error).message}`,
      "delete it if no deployment is running from it, or pass the right one with --state FILE",
    );
  }
  const parsed = RunStateSchema.safeParse(value);
  if (!parsed.success) {
    throw new CliError(
      `the state file ${stateFile} is not a gym run state: ${parsed.error.issues[0]?.message ?? "invalid"}`,
      "delete it if no deployment is running from it, or pass the right one with --state FILE",
    );
  }
  return parsed.data;
}

/** Where no state file was found, for a message: the file, or where the search went. */
export function missingState(stateFile: string, searchedFrom?: string): string {
  return searchedFrom === undefined
    ? `there is no state file at ${stateFile}`
    : `there is no ${STATE_DIR_NAME}/${STATE_FILE_NAME} in ${searchedFrom} or any directory above it`;
}

/**
 * Reads the state file; a missing one is a {@link CliError} saying how to start a run, with
 * `gym` as the command prefix (`npx gym`, …: see `invocation.ts`). `searchedFrom` is the
 * directory the lookup started at when it searched upward ({@link runStateFile}).
 */
export function requireState(stateFile: string, gym: string, searchedFrom?: string): RunState {
  const state = readState(stateFile);
  if (state === null) {
    throw new CliError(
      `no running deployment: ${missingState(stateFile, searchedFrom)}`,
      `start one with \`${gym} serve <deployment.yaml>\`, or point at its state with --state FILE ` +
        "or --deployment FILE",
    );
  }
  return state;
}

/** Whether {@link runStateFile} searches upward for these options: neither flag was given. */
export function searchesUpward(options: {
  state?: string | undefined;
  deployment?: string | undefined;
}): boolean {
  return options.state === undefined && options.deployment === undefined;
}

/**
 * The state file of a run that `gym stop`, `gym ckpt`, `gym top` and `gym collect` act on:
 * `--state` when given; else `.gym/run.json` next to `--deployment`, after checking that file
 * exists (a mistyped deployment path is named as such, not reported as a missing run); else the
 * nearest `.gym/run.json` in the working directory or a directory above it
 * ({@link findStateFile}), so these commands work from anywhere inside the run's directory; else
 * `.gym/run.json` in the working directory, which does not exist. `command` is the prefix of the
 * command its advice names.
 */
export function runStateFile(options: {
  state?: string | undefined;
  deployment?: string | undefined;
  cwd: string;
  command: string;
}): string {
  if (options.state === undefined && options.deployment !== undefined) {
    const file = path.resolve(options.cwd, options.deployment);
    let problem: string | null = null;
    try {
      if (!statSync(file).isFile()) problem = "is not a file";
    } catch {
      problem = "does not exist";
    }
    if (problem !== null) {
      throw new UsageError(
        `the deployment file ${file} ${problem}`,
        `pass the deployment file the run was started from (\`${options.command} serve FILE\`) with --deployment FILE, ` +
          "or the run's state file with --state FILE",
      );
    }
  }
  if (searchesUpward(options)) return findStateFile(options.cwd) ?? chooseStateFile(options);
  return chooseStateFile(options);
}

/** Writes the state file. */
export function writeState(stateFile: string, state: RunState): void {
  writeStateFile(stateFile, RunStateSchema.parse(state));
}

/** Reads the last prepare, or null. */
export function readLastPrepare(file: string): LastPrepare | null {
  try {
    return LastPrepareSchema.parse(readJson(file));
  } catch {
    return null;
  }
}

/** Writes the last prepare. */
export function writeLastPrepare(file: string, prepare: LastPrepare): void {
  writeFileAtomic(file, `${JSON.stringify(prepare, null, 2)}\n`);
}
