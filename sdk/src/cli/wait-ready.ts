/**
 * `--wait-ready`: a controller started beside servers that are still starting on other machines
 * (a Slurm job's batch step, a Kubernetes Job) waits until every server of the deployment
 * answers `GET /health`, bounded, saying every few seconds which it still waits for, and naming
 * at the end the ones that never answered and why.
 *
 * @see docs/multi-host.md
 */
import type { ServerClient } from "../client/server-client.js";
import { formatDuration } from "./duration.js";
import { CliError, describeError, type Io } from "./output.js";

/** Options of {@link waitReady}. */
export interface WaitReadyOptions {
  /** How long to wait in all. */
  readonly timeoutMs: number;
  /** Between progress lines. @default 5_000 */
  readonly progressEveryMs?: number;
  /** Between probes of a server that did not answer. @default 250 */
  readonly retryMs?: number;
  /** Stops the wait early (the command was interrupted). */
  readonly signal?: AbortSignal;
}

/** Where a server stands while the controller waits for it. */
function where(client: ServerClient, name: string): string {
  const server = client.server(name);
  const node = server.node ?? null;
  return node === null ? server.url : `${server.url}, node ${node}`;
}

/**
 * Waits until every server `client` knows answers `GET /health` with 2xx; throws a
 * {@link CliError} naming each that did not within `timeoutMs`, with its URL, node and last
 * failure. Probes run in parallel; a server that answered is not probed again.
 */
export async function waitReady(
  client: ServerClient,
  io: Io,
  options: WaitReadyOptions,
): Promise<void> {
  const started = Date.now();
  const end = started + options.timeoutMs;
  const retryMs = options.retryMs ?? 250;
  const progressEveryMs = options.progressEveryMs ?? 5_000;
  const waiting = new Map<string, string>(
    client.serverNames().map((name) => [name, "not probed yet"]),
  );
  const total = waiting.size;
  let nextProgress = started + progressEveryMs;
  const progress = setInterval(() => {
    if (Date.now() < nextProgress || waiting.size === 0) return;
    nextProgress += progressEveryMs;
    io.err(
      `gym: waiting for ${waiting.size} of ${total} servers to answer /health ` +
        `(${[...waiting.keys()].join(", ")}): ${formatDuration(Date.now() - started)} of ${formatDuration(options.timeoutMs)}`,
    );
  }, 250);
  progress.unref();
  try {
    await Promise.all(
      [...waiting.keys()].map(async (name) => {
        for (;;) {
          if (options.signal?.aborted === true) return;
          const left = end - Date.now();
          if (left <= 0) return;
          try {
            await client.get(name, "/health", {
              timeoutMs: Math.min(2_000, left),
              ...(options.signal === undefined ? {} : { signal: options.signal }),
            });
            waiting.delete(name);
            return;
          } catch (error) {
            waiting.set(name, describeError(error));
          }
          const pause = Math.min(retryMs, Math.max(0, end - Date.now()));
          await new Promise<void>((resolve) => setTimeout(resolve, pause));
        }
      }),
    );
  } finally {
    clearInterval(progress);
  }
  if (waiting.size === 0) {
    if (Date.now() - started >= progressEveryMs) {
      io.err(`gym: all ${total} servers answer /health (${formatDuration(Date.now() - started)})`);
    }
    return;
  }
  if (options.signal?.aborted === true)
    throw new CliError("interrupted while waiting for the servers");
  throw new CliError(
    `${waiting.size} of ${total} servers did not answer /health within ${formatDuration(options.timeoutMs)}: ` +
      [...waiting].map(([name, why]) => `${name} (${where(client, name)}): ${why}`).join("; "),
    "check that each node's servers were started (`gym serve FILE --node NAME` on every machine), " +
      "that the nodes' hosts in the deployment file are the addresses this machine reaches them at, " +
      "and their logs (.gym/nodes/<node>/logs/); or wait longer with --wait-ready",
  );
}
