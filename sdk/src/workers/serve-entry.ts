/**
 * The one way `gym serve` starts the server of a deployment entry: as one process, or, with
 * `num_workers` above 1, as a coordinator and its workers (`cluster.ts`). The CLI knows nothing
 * of workers beyond the count it passes.
 *
 * @see docs/workers.md
 */
import type { Logger } from "pino";
import type { ServerOptions } from "../server/server.js";
import { startServer, type RunningServer, type ServerModuleExport } from "../server/serve.js";

/** What serving one deployment entry needs. */
export interface ServeEntryArgs {
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

/**
 * Starts this process's part of a deployment entry's server and returns it listening: the
 * whole server with one worker; the coordinator (the process `gym serve` started) or one of
 * its forked workers with several.
 */
export async function serveEntry(args: ServeEntryArgs): Promise<RunningServer> {
  if (args.workers <= 1) {
    return await startServer(args.exported, args.options, {
      port: args.listen.port,
      host: args.listen.host,
    });
  }
  // Loaded only for several workers: one process never needs the cluster's code.
  const { startWorkerCluster } = await import("./cluster.js");
  return await startWorkerCluster(args);
}
