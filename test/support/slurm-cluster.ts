/**
 * A real Slurm cluster on this one machine, for end-to-end tests: a munge daemon with a fresh
 * key, `slurmctld` on 127.0.0.1 and three `slurmd` (one per node, `slurmd -N NAME`), each node
 * with its own loopback address (127.0.0.2, .3, .4: the whole of 127/8 is loopback on Linux)
 * and its own port. Every path (munge socket and key, spool, state, logs, pid files) is under
 * one temporary directory, every port is chosen free at start, so nothing clashes with a
 * system Slurm or munge. {@link SlurmCluster.stop} (and a process exit hook, for a run that
 * dies) cancels every job, kills every daemon and every process the cluster started, and
 * removes the directory.
 *
 * Needs root (`SlurmUser=root`, munge's key checks) and Debian's `slurm-wlm` and `munge`:
 * {@link slurmUnavailable} says why not, for a test to skip (or fail, when CI requires it).
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createServer } from "node:net";
import { cpus, hostname, tmpdir } from "node:os";
import path from "node:path";

/** The commands the cluster needs. */
const COMMANDS = [
  "munged",
  "slurmctld",
  "slurmd",
  "sbatch",
  "srun",
  "scontrol",
  "sinfo",
  "scancel",
];

/** The environment variable that marks every process the cluster started (for the sweep). */
const MARK = "GYM_TEST_SLURM_CLUSTER";

/** One compute node. */
export interface SlurmNode {
  /** Its name (`gymn1`, ...). */
  readonly name: string;
  /** Its address (`NodeAddr`): where its servers bind. */
  readonly addr: string;
  /** Its slurmd's port. */
  readonly port: number;
}

/** What {@link startSlurmCluster} may change. */
export interface SlurmClusterOptions {
  /** Compute nodes. @default 3 */
  readonly nodes?: number;
  /** `KillWait`: seconds from a job's SIGTERM to its SIGKILL. @default 60 */
  readonly killWaitSeconds?: number;
  /**
   * The credential lifetime (`AuthInfo=cred_expire`), which is also how long a requeued job
   * waits before it may start again. @default 10 (Slurm's own default is 120)
   */
  readonly credExpireSeconds?: number;
  /** Bound on the daemons' start, in ms. @default 60000 */
  readonly startTimeoutMs?: number;
}

/** Why the cluster cannot run here, or `null` when it can. */
export function slurmUnavailable(): string | null {
  if (process.platform !== "linux") return `Slurm tests need Linux (this is ${process.platform})`;
  if (process.getuid?.() !== 0) {
    return "Slurm tests need root (the test cluster runs SlurmUser=root and its own munged)";
  }
  const missing = COMMANDS.filter((command) => !onPath(command));
  if (missing.length > 0) {
    return (
      `Slurm is not installed (missing: ${missing.join(", ")}); install it with ` +
      "`apt-get install slurm-wlm munge`"
    );
  }
  return null;
}

function onPath(command: string): boolean {
  const dirs = (process.env.PATH ?? "").split(":").concat(["/usr/sbin", "/sbin"]);
  return dirs.some((dir) => dir !== "" && existsSync(path.join(dir, command)));
}

/** A port nothing listens on now, on every address (slurmd binds 0.0.0.0). */
async function freePort(taken: Set<number>): Promise<number> {
  for (;;) {
    const port = await new Promise<number>((resolve, reject) => {
      const server = createServer();
      server.once("error", reject);
      server.listen(0, "0.0.0.0", () => {
        const address = server.address();
        const chosen = typeof address === "object" && address !== null ? address.port : 0;
        server.close(() => resolve(chosen));
      });
    });
    if (!taken.has(port)) {
      taken.add(port);
      return port;
    }
  }
}

/** `count` distinct ports free now on every address (for servers the test's jobs start). */
export async function freePorts(count: number): Promise<number[]> {
  const taken = new Set<number>();
  const ports: number[] = [];
  for (let index = 0; index < count; index += 1) ports.push(await freePort(taken));
  return ports;
}

