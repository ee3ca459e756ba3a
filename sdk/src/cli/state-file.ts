/**
 * The run's state file (`.gym/run.json` next to the deployment by default): what `gym serve`
 * started, so `gym stop`, `gym ckpt`, `gym top` and `gym collect` can find it. Everything a run writes lives in the state
 * file's directory: the resolved deployment, `logs/<name>.log`, the last prepare.
 *
 * @see docs/deployment.md
 */
import { readFileSync, statSync } from "node:fs";
import path from "node:path";
import { CliError, UsageError, shownPath } from "./output.js";
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
  stateFilesNear,
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
  nodeStateFile,
  nodeStateFiles,
  removeFromState,
  stateFilesNear,
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

/**
 * Where no state file was found, for a message: the file, or, when the lookup searched from
 * `searchedFrom` ({@link stateFilesNear}), every place it looked.
 */
export function missingState(stateFile: string, searchedFrom?: string): string {
  if (searchedFrom === undefined) return `there is no state file at ${stateFile}`;
  const below = path.join(searchedFrom, "*", STATE_DIR_NAME, STATE_FILE_NAME);
  return (
    `there is no ${STATE_DIR_NAME}/${STATE_FILE_NAME} in ${searchedFrom}, in a directory just ` +
    `below it (${below}) or in any directory above it`
  );
}

/** How to point a command at a run explicitly, for advice. */
const POINT_AT_A_RUN =
  "point at its state with --state FILE (the .gym/run.json next to the deployment file it was " +
  "started from) or at that file with --deployment FILE, or run the command from that directory";

/**
 * Reads the state file; a missing one is a {@link CliError} saying how to start a run, with
 * `gym` as the command prefix (`npx gym`, …: see `invocation.ts`). `searchedFrom` is the
 * directory the lookup started at when it searched ({@link runStateFile}).
 */
export function requireState(stateFile: string, gym: string, searchedFrom?: string): RunState {
  const state = readState(stateFile);
  if (state === null) {
    throw new CliError(
      `no running deployment: ${missingState(stateFile, searchedFrom)}`,
      `start one with \`${gym} serve <deployment.yaml>\`; for a run started elsewhere, ${POINT_AT_A_RUN}`,
    );
  }
  return state;
}

/** Whether {@link runStateFile} searches for the run for these options: neither flag was given. */
export function searchesNearby(options: {
  state?: string | undefined;
  deployment?: string | undefined;
}): boolean {
  return options.state === undefined && options.deployment === undefined;
}

/**
 * The state file of a run that `gym stop`, `gym ckpt`, `gym top` and `gym collect` act on:
 * `--state` when given; else `.gym/run.json` next to `--deployment`, after checking that file
 * exists (a mistyped deployment path is named as such, not reported as a missing run); else the
 * one {@link stateFilesNear} finds from the working directory (its own `.gym/run.json`, else one
 * in a directory just below it, else the nearest above it), so these commands work from the
 * directory `gym serve` ran in and from anywhere inside the run's directory; else
 * `.gym/run.json` in the working directory, which does not exist. Two runs just below the
 * working directory are a {@link UsageError} naming both: the command will not guess. `command`
 * is the prefix of the command its advice names.
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
  if (!searchesNearby(options)) return chooseStateFile(options);
  const found = stateFilesNear(options.cwd);
  if (found.length > 1) {
    const shown = found.map((file) => shownPath(options, file));
    throw new UsageError(
      `${found.length} runs in the directories just below ${path.resolve(options.cwd)}: ${shown.join(", ")}`,
      `say which with --state FILE (e.g. --state ${shown[0] ?? ""}) or with --deployment FILE ` +
        "(the deployment file that run was started from), or run the command from that run's directory",
    );
  }
  return found[0] ?? chooseStateFile(options);
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
