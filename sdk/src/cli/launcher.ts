/**
 * `gym serve` and `gym stop`: start every server of a deployment as its own process group,
 * wait until each answers `GET /health`, record the run in the state file, and stop the groups
 * again (SIGTERM, then SIGKILL after a grace period; or SIGKILL at once, a crash).
 *
 * `gym serve` checks the deployment file, chooses ports and writes the resolved deployment
 * before anything starts; the servers are then started by the supervisor (`supervisor.ts`):
 * `gym serve` itself in the foreground, or a small background process with `--detach`.
 *
 * @see docs/deployment.md
 */
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, openSync, rmSync } from "node:fs";
import { hostname } from "node:os";
import path from "node:path";
import { deferred } from "../util/deferred.js";
import { didYouMean } from "../util/did-you-mean.js";
import type { ResolvedDeployment } from "../wire/deployment.js";
import { loadDeploymentFile } from "../deployment/load.js";
import { resolveDeployment } from "../deployment/resolve.js";
import { DEFAULT_GRACE_MS, DEFAULT_HEALTH_TIMEOUT_MS } from "./defaults.js";
import { formatDuration } from "./duration.js";
import { cliModule, isTypeScript, nodeCommand, tsxLoader } from "./node-command.js";
import { CliError, UsageError, commandOf, shownPath, type Io } from "./output.js";
import { chooseFreePorts, takenPorts, takenPortsError } from "./ports.js";
import { isProcessAlive, pollUntil, stopGroups, type GroupStop } from "./processes.js";
import { deadServerLines, deadServers } from "./dead-servers.js";
import { noteFoundElsewhere } from "./open-run.js";
import {
  chooseStateFile,
  missingState,
  nodeStateFile,
  nodeStateFiles,
  readState,
  removeFromState,
  runStateFile,
  searchesNearby,
  statePaths,
  writeFileAtomic,
  type RunState,
  type StateServer,
} from "./state-file.js";
import { sessionSecretsOf, supervisorEnv } from "./session-secrets.js";
import {
  describeExit,
  planFileText,
  supervise,
  type Exit,
  type ServePlan,
  type SupervisorMessage,
} from "./supervisor.js";
import { table } from "./table.js";

export type { ServePlan } from "./supervisor.js";

/** What `gym serve` was asked for. */
export interface ServeOptions {
  readonly deploymentFile: string;
  /** The state file. @default `.gym/run.json` next to the deployment file */
  readonly state?: string;
  /** Start only these servers; the others must already run per the state file. */
  readonly only?: readonly string[];
  /**
   * Start only this node's servers (a deployment with `nodes:`), with their own state file
   * (`.gym/nodes/<node>/run.json`); the other nodes' servers are started on their machines.
   */
  readonly node?: string;
  /** Also stream every server's log, prefixed by its name. @default false */
  readonly foreground?: boolean;
  /** Return once every server is healthy, leaving a background supervisor. @default false */
  readonly detach?: boolean;
  /** @default {@link DEFAULT_HEALTH_TIMEOUT_MS} */
  readonly healthTimeoutMs?: number;
  /** @default {@link DEFAULT_GRACE_MS} */
  readonly graceMs?: number;
  /**
   * On SIGTERM, let participants serve until a checkpoint commits, for at most this long (see
   * `term-grace.ts`). @default 0 (stop at once)
   */
  readonly termGraceMs?: number;
  /** Stops a foreground run (instead of the process's SIGINT/SIGTERM/SIGHUP); for tests. */
  readonly signal?: AbortSignal;
}

function plural(count: number, word: string): string {
  return `${count} ${word}${count === 1 ? "" : "s"}`;
}

// ---------------------------------------------------------------------------------------------
// Planning (nothing is started)
// ---------------------------------------------------------------------------------------------

