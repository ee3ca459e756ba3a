/**
 * A participant that did not answer a coordination step: where it runs (its node and the host of
 * its URL) and what to say about it, so a lost or frozen machine is named as such instead of as a
 * bare timeout.
 */
import type { ResolvedDeployment } from "../wire/deployment.js";
import { ServerUnreachableError, type UnreachableReason } from "./errors.js";

/** Where a server runs, as the controller reaches it. */
export interface ServerLocation {
  /** Its node (of the deployment's `nodes:`), or null in a deployment without nodes. */
  readonly node: string | null;
  /** The host of its URL. */
  readonly host: string;
  /** `host:port` of its URL. */
  readonly address: string;
}

/** A participant whose host did not answer: where it runs and why the call failed. */
export interface UnreachableParticipant extends ServerLocation {
  readonly reason: UnreachableReason;
}

/** The reasons that say the server's process or machine is gone, stopped or cut off. */
const HOST_LOSS: ReadonlySet<UnreachableReason> = new Set([
  "timeout",
  "connect",
  "connection_lost",
]);

/** Whether `error` says the server's process or machine is gone, frozen or cut off. */
export function isHostLoss(error: unknown): error is ServerUnreachableError {
  return error instanceof ServerUnreachableError && HOST_LOSS.has(error.reason);
}

/** Where `server` runs: its node and the host of its URL. */
export function locateServer(deployment: ResolvedDeployment, server: string): ServerLocation {
  const entry = Object.hasOwn(deployment.servers, server) ? deployment.servers[server] : undefined;
  if (entry === undefined) return { node: null, host: "?", address: "?" };
  const url = new URL(entry.url);
  const port = url.port === "" ? (url.protocol === "https:" ? "443" : "80") : url.port;
  return { node: entry.node ?? null, host: url.hostname, address: `${url.hostname}:${port}` };
}

/** `policy (node gpu, 10.0.0.2:8001)`, or `policy (127.0.0.1:8001)` without nodes. */
export function locatedName(server: string, location: ServerLocation): string {
  const node = location.node === null ? "" : `node ${location.node}, `;
  return `${server} (${node}${location.address})`;
}

/** Seconds for people: `30 s`, `2.5 s`. */
function seconds(ms: number): string {
  const s = Math.max(0, ms) / 1000;
  return `${s >= 10 ? Math.round(s) : Math.round(s * 10) / 10} s`;
}

/**
 * What a host-loss failure of `operation` means, for a failure table keyed by server name:
 * `no reply within the prepare deadline (30 s): is host 10.0.0.2 down or frozen?`.
 * `stepMs` is the time the step had, from its start to its deadline.
 */
export function describeHostLoss(
  error: ServerUnreachableError,
  location: ServerLocation,
  operation: string,
  stepMs: number,
): string {
  const host = location.host;
  switch (error.reason) {
    case "timeout":
      return `no reply within the ${operation} deadline (${seconds(stepMs)}) — is host ${host} down or frozen?`;
    case "connect":
      return `cannot connect — is the server down, or host ${host}?`;
    default:
      return `the connection dropped before the reply — did the server or host ${host} go down?`;
  }
}
