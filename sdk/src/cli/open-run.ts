/**
 * What every command acting on a running deployment (`gym ckpt` verbs, `gym top`, `gym collect`)
 * does first: find the run's state file, read it, and say which of its servers are gone.
 *
 * @see docs/deployment.md
 */
import path from "node:path";
import { deadServerLines, deadServers, restartHint } from "./dead-servers.js";
import { commandOf, shownPath, type Io } from "./output.js";
import { requireState, runStateFile, searchesUpward } from "./state-file.js";
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
 * Finds and reads the run's state file ({@link runStateFile}); a missing one is a `CliError`.
 * Says which state file is used when it was found above the working directory
 * ({@link noteFoundAbove}), and names each server whose process is gone with its pid and log.
 */
export function openRun(
  options: { readonly state?: string | undefined; readonly deployment?: string | undefined },
  io: Io,
): OpenedRun {
  const gym = commandOf(io);
  const stateFile = runStateFile({ ...options, cwd: io.cwd, command: gym });
  const upward = searchesUpward(options);
  const state = requireState(stateFile, gym, upward ? io.cwd : undefined);
  if (upward) noteFoundAbove(stateFile, io);
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
 * Says on stderr which state file a command uses when the upward search found it above the
 * working directory: the command then acts on a run started elsewhere, which should not be a
 * surprise.
 */
export function noteFoundAbove(stateFile: string, io: Io): void {
  if (path.dirname(stateFile) !== path.join(path.resolve(io.cwd), STATE_DIR_NAME)) {
    io.err(`gym: using the run in ${shownPath(io, stateFile)}`);
  }
}
