/**
 * The supervisor: the process that starts the servers of a run and stays their parent for their
 * whole life. In the foreground it is `gym serve` itself; with `--detach` it is the small
 * background process `supervisor-process` that `gym serve` leaves behind. It waits for every
 * server's `GET /health`, writes the state file, reaps the servers when they exit (so no zombie
 * outlives them, whatever the system's init does), stops them on request, and ends when the
 * last of them has exited.
 *
 * It loads nothing heavy (no zod, no YAML), so a detached start costs little more than the
 * servers' own start.
 *
 * @see docs/deployment.md
 */
import { prettyFactory } from "pino-pretty";
import { spawn, type ChildProcess } from "node:child_process";
import {
  closeSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  statSync,
  writeSync,
} from "node:fs";
import { open } from "node:fs/promises";
import { hostname } from "node:os";
import path from "node:path";
import { deploymentFetch, type DeploymentFetch } from "../client/tls.js";
import { deferred } from "../util/deferred.js";
import type { ResolvedDeployment, ServerKind } from "../wire/deployment.js";
import { FAILED_LOG_LINES } from "./defaults.js";
import { formatDuration } from "./duration.js";
import { cliModule, isTypeScript, nodeCommand } from "./node-command.js";
import { asCliError, commandOf, describeError, type Io } from "./output.js";
import { delay, settlesWithin, signalGroup, stopGroups, type GroupStop } from "./processes.js";
import { TERM_GRACE_ENV } from "./term-grace.js";
import type { RunState, StateServer } from "./state-schema.js";
import { removeFromState, writeStateFile } from "./state-io.js";
import { serverEnv, takeSupervisorSecrets, type SessionSecrets } from "./session-secrets.js";

/** One server the supervisor starts. */
export interface PlannedServer {
  readonly name: string;
  readonly kind: ServerKind;
  /** The module to import (absolute). */
  readonly entrypoint: string;
  readonly url: string;
  /** The working directory of the server process (the deployment file's directory). */
  readonly cwd: string;
  /** Extra Node.js flags of the server's process (the deployment's `node_args`). */
  readonly node_args?: readonly string[];
  /** Its node, in a deployment with `nodes:`. */
  readonly node?: string | null;
}

/** What the supervisor starts: everything decided before any process exists. */
export interface ServePlan {
  readonly deployment_file: string;
  readonly state_file: string;
  readonly resolved_file: string;
  readonly logs_dir: string;
  /** How `gym serve` was invoked (`npx gym`, …): the detached supervisor's advice uses it too. */
  readonly command: string;
  readonly deployment: ResolvedDeployment;
  readonly health_timeout_ms: number;
  readonly grace_ms: number;
  /**
   * `gym serve --term-grace`: on SIGTERM the servers keep serving until a checkpoint commits
   * (participants) or this long passes, so that a controller told to stop by the same signal
   * (a Slurm requeue, a pod eviction) can checkpoint them first. 0 or absent: stop at once.
   */
  readonly term_grace_ms?: number;
  /** Stream every log to the supervisor's output, prefixed by the server's name. */
  readonly stream_logs: boolean;
  readonly servers: readonly PlannedServer[];
  /** Servers already running (with `--only`), kept in the state file. */
  readonly keep: Readonly<Record<string, StateServer>>;
  /**
   * The configured session secrets of the servers to start, by name. In memory only: the plan
   * file leaves them out ({@link planFileText}); the detached supervisor gets them in its
   * environment, each server only its own.
   */
  readonly session_secrets?: SessionSecrets;
}

/** The plan as the detached supervisor's plan file holds it: without any secret. */
export function planFileText(plan: ServePlan): string {
  const { session_secrets: _secrets, ...written } = plan;
  return `${JSON.stringify(written, null, 2)}\n`;
}

function plural(count: number, word: string): string {
  return `${count} ${word}${count === 1 ? "" : "s"}`;
}

/** How a process ended. */
export interface Exit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly error?: string;
}