/** Loads the deployment, checks the state file, chooses ports and writes the resolved deployment. */
export async function planServe(options: ServeOptions, io: Io): Promise<ServePlan> {
  const gym = commandOf(io);
  const loaded = loadDeploymentFile(options.deploymentFile, { env: io.env, cwd: io.cwd });
  const node = options.node ?? null;
  const nodeNames = Object.keys(loaded.nodes ?? {});
  if (node !== null && !nodeNames.includes(node)) {
    throw new UsageError(
      loaded.nodes === null
        ? `--node ${node}: ${shownPath(io, loaded.file)} has no nodes: block (it runs on one machine)`
        : `--node names ${node}, which ${shownPath(io, loaded.file)} does not define${didYouMean(node, nodeNames)}`,
      loaded.nodes === null
        ? `start it without --node, or declare its nodes (nodes: { NAME: { host: ... } })`
        : `choose among: ${nodeNames.join(", ")}`,
    );
  }
  if (node === null && loaded.nodes !== null && nodeNames.length > 1) {
    throw new UsageError(
      `${shownPath(io, loaded.file)} spans ${nodeNames.length} nodes (${nodeNames.join(", ")}): say which this machine is`,
      `run \`${gym} serve ${shownPath(io, loaded.file)} --node NAME\` on each machine`,
    );
  }
  const stateFile =
    options.state === undefined && loaded.nodes !== null
      ? nodeStateFile(loaded.file, node ?? (nodeNames[0] as string))
      : chooseStateFile({ state: options.state, deployment: loaded.file, cwd: io.cwd });
  const paths = statePaths(stateFile);
  // A node's servers are the deployment for this state file: the other nodes' run elsewhere.
  const names = Object.keys(loaded.servers).filter(
    (name) => node === null || loaded.servers[name]?.node === node,
  );
  const only = options.only === undefined ? null : [...new Set(options.only)];
  for (const name of only ?? []) {
    if (!names.includes(name)) {
      const elsewhere = loaded.servers[name]?.node;
      throw new UsageError(
        elsewhere !== undefined && elsewhere !== null
          ? `--only names ${name}, which runs on node ${elsewhere}, not ${node ?? "this one"}`
          : `--only names ${name}, which ${loaded.file} does not define${didYouMean(name, names)}`,
        `choose among: ${names.join(", ")}`,
      );
    }
  }
  const targets = only ?? names;
  // A TypeScript entrypoint runs under tsx: find it now, so a missing tsx starts nothing.
  for (const name of targets) {
    const entrypoint = loaded.servers[name]?.entrypoint;
    if (entrypoint !== undefined && isTypeScript(entrypoint)) {
      tsxLoader(loaded.dir, `server ${name} (${shownPath(io, entrypoint)})`);
    }
  }
  const existing = readState(stateFile);
  // An entry another machine wrote (a node requeued onto other hosts) says nothing about this one.
  const alive = (entry: StateServer | undefined): boolean =>
    entry !== undefined &&
    (entry.hostname ?? hostname()) === hostname() &&
    isProcessAlive(entry.pid);
  const stopHint = `stop it with \`${gym} stop --state ${shownPath(io, stateFile)}\`, or keep it and use another state file with --state FILE`;
  if (only === null && existing !== null) {
    const running = Object.values(existing.servers).filter(alive);
    if (running.length > 0) {
      throw new CliError(
        `a deployment is already running from ${shownPath(io, stateFile)}: ` +
          running.map((entry) => `${entry.name} (pid ${entry.pid})`).join(", "),
        stopHint,
      );
    }
  }
  const keep: Record<string, StateServer> = {};
  if (only !== null) {
    for (const name of targets) {
      const entry = existing?.servers[name];
      if (alive(entry)) {
        throw new CliError(
          `server ${name} is already running (pid ${entry?.pid})`,
          `stop it first with \`${gym} stop --only ${name} --state ${shownPath(io, stateFile)}\``,
        );
      }
    }
    for (const name of names.filter((name) => !targets.includes(name))) {
      const entry = existing?.servers[name];
      if (existing === null || entry === undefined || !alive(entry)) {
        throw new CliError(
          `server ${name} is not running (per ${shownPath(io, stateFile)}), and --only does not start it`,
          `start it too (--only ${[...targets, name].join(",")}), or start everything with \`${gym} serve ${shownPath(io, loaded.file)}\``,
        );
      }
      keep[name] = entry;
    }
  }

  // Ports: fixed ones as written; a restarted server keeps the port the others know it by;
  // every other `port: 0` gets a free port now, before anything starts.
  const ports: Record<string, number> = {};
  const free: { name: string; host: string }[] = [];
  for (const [name, server] of Object.entries(loaded.servers)) {
    const known = existing?.deployment.servers[name]?.port;
    if (server.port !== 0) ports[name] = server.port;
    else if (only !== null && known !== undefined) ports[name] = known;
    else free.push({ name, host: server.host });
  }
  // A fixed port another process holds would only show as a server that failed to start.
  const taken = await takenPorts(
    targets
      .filter((name) => ports[name] !== undefined)
      .map((name) => ({
        name,
        host: loaded.servers[name]?.host ?? "127.0.0.1",
        port: ports[name] as number,
      })),
  );
  if (taken.length > 0) throw takenPortsError(taken, shownPath(io, loaded.file));
  Object.assign(ports, await chooseFreePorts(free));
  const deployment: ResolvedDeployment = resolveDeployment(loaded, ports);
  writeFileAtomic(paths.resolvedFile, `${JSON.stringify(deployment, null, 2)}\n`);

  return {
    deployment_file: loaded.file,
    state_file: paths.stateFile,
    resolved_file: paths.resolvedFile,
    logs_dir: paths.logsDir,
    command: gym,
    deployment,
    health_timeout_ms: options.healthTimeoutMs ?? DEFAULT_HEALTH_TIMEOUT_MS,
    grace_ms: options.graceMs ?? DEFAULT_GRACE_MS,
    ...((options.termGraceMs ?? 0) > 0 ? { term_grace_ms: options.termGraceMs } : {}),
    stream_logs: options.foreground === true,
    servers: targets.map((name) => {
      const server = loaded.servers[name];
      const resolved = deployment.servers[name];
      if (server === undefined || resolved === undefined) throw new Error(`unknown server ${name}`);
      return {
        name,
        kind: server.kind,
        entrypoint: server.entrypoint,
        url: resolved.url,
        cwd: loaded.dir,
        node_args: server.node_args,
        node: server.node,
      };
    }),
    keep,
    session_secrets: sessionSecretsOf(loaded, targets),
  };
}

