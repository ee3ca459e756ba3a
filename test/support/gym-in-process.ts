/**
 * Runs the `gym` command in this process (through `runCli`, no child process) and writes the
 * run state file the commands that act on a running deployment read, for CLI tests.
 */
import path from "node:path";
import type { Io } from "#sdk/cli/output.js";
import { runCli } from "#sdk/cli/program.js";
import { writeState, type RunState } from "#sdk/cli/state-file.js";
import type { ResolvedDeployment } from "#sdk/wire/deployment.js";

/** What one `gym` invocation printed, and its exit status. */
export interface GymOutcome {
  readonly code: number;
  readonly out: string;
  readonly err: string;
}

/** Where and how `gym` is invoked. */
export interface GymInvocation {
  /** The working directory the command sees. */
  readonly cwd: string;
  /** How the user invoked it (`npx gym`, …); without it, a bare `gym`. */
  readonly command?: string | undefined;
  readonly env?: Record<string, string | undefined>;
}

/** Runs `gym <argv>` in-process and collects what it printed. */
export async function runGym(
  invocation: GymInvocation,
  argv: readonly string[],
): Promise<GymOutcome> {
  let out = "";
  let err = "";
  const io: Io = {
    out: (text) => void (out += `${text}\n`),
    err: (text) => void (err += `${text}\n`),
    cwd: invocation.cwd,
    env: invocation.env ?? {},
    ...(invocation.command === undefined ? {} : { command: invocation.command }),
  };
  const code = await runCli([...argv], io);
  return { code, out, err };
}

/** Where a test run's files live: the state file, and the folder its logs are said to be in. */
export interface RunStateFiles {
  readonly stateFile: string;
  readonly deploymentFile: string;
  readonly resolvedFile: string;
  readonly logDir: string;
}

/**
 * Writes a state file naming every server of `deployment` as running under `pidOf(name)`
 * (this process unless told otherwise), as `gym serve` would after starting them.
 */
export function writeRunState(
  files: RunStateFiles,
  deployment: ResolvedDeployment,
  pidOf: (name: string) => number = () => process.pid,
): void {
  const state: RunState = {
    version: 1,
    deployment_file: files.deploymentFile,
    resolved_file: files.resolvedFile,
    deployment,
    servers: Object.fromEntries(
      Object.entries(deployment.servers).map(([name, server]) => [
        name,
        {
          name,
          kind: server.kind,
          url: server.url,
          pid: pidOf(name),
          pgid: pidOf(name),
          log: path.join(files.logDir, `${name}.log`),
          supervisor_pid: null,
          started_at: new Date().toISOString(),
        },
      ]),
    ),
  };
  writeState(files.stateFile, state);
}
