/**
 * What every command acting on a running deployment (`gym ckpt` verbs, `gym top`, `gym collect`)
 * does first: find the run's state file, read it, and say which of its servers are gone.
 *
 * @see docs/deployment.md
 */
import { existsSync } from "node:fs";
import { hostname } from "node:os";
import path from "node:path";
import { DeploymentFileError } from "../deployment/errors.js";
import { loadDeploymentFile } from "../deployment/load.js";
import { resolveDeployment } from "../deployment/resolve.js";
import { deadServerLines, deadServers, restartHint } from "./dead-servers.js";
import { CliError, commandOf, shownPath, type Io } from "./output.js";
import { isProcessAlive } from "./processes.js";
import {
  chooseStateFile,
  nodeStateFiles,
  readState,
  requireState,
  runStateFile,
  searchesNearby,
} from "./state-file.js";
import { STATE_DIR_NAME } from "./state-io.js";
import type { RunState, StateServer } from "./state-schema.js";

/** A running deployment as its state file describes it. */
export interface OpenedRun {
  /** The state file (absolute). */
  readonly stateFile: string;
  readonly state: RunState;
  /** Servers the state lists whose process is gone. */
  readonly dead: readonly StateServer[];
  /** What to do about {@link dead}, or null when every server runs. */
  readonly restartHint: string | null;
}

/**
 * Finds and reads the run's state file ({@link runStateFile}); a missing one is a `CliError`
 * listing where it was looked for, and two runs just below the working directory a `UsageError`
 * naming both. Says which state file is used when it is not the working directory's own
 * ({@link noteFoundElsewhere}), and names each server whose process is gone with its pid and log.
 */
export function openRun(
  options: { readonly state?: string | undefined; readonly deployment?: string | undefined },
  io: Io,
): OpenedRun {
  const gym = commandOf(io);
  const nodeRun = openNodeRun(options, io);
  if (nodeRun !== null) return nodeRun;
  const stateFile = runStateFile({ ...options, cwd: io.cwd, command: gym });
  const searched = searchesNearby(options);
  const state = requireState(stateFile, gym, searched ? io.cwd : undefined);
  if (searched) noteFoundElsewhere(stateFile, io);
  const dead = deadServers(state);
  for (const line of deadServerLines(dead, io)) io.err(line);
  return {
    stateFile,
    state,
    dead,
    restartHint: dead.length === 0 ? null : restartHint(dead, state, stateFile, io, gym),
  };
}

/**
 * Says on stderr which state file a command uses when the search found it below or above the
 * working directory rather than in it: the command then acts on a run whose files live
 * elsewhere, which should not be a surprise.
 */
export function noteFoundElsewhere(stateFile: string, io: Io): void {
  if (path.dirname(stateFile) !== path.join(path.resolve(io.cwd), STATE_DIR_NAME)) {
    io.err(`gym: using the run in ${shownPath(io, stateFile)}`);
  }
}

/**
 * A deployment with `nodes:` seen from any machine: the URLs come from the deployment file itself
 * (every server has its node's host and a fixed port, so nothing else is needed to reach it),
 * and the servers each node started from its own state file (`.gym/nodes/<node>/run.json`, on the
 * shared run directory) where there is one. A server whose process is gone on this machine is
 * left out, not reported: after a requeue its node's state file is rewritten when it starts
 * again, and `--wait-ready` waits on the servers' health, not on these files. Null when the
 * options name no deployment file, or one without nodes (then the run has one state file).
 */
export function openNodeRun(
  options: { readonly state?: string | undefined; readonly deployment?: string | undefined },
  io: Io,
): OpenedRun | null {
  if (options.state !== undefined || options.deployment === undefined) return null;
  const file = path.resolve(io.cwd, options.deployment);
  // A missing file is named by the usual lookup (runStateFile), as such.
  if (!existsSync(file)) return null;
  // A deployment on one machine keeps its single state file, also when it declares one node.
  if (readState(chooseStateFile({ deployment: file, cwd: io.cwd })) !== null) return null;
  let loaded;
  try {
    loaded = loadDeploymentFile(file, { env: io.env, cwd: io.cwd, checkEntrypoints: false });
  } catch (error) {
    if (error instanceof DeploymentFileError) {
      throw new CliError(
        error.message,
        "fix the deployment file, or pass the run's state file with --state FILE",
      );
    }
    throw error;
  }
  if (loaded.nodes === null) return null;
  const here = hostname();
  const servers: Record<string, StateServer> = {};
  let resolvedFile = "";
  for (const [node, stateFile] of Object.entries(nodeStateFiles(file))) {
    const state = readState(stateFile);
    if (state === null) continue;
    if (resolvedFile === "") resolvedFile = state.resolved_file;
    for (const entry of Object.values(state.servers)) {
      const server = loaded.servers[entry.name];
      if (server === undefined || server.node !== node) continue;
      const local = entry.hostname === undefined || entry.hostname === here;
      if (local && !isProcessAlive(entry.pid)) continue;
      servers[entry.name] = entry;
    }
  }
  const state: RunState = {
    version: 1,
    deployment_file: loaded.file,
    resolved_file: resolvedFile,
    deployment: resolveDeployment(loaded, {}),
    servers,
  };
  return {
    stateFile: chooseStateFile({ deployment: file, cwd: io.cwd }),
    state,
    dead: [],
    restartHint: null,
  };
}
