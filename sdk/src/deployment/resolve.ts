/**
 * A loaded deployment resolved for its processes: each server's URL, once its port is known.
 */
import type { ResolvedDeployment } from "../wire/deployment.js";
import type { LoadedDeployment } from "./load.js";

/**
 * The URL other processes reach a server at; a wildcard host is reached through loopback.
 * `scheme` is `https` when the deployment has a `tls:` block.
 */
export function serverUrl(host: string, port: number, scheme: "http" | "https" = "http"): string {
  const reachable = host === "0.0.0.0" ? "127.0.0.1" : host === "::" ? "::1" : host;
  const bracketed = reachable.includes(":") ? `[${reachable}]` : reachable;
  return `${scheme}://${bracketed}:${port}`;
}

/**
 * The deployment every server process receives, given each server's actual port (`ports`
 * must hold a non-zero port for every server).
 */
export function resolveDeployment(
  loaded: LoadedDeployment,
  ports: Readonly<Record<string, number>>,
): ResolvedDeployment {
  const servers: ResolvedDeployment["servers"] = {};
  const scheme = loaded.tls === null ? "http" : "https";
  for (const [name, server] of Object.entries(loaded.servers)) {
    const port = ports[name] ?? server.port;
    if (port === 0) throw new Error(`no port chosen for server ${name}`);
    // On a node, a server bound to a wildcard (or to its node's host) is reached at the node's
    // host; one bound to an address of its own is reached there.
    const nodeHost = server.node === null ? null : (loaded.nodes?.[server.node]?.host ?? null);
    const wildcard = server.host === "0.0.0.0" || server.host === "::";
    servers[name] = {
      kind: server.kind,
      url:
        server.url ?? serverUrl(wildcard ? (nodeHost ?? server.host) : server.host, port, scheme),
      host: server.host,
      port,
      ...(server.node === null ? {} : { node: server.node }),
      num_workers: server.num_workers,
      config: server.config,
    };
  }
  return {
    checkpoint: loaded.checkpoint,
    ...(loaded.telemetry === null ? {} : { telemetry: loaded.telemetry }),
    ...(loaded.tls === null ? {} : { tls: loaded.tls }),
    servers,
  };
}