interface Child {
  readonly name: string;
  readonly log: string;
  readonly process: ChildProcess;
  readonly pid: number | null;
  readonly exit: Promise<Exit>;
  exited: Exit | null;
  readonly logStart: number;
}

export function describeExit(exit: Exit): string {
  if (exit.error !== undefined) return `could not be started: ${exit.error}`;
  if (exit.signal !== null) return `was killed by ${exit.signal}`;
  return `exited with code ${exit.code}`;
}

function expectedExit(exit: Exit): boolean {
  return exit.code === 0 || exit.signal === "SIGTERM" || exit.signal === "SIGINT";
}

/**
 * The last `count` lines of a file written at or after byte `from` (none when it cannot be
 * read); reads only its tail. A server's log is appended to across runs: `from` is where this
 * run's part starts, so lines of earlier runs are never shown as this one's.
 */
export function lastLines(file: string, count: number, from = 0): string[] {
  let text: string;
  try {
    const size = statSync(file).size;
    const start = Math.max(0, from, size - 64 * 1024);
    const buffer = Buffer.alloc(size - start);
    const fd = openSync(file, "r");
    try {
      let read = 0;
      while (read < buffer.length) {
        const n = readSync(fd, buffer, read, buffer.length - read, start + read);
        if (n === 0) break;
        read += n;
      }
      text = buffer.subarray(0, read).toString("utf8");
    } finally {
      closeSync(fd);
    }
  } catch {
    return [];
  }
  const lines = text.split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  return lines.slice(-count);
}

function startChild(plan: ServePlan, server: PlannedServer): Child {
  const log = path.join(plan.logs_dir, `${server.name}.log`);
  const fd = openSync(log, "a", 0o600);
  writeSync(fd, `=== gym serve: starting ${server.name} at ${new Date().toISOString()} ===\n`);
  const logStart = statSync(log).size;
  const exit = deferred<Exit>();
  let child: ChildProcess;
  try {
    const { command, args } = nodeCommand(
      cliModule("server-process"),
      [
        "--deployment",
        plan.resolved_file,
        "--name",
        server.name,
        "--entrypoint",
        server.entrypoint,
      ],
      { typescript: isTypeScript(server.entrypoint), fromDir: server.cwd },
    );
    // Node's own flags go before everything (the loader and the script).
    child = spawn(command, [...(server.node_args ?? []), ...args], {
      cwd: server.cwd,
      detached: true,
      stdio: ["ignore", fd, fd],
      env: withTermGrace(
        serverEnv(process.env, plan.session_secrets?.[server.name]),
        plan.term_grace_ms ?? 0,
      ),
    });
  } finally {
    closeSync(fd);
  }
  const record: Child = {
    name: server.name,
    log,
    process: child,
    pid: child.pid ?? null,
    exit: exit.promise,
    exited: null,
    logStart,
  };
  child.once("error", (error) => {
    if (record.exited !== null) return;
    record.exited = { code: null, signal: null, error: error.message };
    exit.resolve(record.exited);
  });
  child.once("exit", (code, signal) => {
    if (record.exited !== null) return;
    record.exited = { code, signal };
    exit.resolve(record.exited);
  });
  return record;
}

/** Why a server did not come up; `timedOut` when it was still running but never healthy. */
export interface StartFailure {
  readonly reason: string;
  readonly timedOut: boolean;
}

async function waitHealthy(
  child: Child,
  url: string,
  timeoutMs: number,
  cancel: AbortSignal,
  probe: DeploymentFetch,
): Promise<StartFailure | null> {
  const end = Date.now() + timeoutMs;
  const exited = new AbortController();
  void child.exit.then(() => exited.abort());
  for (;;) {
    if (child.exited !== null) {
      return { reason: `${describeExit(child.exited)} during startup`, timedOut: false };
    }
    if (cancel.aborted) return null;
    const left = end - Date.now();
    if (left <= 0) {
      return {
        reason: `did not answer GET ${url}/health within ${formatDuration(timeoutMs)}`,
        timedOut: true,
      };
    }
    try {
      const response = await probe(`${url}/health`, {
        signal: AbortSignal.any([
          AbortSignal.timeout(Math.min(2_000, left)),
          exited.signal,
          cancel,
        ]),
      });
      await response.body?.cancel();
      if (response.ok) return null;
    } catch {
      // not up yet
    }
    await settlesWithin(child.exit, Math.min(100, Math.max(0, end - Date.now())));
  }
}

