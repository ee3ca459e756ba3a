/**
 * A server module's default export built and listening: the shapes a module must have, and the
 * one-process start. `gym serve` starts a server through the workers adapter's `serveEntry`,
 * which uses these for one process and for each worker of several.
 *
 * @see docs/deployment.md
 */
import type { ListeningAddress, ServerOptions } from "./server.js";

/** What a server module's default export must build: something that listens and closes. */
export interface StartableServer {
  listen(options: { port?: number; host?: string }): Promise<ListeningAddress>;
  close(): Promise<void>;
}

/** A server class: `new Cls(options)`. */
export type ServerClass = new (options: ServerOptions) => StartableServer;
/** A factory: `factory(options)`, possibly async. */
export type ServerFactory = (options: ServerOptions) => StartableServer | Promise<StartableServer>;
/** The default export of a server module. */
export type ServerModuleExport = ServerClass | ServerFactory;

/** A server that is listening, and how to stop it. */
export interface RunningServer {
  readonly server: StartableServer;
  readonly address: ListeningAddress;
  /** Closes the server gracefully (idempotent). */
  stop(): Promise<void>;
  /**
   * The checkpoint phase (`idle`, `prepared`, `committed`, ...) and checkpoint of the
   * participant this process serves, or null when it takes no part in checkpoints. Read by the
   * term grace.
   */
  readonly checkpointState?: () => {
    readonly phase: string;
    readonly checkpointId: string | null;
  } | null;
}

/** A server module cannot be used; the message says what to change. */
export class ServerModuleError extends Error {
  override readonly name = "ServerModuleError";
}

function isServerClass(value: ServerModuleExport): value is ServerClass {
  const prototype = (value as { prototype?: { listen?: unknown } }).prototype;
  return typeof prototype?.listen === "function";
}

function isStartable(value: unknown): value is StartableServer {
  return (
    value !== null &&
    typeof value === "object" &&
    typeof (value as StartableServer).listen === "function" &&
    typeof (value as StartableServer).close === "function"
  );
}

/** Builds the server from a module's default export. */
export async function buildServer(
  exported: ServerModuleExport,
  options: ServerOptions,
): Promise<StartableServer> {
  const server = isServerClass(exported)
    ? new exported(options)
    : await (exported as ServerFactory)(options);
  if (!isStartable(server)) {
    throw new ServerModuleError(
      "the server factory did not return a server (an object with listen() and close()): return a Server instance",
    );
  }
  return server;
}

/** Starts a server and returns it listening. */
export async function startServer(
  exported: ServerModuleExport,
  options: ServerOptions,
  listen: { port: number; host: string },
): Promise<RunningServer> {
  const server = await buildServer(exported, options);
  const address = await server.listen(listen);
  let stopping: Promise<void> | null = null;
  const participantServer = server as {
    controlPlane?: { phase: string; checkpointId: string | null } | null;
  };
  return {
    server,
    address,
    stop: () => (stopping ??= server.close()),
    checkpointState: () => {
      const plane = participantServer.controlPlane ?? null;
      return plane === null ? null : { phase: plane.phase, checkpointId: plane.checkpointId };
    },
  };
}