// ---------------------------------------------------------------------------------------------
// gym serve
// ---------------------------------------------------------------------------------------------

function startedTable(state: RunState, names: readonly string[]): string {
  return table(
    ["NAME", "KIND", "URL", "SWAGGER", "PID"],
    names.map((name) => {
      const entry = state.servers[name];
      if (entry === undefined) return [name, "?", "?", "?", "?"];
      return [name, entry.kind, entry.url, `${entry.url}/docs`, String(entry.pid)];
    }),
  );
}

async function runDetached(plan: ServePlan, planFile: string, io: Io): Promise<RunState> {
  const supervisorLog = statePaths(plan.state_file).supervisorLog;
  const fd = openSync(supervisorLog, "a", 0o600);
  let child: ChildProcess;
  try {
    const { command, args } = nodeCommand(cliModule("supervisor-process"), [planFile], {
      fromDir: path.dirname(plan.deployment_file),
    });
    child = spawn(command, args, {
      cwd: io.cwd,
      detached: true,
      stdio: ["ignore", fd, fd, "ipc"],
      env: supervisorEnv(process.env, plan.session_secrets ?? {}),
    });
  } finally {
    closeSync(fd);
  }
  const outcome = deferred<SupervisorMessage | { type: "exit"; exit: Exit }>();
  child.on("message", (message: SupervisorMessage) => outcome.resolve(message));
  child.once("error", (error) =>
    outcome.resolve({ type: "exit", exit: { code: null, signal: null, error: error.message } }),
  );
  child.once("exit", (code, signal) => outcome.resolve({ type: "exit", exit: { code, signal } }));
  const boundMs = plan.health_timeout_ms + plan.grace_ms + 20_000;
  const timer = setTimeout(
    () => outcome.resolve({ type: "exit", exit: { code: null, signal: null, error: "timeout" } }),
    boundMs,
  );
  const result = await outcome.promise;
  clearTimeout(timer);
  if (child.connected) child.disconnect();
  child.unref();
  if (result.type === "ready") return result.state;
  if (result.type === "failed") throw new CliError(result.message, result.hint);
  if (child.pid !== undefined && result.exit.error === "timeout") {
    await stopGroups([child.pid], { graceMs: 1_000 });
  }
  throw new CliError(
    `the background supervisor ${describeExit(result.exit)} before the servers were up`,
    `see ${supervisorLog} and the logs in ${plan.logs_dir}`,
  );
}