/** Streams new lines of each log to `out`, prefixed by the server's name. */
/**
 * How a log line is shown: JSON lines through `pino-pretty` on a terminal or with
 * `LOG_FORMAT=pretty` (`LOG_FORMAT=json` keeps them raw); anything else as it is. The log files
 * themselves stay JSON.
 */
function lineFormatter(io: Io): (line: string) => string {
  const format = io.env.LOG_FORMAT?.toLowerCase();
  const pretty = format === "pretty" || (format !== "json" && process.stdout.isTTY === true);
  if (!pretty) return (line) => line;
  const prettify = prettyFactory({
    colorize: process.stdout.isTTY === true,
    ignore: "pid,hostname",
  });
  return (line) => {
    if (!line.startsWith("{")) return line;
    try {
      return prettify(JSON.parse(line) as Record<string, unknown>).replace(/\n$/, "");
    } catch {
      return line;
    }
  };
}

function tailLogs(children: readonly Child[], io: Io): { stop(): Promise<void> } {
  const width = Math.max(...children.map((child) => child.name.length));
  const format = lineFormatter(io);
  const state = children.map((child) => ({ child, offset: child.logStart, partial: "" }));
  let running = true;
  const poll = async (): Promise<void> => {
    for (const entry of state) {
      let handle;
      try {
        handle = await open(entry.child.log, "r");
      } catch {
        continue;
      }
      try {
        for (;;) {
          const buffer = Buffer.alloc(64 * 1024);
          const { bytesRead } = await handle.read(buffer, 0, buffer.length, entry.offset);
          if (bytesRead === 0) break;
          entry.offset += bytesRead;
          const text = entry.partial + buffer.subarray(0, bytesRead).toString("utf8");
          const lines = text.split("\n");
          entry.partial = lines.pop() ?? "";
          for (const line of lines) {
            const prefix = `${entry.child.name.padEnd(width)} | `;
            io.out(
              format(line)
                .split("\n")
                .map((part) => `${prefix}${part}`)
                .join("\n"),
            );
          }
        }
      } finally {
        await handle.close();
      }
    }
  };
  const loop = (async () => {
    while (running) {
      await poll();
      await delay(200);
    }
    await poll();
  })();
  return {
    async stop() {
      running = false;
      await loop;
    },
  };
}

/** One server that did not come up, with this run's last lines of its log. */
export interface FailedServer extends StartFailure {
  readonly name: string;
  readonly log: string;
  readonly lines: readonly string[];
  /** Where it was to listen: names the port when another process took it first. */
  readonly url?: string;
}

/** The port a failed server could not listen on because another process held it, or null. */
function portTaken(server: FailedServer): string | null {
  if (server.timedOut || !server.lines.some((line) => line.includes("EADDRINUSE"))) return null;
  try {
    return server.url === undefined ? "its port" : `port ${new URL(server.url).port}`;
  } catch {
    return "its port";
  }
}

/**
 * What a failed start prints: each failed server's reason and log lines, then what to do. A
 * server that was still running but never answered gets the `--health-timeout` advice too.
 * `gym` is the prefix of the command the advice names.
 */
