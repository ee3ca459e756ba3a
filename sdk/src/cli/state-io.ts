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
  readdirSync,
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

/** The directory under the state directory holding each node's own run. */
export const NODES_DIR_NAME = "nodes";

/**
 * The state file of one node's servers in a deployment with `nodes:`:
 * `.gym/nodes/<node>/run.json` next to the deployment file, so that each machine writes only its
 * own files in a run directory they all share.
 */
export function nodeStateFile(deploymentFile: string, node: string): string {
  return path.join(
    path.dirname(path.resolve(deploymentFile)),
    STATE_DIR_NAME,
    NODES_DIR_NAME,
    node,
    STATE_FILE_NAME,
  );
}

/** Every node state file next to a deployment file, by node name (those that exist). */
export function nodeStateFiles(deploymentFile: string): Record<string, string> {
  const dir = path.join(path.dirname(path.resolve(deploymentFile)), STATE_DIR_NAME, NODES_DIR_NAME);
  const found: Record<string, string> = {};
  let names: string[] = [];
  try {
    names = readdirSync(dir).sort();
  } catch {
    return found;
  }
  for (const name of names) {
    const file = path.join(dir, name, STATE_FILE_NAME);
    if (isStateFile(file)) found[name] = file;
  }
  return found;
}

/** Directories below the working directory that never hold a run: skipped by {@link stateFilesNear}. */
const NOT_SEARCHED = new Set(["node_modules"]);

function isStateFile(file: string): boolean {
  try {
    return statSync(file).isFile();
  } catch {
    return false;
  }
}

/**
 * The state files a command run in `dir` without `--state` or `--deployment` could mean, from
 * the first of these places that holds any:
 *
 * 1. `dir/.gym/run.json`: the run started from here;
 * 2. `dir/<sub>/.gym/run.json` for each directory just below `dir` (hidden directories and
 *    `node_modules` skipped): a run started from here as `gym serve <sub>/deployment.yaml`;
 * 3. the nearest `.gym/run.json` above `dir`, up to the filesystem root, the way git finds `.git`:
 *    a command run anywhere inside the run's directory finds that run.
 *
 * Empty when there is none; more than one only from place 2, which is ambiguous (sorted).
 */
export function stateFilesNear(dir: string): string[] {
  const start = path.resolve(dir);
  const own = path.join(start, STATE_DIR_NAME, STATE_FILE_NAME);
  if (isStateFile(own)) return [own];
  let entries: string[] = [];
  try {
    entries = readdirSync(start, { withFileTypes: true })
      .filter(
        (entry) =>
          (entry.isDirectory() || entry.isSymbolicLink()) &&
          !entry.name.startsWith(".") &&
          !NOT_SEARCHED.has(entry.name),
      )
      .map((entry) => entry.name)
      .sort();
  } catch {
    // an unreadable directory has nothing below it to find
  }
  const below = entries
    .map((name) => path.join(start, name, STATE_DIR_NAME, STATE_FILE_NAME))
    .filter(isStateFile);
  if (below.length > 0) return below;
  for (let current = path.dirname(start); ; current = path.dirname(current)) {
    const candidate = path.join(current, STATE_DIR_NAME, STATE_FILE_NAME);
    if (isStateFile(candidate)) return [candidate];
    if (path.dirname(current) === current) return [];
  }
}

/**
 * The state file a command run in `dir` without `--state` or `--deployment` uses
 * ({@link stateFilesNear}), or null when there is none or more than one.
 */
export function findStateFile(dir: string): string | null {
  const found = stateFilesNear(dir);
  return found.length === 1 ? (found[0] as string) : null;
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