/** `gym serve <deployment>`; returns the exit status. */
export async function serve(options: ServeOptions, io: Io): Promise<number> {
  if (options.detach === true && options.foreground === true) {
    throw new UsageError(
      "--detach and --foreground cannot be combined",
      "use --detach to return once the servers are up, or --foreground to stream their logs here",
    );
  }
  const plan = await planServe(options, io);
  const names = plan.servers.map((server) => server.name);
  const stateShown = shownPath(io, plan.state_file);
  io.err(
    `gym: starting ${plural(names.length, "server")} from ${shownPath(io, plan.deployment_file)}…`,
  );

  if (options.detach === true) {
    const planFile = path.join(path.dirname(plan.state_file), "serve-plan.json");
    writeFileAtomic(planFile, planFileText(plan));
    let state: RunState;
    try {
      state = await runDetached(plan, planFile, io);
    } finally {
      rmSync(planFile, { force: true });
    }
    io.out(startedTable(state, names));
    io.out(
      `\nrunning in the background (state: ${stateShown}, logs: ${shownPath(io, plan.logs_dir)}/)\n` +
        `stop with: ${commandOf(io)} stop --state ${stateShown}`,
    );
    return 0;
  }

  const stop = deferred<NodeJS.Signals | void>();
  const signals: NodeJS.Signals[] = ["SIGINT", "SIGTERM", "SIGHUP"];
  const onSignal = (signal: NodeJS.Signals): void => stop.resolve(signal);
  const onAbort = (): void => stop.resolve();
  if (options.signal === undefined) for (const signal of signals) process.on(signal, onSignal);
  else if (options.signal.aborted) stop.resolve();
  else options.signal.addEventListener("abort", onAbort, { once: true });
  let failure: { message: string; hint: string | null } | null = null;
  try {
    const code = await supervise(plan, io, {
      onReady: (state) => {
        io.out(startedTable(state, names));
        io.out(
          `\nstate: ${stateShown}, logs: ${shownPath(io, plan.logs_dir)}/\n` +
            "press Ctrl-C to stop every server",
        );
      },
      onFailed: (message, hint) => {
        failure = { message, hint };
      },
      stopRequested: stop.promise,
    });
    if (failure !== null) {
      const { message, hint } = failure;
      throw new CliError(message, hint);
    }
    return code;
  } finally {
    if (options.signal === undefined) for (const signal of signals) process.off(signal, onSignal);
    else options.signal.removeEventListener("abort", onAbort);
  }
}

// ---------------------------------------------------------------------------------------------
// gym stop
// ---------------------------------------------------------------------------------------------

/** What `gym stop` was asked for. */
export interface StopOptions {
  readonly state?: string;
  readonly deployment?: string;
  /** SIGKILL every group at once (a crash). @default false */
  readonly kill?: boolean;
  /** @default {@link DEFAULT_GRACE_MS} */
  readonly graceMs?: number;
  /** Stop only these servers. */
  readonly only?: readonly string[];
  /** Stop this node's servers: its state file next to the deployment (which must be given). */
  readonly node?: string;
  readonly json?: boolean;
}

/**
 * Without --node or --state, a deployment with nodes whose run lives in node state files: the
 * one node whose servers run on this machine (the only node started here). Null when the
 * deployment has a single state file, or none is found; a choice of several is a usage error.
 */
function onlyNodeRun(options: StopOptions, io: Io): string | null {
  if (options.state !== undefined || options.deployment === undefined) return null;
  const deployment = path.resolve(io.cwd, options.deployment);
  if (readState(chooseStateFile({ deployment, cwd: io.cwd })) !== null) return null;
  const here = hostname();
  const local = Object.entries(nodeStateFiles(deployment)).filter(([, file]) => {
    const state = readState(file);
    return (
      state !== null &&
      Object.values(state.servers).some((entry) => (entry.hostname ?? here) === here)
    );
  });
  if (local.length <= 1) return local[0]?.[1] ?? null;
  throw new UsageError(
    `nodes ${local.map(([node]) => node).join(", ")} all run servers on this machine: say which to stop`,
    `\`${commandOf(io)} stop ${shownPath(io, deployment)} --node NAME\``,
  );
}

/**
 * `gym stop`; returns the exit status (1 when a process group survived). Stopping is
 * idempotent: with no state file there is nothing to stop, which is said, and the status is 0.
 */