export function startFailureReport(
  failed: readonly FailedServer[],
  others: number,
  healthTimeoutMs: number,
  gym: string,
): { message: string; hint: string } {
  const parts = failed.map(
    (server) =>
      `server ${server.name} failed to start: it ${server.reason}` +
      (portTaken(server) === null
        ? ""
        : `: ${portTaken(server)} is already in use by another process`) +
      `\n` +
      `last ${server.lines.length} lines of ${server.log}:\n` +
      (server.lines.length === 0
        ? "  (empty)"
        : server.lines.map((line) => `  | ${line}`).join("\n")),
  );
  const message =
    parts.join("\n\n") +
    (others > 0 ? `\n\nstopped the ${plural(others, "other server")} started with it` : "");
  const slow = failed.filter((server) => server.timedOut).map((server) => server.name);
  const busy = failed.filter((server) => portTaken(server) !== null);
  // Another program took the port between the check before the start and the server's bind.
  const fix =
    busy.length > 0
      ? `stop the process holding ${busy.map((server) => `${portTaken(server)} (server ${server.name})`).join(", ")}, ` +
        `or give the server another port in the deployment file (port: 0 picks a free one), then run \`${gym} serve\` again`
      : `fix the server (its log is above) and run \`${gym} serve\` again`;
  if (slow.length === 0) return { message, hint: fix };
  // A server that runs but has not answered may just be slow to start (a cold tsx compile).
  const longer = `--health-timeout ${Math.ceil(Math.max(healthTimeoutMs * 2, 60_000) / 1_000)}s`;
  const hint =
    `if ${slow.join(", ")} ${slow.length === 1 ? "is" : "are"} only slow to start, ` +
    `give ${slow.length === 1 ? "it" : "them"} longer with ${longer}; otherwise ${fix}`;
  return { message, hint };
}

/** What the supervisor reports to whoever started it. */
export interface SuperviseHooks {
  /** Every server answers `GET /health`; the state file is written. */
  onReady(state: RunState): void;
  /** The start failed; every server started was stopped. `hint` says what to do. */
  onFailed(message: string, hint: string | null): void;
  /**
   * Resolves when the supervisor is asked to stop everything it started, with the signal that
   * asked (a term grace drains on SIGTERM only), or nothing when no signal did.
   */
  readonly stopRequested: Promise<NodeJS.Signals | void>;
}

/** A server's environment, telling it how long to keep serving after SIGTERM. */
function withTermGrace(env: NodeJS.ProcessEnv, termGraceMs: number): NodeJS.ProcessEnv {
  if (termGraceMs > 0) env[TERM_GRACE_ENV] = String(termGraceMs);
  else delete env[TERM_GRACE_ENV];
  return env;
}

/**
 * The stop of a run started with a term grace: every server is told SIGTERM (a server that got
 * it from the engine already ignores the repeat), the participants are given the grace to see a
 * checkpoint commit and leave on their own, then what is left is stopped with SIGINT, which
 * such a server takes as "stop now".
 */
async function drainChildren(
  children: readonly Child[],
  plan: ServePlan,
  io: Io,
): Promise<GroupStop[]> {
  const termGraceMs = plan.term_grace_ms ?? 0;
  const live = children.filter((child) => child.pid !== null && child.exited === null);
  for (const child of live) signalGroup(child.pid as number, "SIGTERM");
  const kinds = new Map(plan.servers.map((server) => [server.name, server.kind]));
  const participants = live.filter((child) => kinds.get(child.name) !== "backend");
  io.err(
    `gym: SIGTERM: the servers keep serving until a checkpoint commits (at most ${formatDuration(termGraceMs)})`,
  );
  await settlesWithin(Promise.all(participants.map((child) => child.exit)), termGraceMs);
  return await stopChildren(children, plan.grace_ms, "SIGINT");
}

async function stopChildren(
  children: readonly Child[],
  graceMs: number,
  signal: NodeJS.Signals = "SIGTERM",
): Promise<GroupStop[]> {
  const pgids = children.filter((child) => child.pid !== null).map((child) => child.pid as number);
  const outcomes = await stopGroups(pgids, { graceMs, signal });
  // Reap: wait (bounded) for the exit events, so no zombie is left behind.
  await settlesWithin(Promise.all(children.map((child) => child.exit)), 5_000);
  return outcomes;
}

