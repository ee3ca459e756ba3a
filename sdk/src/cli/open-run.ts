/**
 * What every command acting on a running deployment (`gym ckpt` verbs, `gym top`, `gym collect`)
 * does first: find the run's state file, read it, and say which of its servers are gone.
 *
 * @see docs/deployment.md
 */
import path from "node:path";
import { deadServerLines, deadServers, restartHint } from "./dead-servers.js";
import { commandOf, shownPath, type Io } from "./output.js";
import { requireState, runStateFile, searchesNearby } from "./state-file.js";
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