export async function stop(options: StopOptions, io: Io): Promise<number> {
  if (
    options.node !== undefined &&
    options.deployment === undefined &&
    options.state === undefined
  ) {
    throw new UsageError(
      `--node ${options.node} needs the deployment file, to find the node's state next to it`,
      `\`${commandOf(io)} stop FILE --node ${options.node}\``,
    );
  }
  const stateFile =
    options.node !== undefined && options.state === undefined
      ? nodeStateFile(path.resolve(io.cwd, options.deployment as string), options.node)
      : (onlyNodeRun(options, io) ??
        runStateFile({ ...options, cwd: io.cwd, command: commandOf(io) }));
  const searched = searchesNearby(options);
  const state = readState(stateFile);
  if (state === null) {
    if (options.json === true) {
      io.out(JSON.stringify({ state_file: stateFile, servers: {} }, null, 2));
    }
    io.err(
      `gym: no running deployment: ${missingState(shownPath(io, stateFile), searched ? io.cwd : undefined)}; nothing to stop`,
    );
    return 0;
  }
  if (searched) noteFoundElsewhere(stateFile, io);
  const names = Object.keys(state.servers);
  const targets = options.only === undefined ? names : [...new Set(options.only)];
  for (const name of targets) {
    if (!names.includes(name)) {
      throw new UsageError(
        `--only names ${name}, which the state file ${shownPath(io, stateFile)} does not list${didYouMean(name, names)}`,
        `running servers: ${names.join(", ") || "none"}`,
      );
    }
  }
  const entries = targets.map((name) => state.servers[name] as StateServer);
  // A pid means something only on the machine that started it (a shared run directory is read
  // from every machine): signalling it here would hit whatever process holds it on this one.
  const here = hostname();
  const elsewhere = entries.filter(
    (entry) => entry.hostname !== undefined && entry.hostname !== here,
  );
  if (elsewhere.length > 0) {
    throw new CliError(
      `${elsewhere.map((entry) => `${entry.name} runs on ${entry.hostname}`).join(", ")}, not on this machine (${here})`,
      `run \`${commandOf(io)} stop\` there${elsewhere[0]?.node === undefined ? "" : ` (with --node ${elsewhere[0].node})`}`,
    );
  }
  // Named before stopping: afterwards every server is gone and these no longer stand out.
  const dead = deadServers(state).filter((entry) => targets.includes(entry.name));
  for (const line of deadServerLines(dead, io)) io.err(line);
  const started = Date.now();
  // Servers started with a term grace take SIGTERM as "finish up": SIGINT stops them now.
  const signal = entries.some((entry) => entry.stop_signal === "SIGINT") ? "SIGINT" : "SIGTERM";
  const outcomes = await stopGroups(
    entries.map((entry) => entry.pgid),
    { graceMs: options.graceMs ?? DEFAULT_GRACE_MS, kill: options.kill === true, signal },
  );
  // Supervisors end once their servers are gone; wait for those (bounded), then make sure.
  const supervisors = [
    ...new Set(
      entries
        .map((entry) => entry.supervisor_pid)
        .filter((pid): pid is number => pid !== null && pid !== process.pid),
    ),
  ].filter((pid) =>
    Object.values(state.servers)
      .filter((entry) => entry.supervisor_pid === pid)
      .every((entry) => targets.includes(entry.name)),
  );
  const supervisorsGone = await pollUntil(
    () => supervisors.every((pid) => !isProcessAlive(pid)),
    5_000,
  );
  if (!supervisorsGone) {
    for (const pid of supervisors) if (isProcessAlive(pid)) process.kill(pid, "SIGKILL");
  }
  const survivors = outcomes.filter((outcome) => outcome.outcome === "alive");
  if (survivors.length === 0) {
    removeFromState(
      stateFile,
      targets,
      Object.fromEntries(entries.map((entry) => [entry.name, entry.pid])),
    );
  }
  const word: Record<GroupStop["outcome"], string> = {
    term: `stopped (${signal})`,
    kill: options.kill === true ? "killed (SIGKILL)" : "killed (SIGKILL after the grace period)",
    gone: "was not running",
    alive: "STILL RUNNING",
  };
  if (options.json === true) {
    io.out(
      JSON.stringify(
        {
          state_file: stateFile,
          servers: Object.fromEntries(
            entries.map((entry, index) => [
              entry.name,
              { pid: entry.pid, pgid: entry.pgid, outcome: outcomes[index]?.outcome ?? "gone" },
            ]),
          ),
        },
        null,
        2,
      ),
    );
  } else {
    io.out(
      table(
        ["NAME", "PID", "RESULT", "LOG"],
        entries.map((entry, index) => [
          entry.name,
          String(entry.pid),
          word[outcomes[index]?.outcome ?? "gone"],
          shownPath(io, entry.log),
        ]),
      ),
    );
    io.out(
      survivors.length === 0
        ? `\n${plural(entries.length, "server")} stopped in ${formatDuration(Date.now() - started)}; logs kept`
        : `\nprocess groups ${survivors.map((s) => s.pgid).join(", ")} are still running`,
    );
  }
  if (survivors.length > 0) {
    throw new CliError(
      `${plural(survivors.length, "process group")} survived SIGKILL`,
      "check them with `ps -o pid,pgid,stat,cmd -g <pgid>`; they may be stuck in the kernel",
    );
  }
  return 0;
}
