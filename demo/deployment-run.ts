/**
 * One run of the reference deployment in real processes: start it with `gym serve`, crash it
 * with `gym stop --kill`, start it again; reach its servers; drive the fake backend's controls.
 * The demo and the end-to-end suite both build on it.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { REPO, gym } from "./gym-process.js";
import { serverProcesses } from "./process-tree.js";
import { ServerClient } from "gym-participant-sdk";
import {
  discover,
  type Participants,
  type ResolvedDeployment,
} from "gym-participant-sdk/controller";

const REFERENCE = path.join(REPO, "reference-servers");

/** The control token the reference deployment uses unless GYM_CONTROL_TOKEN says otherwise. */
export const CONTROL_TOKEN = "demo-token";

/** How a {@link DeploymentRun} varies the reference deployment. */
export interface DeploymentRunOptions {
  /** A YAML file under reference-servers/ (entrypoints relative to it) instead of `deployment.yaml`. */
  readonly variant?: string;
  /**
   * The built CLI and the reference servers' `dist/` entrypoints, started by plain Node
   * (faster; needs `npm run build`). Only for variants made of reference servers.
   */
  readonly compiled?: boolean;
  /** `num_workers` of every participant server (the inference backend stays one process); built. */
  readonly workers?: number;
}

/** The reference deployment, copied into a run directory with absolute entrypoints. */
export class DeploymentRun {
  readonly deploymentFile: string;
  readonly stateFile: string;
  readonly env: NodeJS.ProcessEnv;
  /** Run the built CLI and servers (see {@link CommandOptions.compiled}). */
  protected compiled = false;
  /** Extra `gym serve` flags (e.g. a longer `--health-timeout` for many processes). */
  protected serveFlags: string[] = [];
  #deployment: ResolvedDeployment | null = null;
  #client: ServerClient | null = null;
  #rollouts: ServerClient | null = null;

  constructor(
    /** Where state, logs, the capture ledger, the token store and checkpoints live. */
    readonly dir: string,
    /** Extra environment for the deployment file's `${VAR}` references (and the servers). */
    env: NodeJS.ProcessEnv = {},
    options: DeploymentRunOptions = {},
  ) {
    mkdirSync(dir, { recursive: true });
    let text = readFileSync(
      path.join(REFERENCE, options.variant ?? "deployment.yaml"),
      "utf8",
    ).replaceAll("entrypoint: ", `entrypoint: ${REFERENCE}/`);
    const workers = options.workers ?? 1;
    if (workers > 1) {
      // Three processes per server start at once: the built CLI and servers start in about half
      // the time (no TypeScript loader in each process), and a loaded machine gets longer to see
      // every worker healthy.
      this.serveFlags = ["--health-timeout", "120s"];
      text = text.replace(
        /^( +)kind: (environment|agent|resources|model)$/gm,
        `$1kind: $2\n$1num_workers: ${workers}`,
      );
    }
    if (options.compiled === true || workers > 1) {
      this.compiled = true;
      text = text.replace(/\/src\/index\.ts$/gm, "/dist/index.js");
    }
    this.deploymentFile = path.join(dir, "deployment.yaml");
    writeFileSync(this.deploymentFile, text);
    this.stateFile = path.join(dir, "run.json");
    this.env = {
      ...process.env,
      GYM_RUN_DIR: dir,
      GYM_CONTROL_TOKEN: process.env.GYM_CONTROL_TOKEN ?? CONTROL_TOKEN,
      LOG_LEVEL: process.env.LOG_LEVEL ?? "warn",
      ...env,
    };
  }

  /** The control token of the run. */
  get token(): string {
    return this.env.GYM_CONTROL_TOKEN as string;
  }

  /** The servers a crash kills: every one but the inference backend, which outlives Gym. */
  gymServers(): string[] {
    const servers = this.#deployment?.servers ?? {};
    return Object.keys(servers).filter((name) => servers[name]?.kind !== "backend");
  }

