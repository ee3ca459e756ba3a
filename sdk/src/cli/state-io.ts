/**
 * Where a run's files live and how they are written, without validation (and without loading
 * zod): the supervisor uses this. `state-file.ts` adds validated reads (`state-schema.ts` holds
 * the shapes).
 */
import { randomBytes } from "node:crypto";
import {
  chmodSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import path from "node:path";
import type { RunState } from "./state-schema.js";

/** The state directory's name next to a deployment file. */
export const STATE_DIR_NAME = ".gym";
/** The state file's name inside the state directory. */
export const STATE_FILE_NAME = "run.json";
/** The resolved deployment's file name inside the state directory. */
export const RESOLVED_FILE_NAME = "deployment.resolved.json";
/** The last prepare's file name inside the state directory. */
export const LAST_PREPARE_FILE_NAME = "last-prepare.json";

/** Where a run's files live. */
export interface StatePaths {
  /** The state file. */
  readonly stateFile: string;
  /** Its directory. */
  readonly dir: string;
  readonly resolvedFile: string;
  readonly logsDir: string;
  readonly lastPrepareFile: string;
  /** The detached supervisor's own output. */
  readonly supervisorLog: string;
}

/** The files of a run whose state file is `stateFile`. */
export function statePaths(stateFile: string): StatePaths {
  const absolute = path.resolve(stateFile);
  const dir = path.dirname(absolute);
  return {
    stateFile: absolute,
    dir,
    resolvedFile: path.join(dir, RESOLVED_FILE_NAME),
    logsDir: path.join(dir, "logs"),
    lastPrepareFile: path.join(dir, LAST_PREPARE_FILE_NAME),
    supervisorLog: path.join(dir, "serve.log"),
  };
}

/**
 * The state file a command uses: `--state` when given; else `.gym/run.json` next to
 * `--deployment`; else `.gym/run.json` in the working directory.
 */
export function chooseStateFile(options: {
  state?: string | undefined;
  deployment?: string | undefined;
  cwd: string;
}): string {
  if (options.state !== undefined) return path.resolve(options.cwd, options.state);
  const base =
    options.deployment !== undefined
      ? path.dirname(path.resolve(options.cwd, options.deployment))
      : options.cwd;
  return path.join(base, STATE_DIR_NAME, STATE_FILE_NAME);
}

/**
 * The nearest state file at or above `dir`: `.gym/run.json` in `dir`, else in its parent, and so
 * on up to the filesystem root, the way git finds `.git`; null when there is none. A command run
 * anywhere inside the directory `gym serve` ran from finds that run.
 */
export function findStateFile(dir: string): string | null {
  for (let current = path.resolve(dir); ; current = path.dirname(current)) {
    const candidate = path.join(current, STATE_DIR_NAME, STATE_FILE_NAME);
    try {
      if (statSync(candidate).isFile()) return candidate;
    } catch {
      // not here: look one level up
    }
    if (path.dirname(current) === current) return null;
  }
}

/** Writes a file atomically (temporary file, then rename), readable by its owner only. */
export function writeFileAtomic(file: string, text: string): void {
  mkdirSync(path.dirname(file), { recursive: true });
  const temporary = `${file}.${randomBytes(4).toString("hex")}.tmp`;
  writeFileSync(temporary, text, { mode: 0o600 });
  chmodSync(temporary, 0o600);
  renameSync(temporary, file);
}

/** Writes the state file as given (the caller built it from validated parts). */
export function writeStateFile(stateFile: string, state: RunState): void {
  writeFileAtomic(stateFile, `${JSON.stringify(state, null, 2)}\n`);
}

/**
 * Removes `names` from the state file (only entries still naming `pids`, when given); deletes the
 * file when no server is left. A missing or unreadable state file is left alone.
 */
export function removeFromState(
  stateFile: string,
  names: readonly string[],
  pids?: Readonly<Record<string, number>>,
): void {
  let state: RunState;
  try {
    state = JSON.parse(readFileSync(stateFile, "utf8")) as RunState;
  } catch {
    return;
  }
  if (state === null || typeof state !== "object" || typeof state.servers !== "object") return;
  for (const name of names) {
    const entry = state.servers[name];
    if (entry === undefined) continue;
    if (pids !== undefined && pids[name] !== undefined && pids[name] !== entry.pid) continue;
    delete state.servers[name];
  }
  if (Object.keys(state.servers).length === 0) {
    rmSync(stateFile, { force: true });
  } else {
    writeStateFile(stateFile, state);
  }
}
