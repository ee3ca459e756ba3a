/**
 * Servers a run's state file lists whose process is gone: they crashed, or something outside
 * gym killed them (`kill -9`, the OOM killer). Their supervisor only logs the exit, so the
 * commands that read the state file name them, with their pid, log and how to restart them;
 * otherwise all a user sees is a server that "cannot be reached".
 *
 * @see docs/deployment.md
 */
import { hostname } from "node:os";
import { shownPath, type Io } from "./output.js";
import { isProcessAlive } from "./processes.js";
import { chooseStateFile, findStateFile } from "./state-io.js";
import type { RunState, StateServer } from "./state-schema.js";

/**
 * The servers of `state` whose process no longer runs, in the state file's order. A server
 * started on another machine (its `hostname`) is not judged by its pid here.
 */
export function deadServers(state: RunState): StateServer[] {
  const here = hostname();
  return Object.values(state.servers).filter(
    (entry) => (entry.hostname ?? here) === here && !isProcessAlive(entry.pid),
  );
}

/** One line per dead server for stderr: its name, pid and log. */
export function deadServerLines(dead: readonly StateServer[], io: Io): string[] {
  return dead.map(
    (entry) =>
      `gym: server ${entry.name} (pid ${entry.pid}) is not running: its process is gone, though ` +
      `the run lists it (it crashed or was killed outside gym; its log: ${shownPath(io, entry.log)})`,
  );
}

/**
 * What to do about dead servers, as commands that work from the user's directory: restart them
 * into the same run with `serve --only`, or stop the run. `--state` is added only where the
 * command would not find this run's state file on its own.
 */
export function restartHint(
  dead: readonly StateServer[],
  state: RunState,
  stateFile: string,
  io: Io,
  gym: string,
): string {
  const shownState = ` --state ${shownPath(io, stateFile)}`;
  const serveState =
    chooseStateFile({ deployment: state.deployment_file, cwd: io.cwd }) === stateFile
      ? ""
      : shownState;
  const stopState = findStateFile(io.cwd) === stateFile ? "" : shownState;
  const names = dead.map((entry) => entry.name).join(",");
  return (
    `restart ${dead.length === 1 ? "it" : "them"} with ` +
    `\`${gym} serve --only ${names}${serveState} ${shownPath(io, state.deployment_file)}\`, ` +
    `or stop the run with \`${gym} stop${stopState}\``
  );
}