  /**
   * Starts the servers (fresh processes) and waits until each is healthy: all of them, or
   * after a crash only the Gym servers (the backend is still running).
   */
  async serve(options: { readonly afterCrash?: boolean } = {}): Promise<void> {
    const only = options.afterCrash === true ? ["--only", this.gymServers().join(",")] : [];
    const served = await gym(
      [
        "serve",
        this.deploymentFile,
        "--detach",
        "--state",
        this.stateFile,
        ...only,
        ...this.serveFlags,
      ],
      { env: this.env, timeoutMs: 120_000, compiled: this.compiled },
    );
    if (served.code !== 0) throw new Error(`gym serve failed:\n${served.stderr}${served.stdout}`);
    const state = JSON.parse(readFileSync(this.stateFile, "utf8")) as {
      deployment: ResolvedDeployment;
    };
    this.#deployment = state.deployment;
    await this.#client?.close();
    this.#client = new ServerClient(this.#deployment, { dataConnectionsPerServer: 256 });
    await this.#rollouts?.close();
    // Every rollout holds its own connection while in flight: no cap on connections, and the
    // SDK's connect bound for bursts (thousands of connects overflow a listen queue, and the
    // kernel's SYN retries alone outlast a 10 s bound).
    this.#rollouts = new ServerClient(this.#deployment);
  }

  /**
   * The crash stops the Gym servers gracefully instead of killing them (for CPU profiles, which
   * a process writes as it exits).
   */
  gracefulCrash = false;

  /** Kills every Gym server's process group at once: the crash (the backend survives). */
  async crash(): Promise<void> {
    if (this.gracefulCrash) await this.#exitNow();
    const stopped = await gym(
      ["stop", "--kill", "--only", this.gymServers().join(","), "--state", this.stateFile],
      { env: this.env, timeoutMs: 120_000, compiled: this.compiled },
    );
    if (stopped.code !== 0) throw new Error(`gym stop --kill failed:\n${stopped.stderr}`);
    await this.#client?.close();
    this.#client = null;
    // The dead servers' rollouts fail on their own; nothing is left to wait for.
    await this.#rollouts?.destroy();
    this.#rollouts = null;
  }

  /**
   * Makes every Gym server process exit at once through its own exit path (a second stop
   * signal exits without draining), so each writes its CPU profile; waits until all are gone.
   */
  async #exitNow(): Promise<void> {
    const pids = [...serverProcesses(this.serverPids())]
      .filter(([name]) => this.gymServers().includes(name))
      .flatMap(([, tree]) => tree);
    for (const pid of pids) {
      // Two distinct signals are both delivered: the first starts the graceful stop, the
      // second exits.
      for (const signal of ["SIGINT", "SIGTERM"] as const) {
        try {
          process.kill(pid, signal);
        } catch {
          // gone already
        }
      }
    }
    const alive = (pid: number): boolean => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    const deadline = Date.now() + 60_000;
    while (pids.some(alive) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  /** Stops every server gracefully. */
  async stop(): Promise<void> {
    await this.#client?.close();
    this.#client = null;
    await this.#rollouts?.destroy();
    this.#rollouts = null;
    await gym(["stop", "--state", this.stateFile], {
      env: this.env,
      timeoutMs: 120_000,
      compiled: this.compiled,
    });
  }

  /** Each running server's name and the pid `gym serve` started it as (its workers are below it). */
  serverPids(): Map<string, number> {
    const state = JSON.parse(readFileSync(this.stateFile, "utf8")) as {
      servers: Record<string, { pid: number }>;
    };
    return new Map(Object.entries(state.servers).map(([name, server]) => [name, server.pid]));
  }

  /** The client of the running deployment. */
  get client(): ServerClient {
    if (this.#client === null) throw new Error("the deployment is not running");
    return this.#client;
  }

  /** The client rollouts are sent with (`/run`): one connection per rollout in flight. */
  get rolloutClient(): ServerClient {
    if (this.#rollouts === null) throw new Error("the deployment is not running");
    return this.#rollouts;
  }

  /** Where a server listens. */
  url(server: string): string {
    const entry = this.#deployment?.servers[server];
    if (entry === undefined) throw new Error(`no server ${server} is running`);
    return entry.url;
  }

  /** The participants, in prepare order. */
  async participants(): Promise<Participants> {
    return await discover(this.client, this.token, { probeTimeoutMs: 10_000 });
  }

  /** Calls a control route of the fake backend. */
  async backend<T = unknown>(method: "GET" | "POST", route: string, body?: unknown): Promise<T> {
    const res = await fetch(`${this.url("inference")}${route}`, {
      method,
      headers: body === undefined ? {} : { "content-type": "application/json" },
      body: body === undefined ? null : JSON.stringify(body),
    });
    if (!res.ok) throw new Error(`${method} ${route}: ${res.status} ${await res.text()}`);
    return (await res.json()) as T;
  }
}