/** The result of a Slurm command. */
export interface SlurmCommandResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** A running cluster. */
export class SlurmCluster {
  /** Its temporary directory (removed by {@link stop}). */
  readonly dir: string;
  /** Its slurm.conf. */
  readonly conf: string;
  /** The partition every node is in (the default one). */
  readonly partition = "gym";
  /** Its compute nodes. */
  readonly nodes: readonly SlurmNode[];
  /** The controller's port. */
  readonly controllerPort: number;
  readonly #daemons: { name: string; child: ChildProcess }[] = [];
  #stopped = false;
  readonly #onExit = (): void => this.#sweep("SIGKILL", true);

  /** @internal use {@link startSlurmCluster} */
  constructor(dir: string, nodes: readonly SlurmNode[], controllerPort: number) {
    this.dir = dir;
    this.conf = path.join(dir, "slurm.conf");
    this.nodes = nodes;
    this.controllerPort = controllerPort;
    process.once("exit", this.#onExit);
  }

  /**
   * The environment of a Slurm client (or anything submitted to this cluster): `SLURM_CONF`
   * names this cluster's configuration, and the mark lets {@link stop} find every process.
   */
  env(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
    return { ...process.env, SLURM_CONF: this.conf, [MARK]: this.dir, ...extra };
  }

  /** Runs a Slurm client command (`sbatch`, `scontrol`, ...) to completion. */
  run(
    command: string,
    args: readonly string[],
    options: { cwd?: string; env?: NodeJS.ProcessEnv } = {},
  ): SlurmCommandResult {
    const result = spawnSync(command, [...args], {
      cwd: options.cwd,
      env: this.env(options.env),
      encoding: "utf8",
      timeout: 30_000,
    });
    return { code: result.status, stdout: result.stdout ?? "", stderr: result.stderr ?? "" };
  }

  /** Like {@link run}, but throws (naming the command and its output) unless it exits 0. */
  check(
    command: string,
    args: readonly string[],
    options: { cwd?: string; env?: NodeJS.ProcessEnv } = {},
  ): string {
    const result = this.run(command, args, options);
    if (result.code !== 0) {
      throw new Error(
        `${command} ${args.join(" ")} exited ${String(result.code)}: ${result.stderr}${result.stdout}`,
      );
    }
    return result.stdout;
  }

  /** `scontrol show job ID -o` as a key=value map (`JobState`, `Restarts`, `NodeList`...). */
  job(id: string): Record<string, string> | null {
    const result = this.run("scontrol", ["show", "job", id, "-o"]);
    if (result.code !== 0) return null;
    return parseFields(result.stdout);
  }

  /** `scontrol show node NAME -o` as a key=value map. */
  node(name: string): Record<string, string> {
    return parseFields(this.check("scontrol", ["show", "node", name, "-o"]));
  }

  /** The log files of every daemon, for a failing test's message. */
  logs(): string {
    const dir = path.join(this.dir, "log");
    return readdirSync(dir)
      .map((file) => `--- ${file}\n${tail(readFileSync(path.join(dir, file), "utf8"), 40)}`)
      .join("\n");
  }

  /** @internal starts a daemon in the foreground, tracked for {@link stop}. */
  spawnDaemon(name: string, command: string, args: readonly string[]): ChildProcess {
    const log = path.join(this.dir, "log", `${name}.out`);
    const out = openSync(log, "a");
    const child = spawn(command, [...args], {
      env: this.env(),
      stdio: ["ignore", out, out],
      detached: true,
    });
    this.#daemons.push({ name, child });
    return child;
  }

  /** @internal whether every daemon started so far is still running. */
  deadDaemon(): string | null {
    for (const { name, child } of this.#daemons) {
      if (child.exitCode !== null || child.signalCode !== null) return name;
    }
    return null;
  }

  /**
   * Cancels every job (bounded), kills every daemon and every process the cluster started,
   * and removes the directory. Safe to call more than once.
   */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    process.off("exit", this.#onExit);
    if (this.deadDaemon() !== "slurmctld") {
      this.run("scancel", ["--full", "--quiet", `--partition=${this.partition}`]);
    }
    this.#sweep("SIGTERM", false);
    const end = Date.now() + 5_000;
    while (Date.now() < end && this.#marked().length > 0) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    this.#sweep("SIGKILL", true);
  }

  /** Every live process started by this cluster (its daemons, steps and their children). */
  #marked(): number[] {
    const needle = `${MARK}=${this.dir}\0`;
    const pids: number[] = [];
    for (const entry of readdirSync("/proc")) {
      if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
      try {
        const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
        if (stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z")) continue;
        if (`${readFileSync(`/proc/${entry}/environ`, "utf8")}\0`.includes(needle)) {
          pids.push(Number(entry));
        }
      } catch {
        // exited meanwhile, or not ours to read
      }
    }
    return pids;
  }

  /** Signals the daemons and every marked process; with `remove`, deletes the directory. */
  #sweep(signal: NodeJS.Signals, remove: boolean): void {
    for (const { child } of this.#daemons) {
      if (child.pid !== undefined) signalQuietly(-child.pid, signal);
    }
    for (const pid of this.#marked()) signalQuietly(pid, signal);
    if (remove) rmSync(this.dir, { recursive: true, force: true });
  }
}

function signalQuietly(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // already gone
  }
}

function tail(text: string, lines: number): string {
  return text.split("\n").slice(-lines).join("\n");
}

/** `Key=value Key2=value2 ...` (one `-o` line of scontrol) as a map. */
export function parseFields(line: string): Record<string, string> {
  const fields: Record<string, string> = {};
  for (const match of line.trim().matchAll(/(\S+?)=(\S*)/g)) {
    fields[match[1] ?? ""] = match[2] ?? "";
  }
  return fields;
}

/** Starts munged, slurmctld and the slurmd of every node; resolves once every node is idle. */
export async function startSlurmCluster(options: SlurmClusterOptions = {}): Promise<SlurmCluster> {
  const unavailable = slurmUnavailable();
  if (unavailable !== null) throw new Error(unavailable);
  const dir = mkdtempSync(path.join(tmpdir(), "gym-slurm-"));
  // The test's processes run as root, and munge refuses a key or socket dir others can write.
  chmodSync(dir, 0o755);
  const taken = new Set<number>();
  const controllerPort = await freePort(taken);
  const nodes: SlurmNode[] = [];
  for (let index = 0; index < (options.nodes ?? 3); index += 1) {
    nodes.push({
      name: `gymn${index + 1}`,
      addr: `127.0.0.${index + 2}`,
      port: await freePort(taken),
    });
  }
  const cluster = new SlurmCluster(dir, nodes, controllerPort);
  try {
    for (const sub of ["munge", "run", "state", "spool", "log"]) mkdirSync(path.join(dir, sub));
    chmodSync(path.join(dir, "munge"), 0o700);
    const key = path.join(dir, "munge", "munge.key");
    writeFileSync(key, randomBytes(1024), { mode: 0o400 });
    // munged wants its key private and its socket's directory open to everyone.
    const socket = path.join(dir, "run", "munge.socket");
    writeFileSync(cluster.conf, slurmConf(cluster, socket, options));

    cluster.spawnDaemon("munged", "munged", [
      "--foreground",
      `--socket=${socket}`,
      `--key-file=${key}`,
      `--log-file=${path.join(dir, "log", "munged.log")}`,
      `--pid-file=${path.join(dir, "munge", "munged.pid")}`,
      `--seed-file=${path.join(dir, "munge", "munged.seed")}`,
    ]);
    const timeoutMs = options.startTimeoutMs ?? 60_000;
    await until(() => existsSync(socket), timeoutMs, cluster, "munged's socket");
    cluster.spawnDaemon("slurmctld", "slurmctld", ["-D", "-f", cluster.conf]);
    await until(
      () => cluster.run("scontrol", ["ping"]).stdout.includes("is UP"),
      timeoutMs,
      cluster,
      "slurmctld answering scontrol ping",
    );
    for (const node of nodes) {
      cluster.spawnDaemon(`slurmd-${node.name}`, "slurmd", [
        "-D",
        "-f",
        cluster.conf,
        "-N",
        node.name,
      ]);
    }
    await until(
      () => {
        const states = cluster.run("sinfo", ["-h", "-N", "-o", "%N %T"]).stdout;
        return nodes.every((node) => new RegExp(`^${node.name} idle$`, "m").test(states));
      },
      timeoutMs,
      cluster,
      "every node idle",
    );
    return cluster;
  } catch (error) {
    const logs = existsSync(path.join(dir, "log")) ? cluster.logs() : "";
    await cluster.stop();
    throw new Error(`${(error as Error).message}\n${logs}`, { cause: error });
  }
}

async function until(
  condition: () => boolean,
  timeoutMs: number,
  cluster: SlurmCluster,
  what: string,
): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (condition()) return;
    const dead = cluster.deadDaemon();
    if (dead !== null)
      throw new Error(`the test cluster's ${dead} exited while waiting for ${what}`);
    if (Date.now() >= end) throw new Error(`the test cluster: no ${what} after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

function slurmConf(cluster: SlurmCluster, socket: string, options: SlurmClusterOptions): string {
  const host = hostname().split(".")[0] ?? "localhost";
  const dir = cluster.dir;
  // More than the machine has would drain the node ("Low socket*core*thread count").
  const cpuCount = Math.max(1, cpus().length);
  return [
    "ClusterName=gymtest",
    `SlurmctldHost=${host}(127.0.0.1)`,
    `SlurmctldPort=${cluster.controllerPort}`,
    `AuthType=auth/munge`,
    `CredType=cred/munge`,
    `AuthInfo=socket=${socket},cred_expire=${options.credExpireSeconds ?? 10}`,
    "SlurmUser=root",
    "SlurmdUser=root",
    `StateSaveLocation=${path.join(dir, "state")}`,
    `SlurmdSpoolDir=${path.join(dir, "spool", "%n")}`,
    `SlurmctldPidFile=${path.join(dir, "slurmctld.pid")}`,
    `SlurmdPidFile=${path.join(dir, "slurmd-%n.pid")}`,
    `SlurmctldLogFile=${path.join(dir, "log", "slurmctld.log")}`,
    `SlurmdLogFile=${path.join(dir, "log", "slurmd-%n.log")}`,
    "ProctrackType=proctrack/linuxproc",
    "TaskPlugin=task/none",
    "SelectType=select/cons_tres",
    "SelectTypeParameters=CR_CPU",
    "JobRequeue=1",
    "ReturnToService=2",
    `KillWait=${options.killWaitSeconds ?? 60}`,
    "MpiDefault=none",
    "AccountingStorageType=accounting_storage/none",
    "JobCompType=jobcomp/none",
    "JobAcctGatherType=jobacct_gather/none",
    "SchedulerType=sched/backfill",
    // Start a requeued job as soon as it is eligible, not at the next minute's pass.
    "SchedulerParameters=sched_interval=1,bf_interval=1",
    "SlurmctldDebug=info",
    "SlurmdDebug=info",
    ...cluster.nodes.map(
      (node) =>
        `NodeName=${node.name} NodeHostname=${host} NodeAddr=${node.addr} Port=${node.port} ` +
        `CPUs=${cpuCount} State=UNKNOWN`,
    ),
    `PartitionName=${cluster.partition} Nodes=${cluster.nodes.map((node) => node.name).join(",")} ` +
      "Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES",
    "",
  ].join("\n");
}
