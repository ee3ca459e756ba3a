/**
 * `--launch "<command>"`: the kit starts the server under test itself, so it can kill it and
 * start it again (the crash scenarios). The command runs through the shell in its own process
 * group; a kill ends the whole group at once (SIGKILL, a crash, not a shutdown).
 *
 * What the command is told, both as placeholders in the command and as environment variables:
 *
 * | placeholder         | environment variable              | value                              |
 * | ------------------- | --------------------------------- | ---------------------------------- |
 * | `{port}`            | `GYM_CONFORMANCE_PORT`            | the port to listen on (127.0.0.1)  |
 * | `{token}`           | `GYM_CONTROL_TOKEN`               | the control token the kit sends    |
 * | `{checkpoint_root}` | `GYM_CONFORMANCE_CHECKPOINT_ROOT` | where the kit's checkpoints live   |
 *
 * Every start uses the same port, token and root, so a restarted server is the same server to
 * the kit. Readiness is polled on `GET status` (every 100 ms, bounded); a server that exits
 * before it is ready fails at once, with the end of its output.
 *
 * @see docs/conformance.md
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createServer } from "node:net";
import { Target } from "./target.js";

/** How the kit launches the server. */
export interface LaunchOptions {
  /** The shell command, placeholders not yet replaced. */
  readonly command: string;
  readonly token: string;
  readonly checkpointRoot: string;
  /** Bound on each start's readiness, in ms. @default 60_000 */
  readonly readyTimeoutMs?: number;
  /** The directory the command runs in. @default the kit's */
  readonly cwd?: string;
}

/** The launched server did not become ready, or could not be started. */
export class LaunchError extends Error {
  override readonly name = "LaunchError";
}

/** How much of the server's output the kit keeps to show when a start fails, in characters. */
const OUTPUT_TAIL = 4_000;

/** A free port on 127.0.0.1, as the system hands one out. */
export async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      probe.close(() => resolve(port));
    });
  });
}

/** The command with `{port}`, `{token}` and `{checkpoint_root}` replaced. */
export function expandCommand(
  command: string,
  values: { port: number; token: string; checkpointRoot: string },
): string {
  return command
    .replaceAll("{port}", String(values.port))
    .replaceAll("{token}", values.token)
    .replaceAll("{checkpoint_root}", values.checkpointRoot);
}

/** A server the kit started: its URL, and kill and restart. */
export class LaunchedServer {
  readonly url: string;
  readonly #options: LaunchOptions;
  readonly #port: number;
  #child: ChildProcess | null = null;
  #exited: Promise<void> = Promise.resolve();
  #output = "";
  /** How many times the server was started. */
  starts = 0;

  private constructor(options: LaunchOptions, port: number) {
    this.#options = options;
    this.#port = port;
    this.url = `http://127.0.0.1:${port}`;
  }

  /** Starts the command on a free port and waits until its status answers. */
  static async start(options: LaunchOptions): Promise<LaunchedServer> {
    const server = new LaunchedServer(options, await freePort());
    await server.#start();
    return server;
  }

  async #start(): Promise<void> {
    const values = {
      port: this.#port,
      token: this.#options.token,
      checkpointRoot: this.#options.checkpointRoot,
    };
    this.#output = "";
    const child = spawn(expandCommand(this.#options.command, values), {
      shell: true,
      detached: true,
      cwd: this.#options.cwd,
      stdio: ["ignore", "pipe", "pipe"],
      env: {
        ...process.env,
        GYM_CONFORMANCE_PORT: String(values.port),
        GYM_CONTROL_TOKEN: values.token,
        GYM_CONFORMANCE_CHECKPOINT_ROOT: values.checkpointRoot,
      },
    });
    this.#child = child;
    this.starts += 1;
    const keep = (chunk: Buffer): void => {
      this.#output = (this.#output + chunk.toString("utf8")).slice(-OUTPUT_TAIL);
    };
    child.stdout?.on("data", keep);
    child.stderr?.on("data", keep);
    let exitCode: string | null = null;
    this.#exited = new Promise((resolve) => {
      child.once("exit", (code, signal) => {
        exitCode = signal ?? String(code);
        resolve();
      });
      child.once("error", (error) => {
        exitCode = error.message;
        resolve();
      });
    });
    await this.#waitReady(() => exitCode);
  }

  async #waitReady(exited: () => string | null): Promise<void> {
    const bound = this.#options.readyTimeoutMs ?? 60_000;
    const until = Date.now() + bound;
    const target = new Target(this.url, this.#options.token);
    try {
      for (;;) {
        const code = exited();
        if (code !== null) {
          throw new LaunchError(
            `the launched server exited (${code}) before it was ready; its output ended:\n${this.#output}`,
          );
        }
        const reply = await target.status({ timeoutMs: 1_000 }).catch(() => null);
        if (reply !== null) return;
        if (Date.now() >= until) {
          await this.kill();
          throw new LaunchError(
            `the launched server did not answer GET status on ${this.url} within ${bound} ms; its output ended:\n${this.#output}`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    } finally {
      await target.close();
    }
  }

  /** Kills the server's whole process group (a crash) and waits until it is gone. */
  async kill(): Promise<void> {
    const child = this.#child;
    if (child === null) return;
    this.#child = null;
    if (child.exitCode === null && child.signalCode === null && child.pid !== undefined) {
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {
        child.kill("SIGKILL");
      }
    }
    await this.#exited;
  }

  /** Kills the server and starts it again on the same port; resolves once it answers. */
  async restart(): Promise<void> {
    await this.kill();
    await this.#start();
  }
}
