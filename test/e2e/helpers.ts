/**
 * Running the real `gym` command in child processes, and cleaning up every process a test
 * started: by the state file's process groups and supervisors, and by scanning for any process
 * whose command line mentions the test's temporary directory.
 */
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { REPO } from "../../demo/gym-process.js";

export { CLI, REPO, gym, type Finished } from "../../demo/gym-process.js";
export const FIXTURES = path.join(REPO, "test", "fixtures");

/** Writes a fixture deployment into `dir` with its entrypoints made absolute. */
export function writeDeployment(dir: string, fixture: string, name = "deployment.yaml"): string {
  const text = readFileSync(path.join(FIXTURES, "deployments", fixture), "utf8").replaceAll(
    "../servers/",
    `${path.join(FIXTURES, "servers")}/`,
  );
  const file = path.join(dir, name);
  writeFileSync(file, text);
  return file;
}

/** Whether `process.kill(pid, 0)` says the process no longer exists (ESRCH). */
export function isGone(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return false;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "ESRCH";
  }
}

/** Polls until `condition` holds or `timeoutMs` passes; returns whether it held. */
export async function waitFor(
  condition: () => boolean | Promise<boolean>,
  timeoutMs: number,
): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await condition()) return true;
    if (Date.now() >= end) return false;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Live (non-zombie) processes whose command line contains `text`. */
export function processesMentioning(text: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8").replaceAll("\0", " ");
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const state = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
      if (cmdline.includes(text) && state !== "Z") pids.push(Number(entry));
    } catch {
      // exited meanwhile
    }
  }
  return pids;
}

/** The state file's servers, or none. */
export function stateServers(stateFile: string): {
  name: string;
  pid: number;
  pgid: number;
  supervisor_pid: number | null;
  url: string;
  kind: string;
  log: string;
}[] {
  try {
    const state = JSON.parse(readFileSync(stateFile, "utf8")) as {
      servers: Record<
        string,
        {
          name: string;
          pid: number;
          pgid: number;
          supervisor_pid: number | null;
          url: string;
          kind: string;
          log: string;
        }
      >;
    };
    return Object.values(state.servers);
  } catch {
    return [];
  }
}

function kill(target: number): void {
  try {
    process.kill(target, "SIGKILL");
  } catch {
    // already gone
  }
}

/** SIGKILLs everything a test under `dir` may have left running. */
export async function killEverything(
  dir: string,
  stateFiles: readonly string[] = [],
): Promise<void> {
  for (const file of stateFiles) {
    for (const server of stateServers(file)) {
      kill(-server.pgid);
      if (server.supervisor_pid !== null) kill(server.supervisor_pid);
    }
  }
  for (const pid of processesMentioning(dir)) {
    kill(-pid);
    kill(pid);
  }
  await waitFor(() => processesMentioning(dir).length === 0, 5_000);
}
