/**
 * The one way `gym serve` starts the server of a deployment entry: as one process, or, with
 * `num_workers` above 1, as a coordinator and its workers (`cluster.ts`). The CLI knows nothing
 * of workers beyond the count it passes.
 *
 * @see docs/workers.md
 */
import { startServer, type RunningServer } from "../server/serve.js";
import type { WorkerClusterArgs } from "./cluster.js";

/** What serving one deployment entry needs: the cluster's arguments, one shape for both. */
export type ServeEntryArgs = WorkerClusterArgs;

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
