/**
 * `gym collect` as a child process of the end-to-end suite: started against a {@link CrashRun},
 * signalled (SIGUSR1, SIGTERM, SIGKILL) and waited for; its checkpoint directory and output read
 * back; task files of counter rows written.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { appendFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { COMPILED_CLI, REPO, type Finished } from "../../demo/gym-process.js";
import type { CrashRun } from "./crash-harness.js";
import { until } from "./crash-harness.js";

/** The tool the counter rows offer. */
const INCREMENT = {
  type: "function",
  name: "increment_counter",
  description: "Add count to the counter",
  parameters: {
    type: "object",
    properties: { count: { type: "integer" } },
    required: ["count"],
  },
};

/** A counter row the built-in script finishes with reward 1 (one increment to its target). */
export function counterRow(
  i: number,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    task_id: `counter-${i}`,
    environment: "counter_env",
    task_input: {
      responses_create_params: { input: `Increment the counter once (${i}).`, tools: [INCREMENT] },
      task_data: { initial_count: i % 3, target: (i % 3) + 1 },
    },
    ...extra,
  };
}

/** Writes a JSON Lines task file. */
export function writeTasks(file: string, rows: readonly unknown[]): string {
  writeFileSync(file, rows.map((row) => `${JSON.stringify(row)}\n`).join(""));
  return file;
}

/** One output row, as the suite reads it. */
export interface OutputRow {
  readonly rollout_id: string;
  readonly attempt: number;
  readonly row: number;
  readonly repeat: number;
  readonly status: "finished" | "failed";
  readonly reward: number | null;
  readonly failure: { kind: string; code: string | null; status: number | null } | null;
}

/** A running `gym collect`. */
export class CollectProcess {
  readonly child: ChildProcess;
  readonly exited: Promise<Finished>;
  stderr = "";
  stdout = "";

  constructor(run: CrashRun, args: readonly string[]) {
    this.child = spawn(
      process.execPath,
      [COMPILED_CLI, "collect", ...args, "--state", run.stateFile],
      { cwd: REPO, env: run.env, stdio: ["ignore", "pipe", "pipe"] },
    );
    this.child.stdout?.on("data", (chunk: Buffer) => (this.stdout += chunk.toString("utf8")));
    this.child.stderr?.on("data", (chunk: Buffer) => (this.stderr += chunk.toString("utf8")));
    this.exited = new Promise((resolve, reject) => {
      const timer = setTimeout(() => this.child.kill("SIGKILL"), 180_000);
      this.child.once("error", reject);
      this.child.once("close", (code, signal) => {
        clearTimeout(timer);
        resolve({ code, signal, stdout: this.stdout, stderr: this.stderr });
      });
    });
  }

  /** Sends a signal. */
  signal(signal: NodeJS.Signals): void {
    this.child.kill(signal);
  }

  /** Waits for a line of its stderr matching `pattern`. */
  async waitForStderr(pattern: RegExp, timeoutMs = 60_000): Promise<void> {
    try {
      await until(`gym collect to print ${pattern}`, () => pattern.test(this.stderr), timeoutMs);
    } catch (error) {
      // What it printed instead is what explains the failure.
      const tail = this.stderr.split("\n").slice(-40).join("\n");
      throw new Error(`${(error as Error).message}; its stderr ended with:\n${tail}`);
    }
  }
}

/** Runs `gym collect` to its end. */
export async function collectToEnd(run: CrashRun, args: readonly string[]): Promise<Finished> {
  return await new CollectProcess(run, args).exited;
}

/** The files of a collection's checkpoint directory. */
export class CollectDir {
  constructor(readonly dir: string) {}

  get output(): string {
    return path.join(this.dir, "rollouts.jsonl");
  }

  /** The rows written so far. */
  rows(): OutputRow[] {
    if (!existsSync(this.output)) return [];
    return readFileSync(this.output, "utf8")
      .split("\n")
      .filter((line) => line.trim() !== "")
      .map((line) => JSON.parse(line) as OutputRow);
  }

  /** The checkpoint `LATEST` names, or null. */
  latest(): string | null {
    const file = path.join(this.dir, "LATEST");
    return existsSync(file) ? readFileSync(file, "utf8").trim() : null;
  }

  /** The manifest of the checkpoint `LATEST` names. */
  manifest(): {
    checkpoint_id: string;
    continued: { rollout_id: string; attempt: number }[];
    restarted: { rollout_id: string; attempt: number }[];
  } {
    const id = this.latest();
    if (id === null) throw new Error(`${this.dir} has no LATEST`);
    return JSON.parse(
      readFileSync(path.join(this.dir, "checkpoints", id, "collection.json"), "utf8"),
    ) as ReturnType<CollectDir["manifest"]>;
  }

  /** The dispatch log's entries. */
  dispatched(): { rollout_id: string; attempt: number }[] {
    return readFileSync(path.join(this.dir, "dispatch.log"), "utf8")
      .split("\n")
      .filter((line) => line.trim() !== "")
      .map((line) => JSON.parse(line) as { rollout_id: string; attempt: number });
  }

  /** Appends bytes to the dispatch log as a write torn by a crash would leave them. */
  tearDispatchLog(bytes: string): void {
    appendFileSync(path.join(this.dir, "dispatch.log"), bytes);
  }
}

/** The rollout ID of a capture key (`<id>` or `<id>-a<N>`). */
export function baseRollout(key: string): string {
  return key.replace(/-a\d+$/, "");
}