/**
 * Starts the planned servers, waits for their health, writes the state file, then watches them
 * until asked to stop or until all have exited. Returns the exit status: 0 after a requested
 * stop or when every server exited cleanly, 1 after a failed start or an unexpected exit.
 */
export async function supervise(plan: ServePlan, io: Io, hooks: SuperviseHooks): Promise<number> {
  const children: Child[] = [];
  const startedAt = new Date().toISOString();
  let tail: { stop(): Promise<void> } | null = null;
  try {
    mkdirSync(plan.logs_dir, { recursive: true });
    for (const server of plan.servers) children.push(startChild(plan, server));
    if (plan.stream_logs) tail = tailLogs(children, io);

    const cancel = new AbortController();
    let interrupted = false;
    void hooks.stopRequested.then(() => {
      interrupted = true;
      cancel.abort();
    });
    const failures: { child: Child; failure: StartFailure }[] = [];
    // Over HTTPS when the deployment has a tls: block, trusting its CA.
    const probe = deploymentFetch(plan.deployment.tls);
    await Promise.all(
      children.map(async (child, index) => {
        const server = plan.servers[index];
        if (server === undefined) return;
        const failure = await waitHealthy(
          child,
          server.url,
          plan.health_timeout_ms,
          cancel.signal,
          probe.fetch,
        );
        if (failure !== null) {
          failures.push({ child, failure });
          cancel.abort();
        }
      }),
    );
    await probe.close();
    if (failures.length > 0) {
      // The lines the server wrote while failing (this run's only), before stopping adds its own.
      const logs = new Map(
        failures.map(({ child }) => [
          child,
          lastLines(child.log, FAILED_LOG_LINES, child.logStart),
        ]),
      );
      await stopChildren(children, plan.grace_ms);
      await tail?.stop();
      tail = null;
      const report = startFailureReport(
        failures.map(({ child, failure }) => ({
          name: child.name,
          log: child.log,
          lines: logs.get(child) ?? [],
          url: plan.servers.find((server) => server.name === child.name)?.url,
          ...failure,
        })),
        children.length - failures.length,
        plan.health_timeout_ms,
        commandOf(io),
      );
      hooks.onFailed(report.message, report.hint);
      return 1;
    }

    if (interrupted) {
      await stopChildren(children, plan.grace_ms);
      await tail?.stop();
      tail = null;
      hooks.onFailed(
        `interrupted before every server was up: stopped the ${plural(children.length, "server")} started`,
        null,
      );
      return 1;
    }

    const entries: Record<string, StateServer> = { ...plan.keep };
    for (const child of children) {
      const pid = child.pid as number;
      const server = plan.servers.find((candidate) => candidate.name === child.name);
      if (server === undefined) continue;
      entries[child.name] = {
        name: child.name,
        kind: server.kind,
        url: server.url,
        pid,
        pgid: pid,
        log: child.log,
        supervisor_pid: process.pid,
        started_at: startedAt,
        hostname: hostname(),
        ...(server.node === null || server.node === undefined ? {} : { node: server.node }),
        ...((plan.term_grace_ms ?? 0) > 0 ? { stop_signal: "SIGINT" as const } : {}),
      };
    }
    const state: RunState = {
      version: 1,
      deployment_file: plan.deployment_file,
      resolved_file: plan.resolved_file,
      deployment: plan.deployment,
      servers: entries,
    };
    writeStateFile(plan.state_file, state);
    hooks.onReady(state);

    let stopping = false;
    for (const child of children) {
      void child.exit.then((exit) => {
        if (!stopping)
          io.err(
            `gym: server ${child.name} (pid ${child.pid ?? "?"}) ${describeExit(exit)}; its log: ${child.log}`,
          );
      });
    }
    const allExited = Promise.all(children.map((child) => child.exit));
    let stopSignal: NodeJS.Signals | null = null;
    const outcome = await Promise.race([
      hooks.stopRequested.then((signal) => {
        stopSignal = signal ?? null;
        return "stop" as const;
      }),
      allExited.then(() => "exited" as const),
    ]);
    if (outcome === "exited") {
      await tail?.stop();
      tail = null;
      const unexpected = children.filter((child) => child.exited && !expectedExit(child.exited));
      io.err(`gym: every server has exited${unexpected.length > 0 ? " (some unexpectedly)" : ""}`);
      return unexpected.length > 0 ? 1 : 0;
    }
    stopping = true;
    io.err(`gym: stopping ${plural(children.length, "server")}…`);
    const outcomes =
      (plan.term_grace_ms ?? 0) === 0
        ? await stopChildren(children, plan.grace_ms)
        : stopSignal === "SIGTERM"
          ? await drainChildren(children, plan, io)
          : await stopChildren(children, plan.grace_ms, "SIGINT");
    await tail?.stop();
    tail = null;
    removeFromState(
      plan.state_file,
      children.map((child) => child.name),
      Object.fromEntries(children.map((child) => [child.name, child.pid ?? 0])),
    );
    const survivors = outcomes.filter((outcome) => outcome.outcome === "alive");
    io.err(
      survivors.length === 0
        ? `gym: stopped ${plural(children.length, "server")}; logs kept in ${plan.logs_dir}`
        : `gym: process groups ${survivors.map((s) => s.pgid).join(", ")} survived SIGKILL`,
    );
    return survivors.length === 0 ? 0 : 1;
  } catch (error) {
    await stopChildren(children, plan.grace_ms).catch(() => []);
    await tail?.stop();
    // A CliError (tsx missing, say) knows what to do; anything else is reported as it is.
    const failure = asCliError(error);
    if (failure !== null) hooks.onFailed(failure.message, failure.hint);
    else hooks.onFailed(`gym serve failed: ${describeError(error)}`, null);
    return 1;
  }
}

