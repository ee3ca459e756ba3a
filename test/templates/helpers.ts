/**
 * Running the built scaffolder and the commands of a generated project in child processes, with
 * an environment scrubbed of what the test runner's own npm and coding agent set.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = fileURLToPath(new URL("../../", import.meta.url));
/** The scaffolder's bin, as `npx create-gym-participant` runs it. */
export const BIN = path.join(REPO, "templates", "bin", "create-gym-participant.js");

/** Fails with what to do when the packages were not built (generated projects import sdk/dist). */
export function requireBuilt(): void {
  const built = [
    path.join(REPO, "templates", "dist", "index.js"),
    path.join(REPO, "sdk", "dist", "testing", "index.js"),
  ];
  for (const file of built) {
    if (!existsSync(file)) throw new Error(`${file} is missing: run \`npm run build\` first`);
  }
}

/** The environment of child processes: no npm_* or coding-agent variables leak in. */
export function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (/^(npm_|AI_AGENT$|CLAUDECODE$|CURSOR_AGENT$|GEMINI_CLI$|CODEX_SANDBOX$|VITEST)/.test(key)) {
      continue;
    }
    env[key] = value;
  }
  return { ...env, NO_COLOR: "1", ...extra };
}

/** What a finished command printed and how it exited. */
export interface Finished {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs a command to completion in `cwd` (killed after `timeoutMs`), standard input closed. */
export function exec(
  command: string,
  args: readonly string[],
  options: { cwd: string; timeoutMs: number; env?: NodeJS.ProcessEnv },
): Promise<Finished> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, [...args], {
      cwd: options.cwd,
      env: options.env ?? cleanEnv(),
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
    const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs);
    child.once("error", reject);
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** A command's output for an assertion message. */
export function shown(finished: Finished): string {
  return `exit ${finished.code}\n--- stdout\n${finished.stdout}\n--- stderr\n${finished.stderr}`;
}
