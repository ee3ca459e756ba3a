/**
 * How a server with `num_workers` above 1 runs: the process `gym serve` starts becomes the
 * server's coordinator (it serves no data) and forks that many workers, which share the
 * server's port (round-robin: the coordinator accepts each connection and hands it to the next
 * worker). With checkpointing on, the coordinator runs the control plane over a
 * coordinated participant (`coordinate.ts`), and every worker's control routes forward to it.
 *
 * @see docs/workers.md
 */
import cluster, { type Worker } from "node:cluster";
import { randomBytes } from "node:crypto";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { createServer, type Server as NetServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import type { Logger } from "pino";
import type { ControlPlane } from "../control/control-plane.js";
import { resolveCheckpointSettings, type Server, type ServerOptions } from "../server/server.js";
import { buildServer, type RunningServer, type ServerModuleExport } from "../server/serve.js";
import { isProcessAlive } from "../util/process-liveness.js";
import { takeEnv } from "../util/take-env.js";
import { coordinate } from "./coordinate.js";
import type { WorkerParticipant } from "./kind-hooks.js";
import { WORKER_ENV } from "./worker-messages.js";
import { WorkerLink } from "./worker-link.js";
import { WorkerPool } from "./worker-pool.js";

/** How long stopping waits for the workers before killing them (ms). */
const WORKER_STOP_GRACE_MS = 15_000;

/** What serving one deployment entry needs (a cluster, or one process when `workers` is 1). */
export interface WorkerClusterArgs {
  /** The server module's default export. */
  readonly exported: ServerModuleExport;
  readonly options: ServerOptions;
  readonly listen: { readonly port: number; readonly host: string };
  /** The entry's `num_workers`: above 1, a coordinator and that many worker processes. */
  readonly workers: number;
  readonly logger: Logger;
  /** The term grace of `gym serve --term-grace` (ms; 0: none). */
  readonly termGraceMs: number;
}

/** Whether this process is a worker forked for a multi-worker server. */
export function isServerWorker(): boolean {
  return !cluster.isPrimary && process.env[WORKER_ENV.index] !== undefined;
}

/** Starts this process's part: the coordinator (the process `gym serve` started) or a worker. */
export async function startWorkerCluster(args: WorkerClusterArgs): Promise<RunningServer> {
  return isServerWorker() ? await startWorker(args) : await startCoordinator(args);
}

/**
 * The participant of a built server (null: none). Read structurally: the server may be built by
 * another copy of this package (the server module's own dependency).
 */
function participantOf(server: unknown): WorkerParticipant | null {
  const participant = (server as { participant?: WorkerParticipant | null }).participant;
  return participant ?? null;
}

/** A short directory for the sockets (a Unix socket path is limited to about 100 bytes). */
function socketBase(): string {
  const base = tmpdir();
  return base.length <= 40 ? base : "/tmp";
}

/** Removes socket directories left by coordinators that died without cleaning up. */
async function removeStaleSocketDirs(base: string): Promise<void> {
  let names: string[];
  try {
    names = await readdir(base);
  } catch {
    return;
  }
  for (const name of names) {
    const match = /^ng-(\d+)-/.exec(name);
    if (match === null) continue;
    const pid = Number(match[1]);
    if (pid === process.pid || isProcessAlive(pid)) continue;
    await rm(path.join(base, name), { recursive: true, force: true }).catch(() => undefined);
  }
}

function describeExit(code: number | null, signal: string | null): string {
  return signal !== null ? `signal ${signal}` : `code ${code ?? "unknown"}`;
}

async function startCoordinator(args: WorkerClusterArgs): Promise<RunningServer> {
  const { options, logger } = args;
  const log = logger.child({ server: options.name, role: "coordinator" });
  const base = socketBase();
  await removeStaleSocketDirs(base);
  const socketDir = await mkdtemp(path.join(base, `ng-${process.pid}-`));
  const coordinatorSocket = path.join(socketDir, "coordinator.sock");

  const settings = resolveCheckpointSettings(options.checkpoint);
  // A cookie minted by one worker must verify on every other: they share one session secret.
  // A configured one (which this process took out of its environment) is handed on; one
  // derived from the control token each worker computes alike; else one random draw for all.
  const configuredSecret = options.sessionSecret ?? null;
  const randomSecret =
    configuredSecret !== null || settings.enabled ? null : randomBytes(32).toString("base64url");
  // Built, never listening: its participant answers the kind, the record schema and pure hooks.
  const prototype = await buildServer(args.exported, options);
  const pool = new WorkerPool(args.workers, log);
  const participant = settings.enabled ? participantOf(prototype) : null;
  const controlPlane: ControlPlane | null =
    participant === null
      ? null
      : coordinate(pool, participant, {
          instance: options.name,
          leaseGraceSeconds: settings.lease_grace_seconds,
          logger: log,
        }).controlPlane;
  // Through the server's own SDK (the one whose telemetry is installed, which may be another
  // copy than this module's): the gauges show the control plane that answers the control calls,
  // and every scrape carries this process's metrics.
  const reporter = prototype as Partial<Pick<Server, "reportControlPlane" | "metricsText">>;
  if (controlPlane !== null) reporter.reportControlPlane?.(controlPlane);
  if (reporter.metricsText !== undefined) {
    pool.metricsSource = () => reporter.metricsText!.call(prototype);
  }

  const channelServer: NetServer = createServer((socket) => pool.accept(socket));
  await new Promise<void>((resolve, reject) => {
    channelServer.once("error", reject);
    channelServer.listen(coordinatorSocket, () => {
      channelServer.off("error", reject);
      resolve();
    });
  });

  // Round-robin: the coordinator accepts and hands connections out evenly; the kernel's own
  // spread piles them onto one worker.
  cluster.schedulingPolicy = cluster.SCHED_RR;
  const workers = new Map<number, Worker>();
  let stopping = false;
  const fork = (index: number): Worker => {
    const worker = cluster.fork({
      [WORKER_ENV.index]: String(index),
      [WORKER_ENV.count]: String(args.workers),
      [WORKER_ENV.coordinator]: coordinatorSocket,
      [WORKER_ENV.socketDir]: socketDir,
      ...(configuredSecret === null ? {} : { [WORKER_ENV.sessionSecret]: configuredSecret }),
      ...(randomSecret === null ? {} : { [WORKER_ENV.randomSessionSecret]: randomSecret }),
    });
    workers.set(index, worker);
    worker.on("exit", (code, signal) => {
      const pid = worker.process.pid ?? -1;
      if (!stopping) pool.workerExited(index, pid, describeExit(code, signal));
    });
    return worker;
  };
  for (let index = 0; index < args.workers; index++) fork(index);
  log.info(
    {
      workers: args.workers,
      port: args.listen.port,
      pids: [...workers.values()].map((w) => w.process.pid),
    },
    "started workers",
  );

  const stopWorkers = async (): Promise<void> => {
    stopping = true;
    pool.shutdown();
    controlPlane?.close();
    // Each worker was asked to stop (a signal to the whole group reaches them anyway).
    const exits = [...workers.values()]
      .filter((worker) => worker.process.exitCode === null && worker.process.signalCode === null)
      .map((worker) => new Promise<void>((resolve) => worker.once("exit", () => resolve())));
    const killer = setTimeout(() => {
      for (const worker of workers.values()) worker.process.kill("SIGKILL");
    }, WORKER_STOP_GRACE_MS);
    killer.unref();
    await Promise.all(exits);
    clearTimeout(killer);
    await new Promise<void>((resolve) => channelServer.close(() => resolve()));
    await rm(socketDir, { recursive: true, force: true });
    await prototype.close();
  };
  let stopped: Promise<void> | null = null;
  const address = {
    host: args.listen.host,
    port: args.listen.port,
    // The workers serve HTTPS themselves over the port the cluster shares (TLS runs in each).
    url: `${options.deployment?.tls === undefined ? "http" : "https"}://${args.listen.host}:${args.listen.port}`,
  };
  return {
    server: prototype,
    address,
    stop: () => (stopped ??= stopWorkers()),
    checkpointState: () =>
      controlPlane === null
        ? null
        : { phase: controlPlane.phase, checkpointId: controlPlane.checkpointId },
  };
}

async function startWorker(args: WorkerClusterArgs): Promise<RunningServer> {
  const index = Number(process.env[WORKER_ENV.index]);
  const logger = args.logger.child({ worker: index });
  const link = await WorkerLink.connect({
    coordinator: process.env[WORKER_ENV.coordinator] ?? "",
    index,
    count: Number(process.env[WORKER_ENV.count]),
    socketDir: process.env[WORKER_ENV.socketDir] ?? "",
    sessionSecret: takeEnv(process.env, WORKER_ENV.randomSessionSecret) ?? null,
    logger,
  });
  const sessionSecret = takeEnv(process.env, WORKER_ENV.sessionSecret);
  const server = await buildServer(args.exported, {
    ...args.options,
    logger,
    worker: link,
    ...(sessionSecret === undefined ? {} : { sessionSecret }),
  });
  await link.register(participantOf(server));
  const address = await server.listen(args.listen);
  await link.listening();
  let stopped: Promise<void> | null = null;
  // A closed worker has nothing left to do: it leaves at once (its cluster channel would
  // otherwise keep it alive until the coordinator's kill).
  const stop = (): Promise<void> =>
    (stopped ??= server.close().finally(() => {
      link.close();
      setImmediate(() => process.exit(process.exitCode ?? 0));
    }));
  // Without its coordinator a worker can neither checkpoint nor route: it stops.
  const leave = (reason: string): void => {
    if (stopped !== null) return;
    logger.error({ reason }, "lost the coordinator: stopping");
    process.exitCode = 1;
    void stop();
  };
  link.onCoordinatorLost(leave);
  link.onStopRequested(() => void stop());
  process.on("disconnect", () => leave("the coordinator process is gone"));
  // With a term grace the engine's SIGTERM reaches the workers too: their coordinator decides
  // when they stop (after the checkpoint), so they do not leave on it.
  if (args.termGraceMs > 0) {
    process.on("SIGTERM", () => logger.info("SIGTERM: the coordinator stops this worker"));
  }
  return { server, address, stop };
}
