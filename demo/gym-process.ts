/**
 * Running the real `gym` command (from source, under tsx) as a child process and waiting for
 * it: shared by the demo, the scale benchmark and the end-to-end suite.
 */
import { spawn } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** The repository root. */
export const REPO = fileURLToPath(new URL("../", import.meta.url));
/** The `gym` command's source entry point. */
export const CLI = path.join(REPO, "sdk", "src", "cli", "main.ts");

/** What a finished command printed and how it exited. */
export interface Finished {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Options of {@link runCommand} and {@link gym}. */
export interface CommandOptions {
  /** The child's environment. @default process.env */
  readonly env?: NodeJS.ProcessEnv;
  /** Killed (SIGKILL) after this many ms. @default 60000 */
  readonly timeoutMs?: number;
  /**
   * Run the built CLI (`sdk/dist`, plain Node) instead of the source under tsx: servers then
   * start without compiling TypeScript (about half the start-up time). Needs `npm run build`.
   * @default false
   */
  readonly compiled?: boolean;
}

/** Runs `command` in the repository root to completion, collecting its output. */
export function runCommand(
  command: string,
  args: readonly string[],
  options: CommandOptions = {},
): Promise<Finished> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, [...args], {
      cwd: REPO,
      env: options.env ?? process.env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
    const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 60_000);
    child.once("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.once("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/** The built CLI (`npm run build`). */
export const COMPILED_CLI = path.join(REPO, "sdk", "dist", "cli", "main.js");

/** Runs `gym <args>` to completion: from source, or built when `options.compiled`. */
export function gym(args: readonly string[], options: CommandOptions = {}): Promise<Finished> {
  const command = options.compiled === true ? [COMPILED_CLI] : ["--import", "tsx", CLI];
  return runCommand(process.execPath, [...command, ...args], options);
}
