/**
 * A loaded deployment resolved for its processes: each server's URL, once its port is known.
 */
import type { ResolvedDeployment } from "../wire/deployment.js";
import type { LoadedDeployment } from "./load.js";

/** The URL other processes reach a server at; a wildcard host is reached through loopback. */
export function serverUrl(host: string, port: number): string {
  const reachable = host === "0.0.0.0" ? "127.0.0.1" : host === "::" ? "::1" : host;
  const bracketed = reachable.includes(":") ? `[${reachable}]` : reachable;
  return `http://${bracketed}:${port}`;
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
  for (const [name, server] of Object.entries(loaded.servers)) {
    const port = ports[name] ?? server.port;
    if (port === 0) throw new Error(`no port chosen for server ${name}`);
    servers[name] = {
      kind: server.kind,
      url: serverUrl(server.host, port),
      host: server.host,
      port,
      num_workers: server.num_workers,
      config: server.config,
    };
  }
  return {
    checkpoint: loaded.checkpoint,
    ...(loaded.telemetry === null ? {} : { telemetry: loaded.telemetry }),
    servers,
  };
}