/** Messages the detached supervisor sends to `gym serve --detach`. */
export type SupervisorMessage =
  { type: "ready"; state: RunState } | { type: "failed"; message: string; hint: string | null };

/** The body of the detached supervisor process (`supervisor-process <plan file>`). */
export async function runSupervisorProcess(argv: readonly string[]): Promise<number> {
  const planFile = argv[0];
  if (planFile === undefined) {
    process.stderr.write("usage: supervisor-process <plan file>\n");
    return 2;
  }
  // Written by `gym serve` a moment ago: trusted as is. Its secrets came in the environment.
  const plan: ServePlan = {
    ...(JSON.parse(readFileSync(planFile, "utf8")) as ServePlan),
    session_secrets: takeSupervisorSecrets(process.env),
  };
  const stop = deferred<NodeJS.Signals>();
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    process.on(signal, () => stop.resolve(signal));
  }
  const stamp = (text: string): string => `${new Date().toISOString()} ${text}`;
  const io: Io = {
    out: (text) => void process.stdout.write(`${stamp(text)}\n`),
    err: (text) => void process.stderr.write(`${stamp(text)}\n`),
    cwd: process.cwd(),
    env: process.env,
    // This process's own argv names supervisor-process, not how the user ran `gym serve`.
    command: plan.command,
  };
  const send = (message: SupervisorMessage): void => {
    if (process.connected && process.send !== undefined) process.send(message);
  };
  io.err(`supervisor ${process.pid} starting ${plan.servers.map((s) => s.name).join(", ")}`);
  const code = await supervise(plan, io, {
    onReady: (state) => {
      io.err("every server is healthy");
      send({ type: "ready", state });
    },
    onFailed: (message, hint) => {
      io.err(hint === null ? message : `${message}\nwhat to do: ${hint}`);
      send({ type: "failed", message, hint });
    },
    stopRequested: stop.promise,
  });
  if (process.connected) process.disconnect();
  return code;
}
