/**
 * The checks the schema cannot make: duplicate keys and server names, references to servers
 * that do not exist, ports given twice, server names that cannot name a directory.
 */
import { visit, type Document, type LineCounter } from "yaml";
import { didYouMean } from "../util/did-you-mean.js";
import {
  DeploymentNodeSchema,
  DeploymentServerSchema,
  SERVER_REFERENCE_SUFFIX,
} from "../wire/deployment.js";
import type { DeploymentProblem } from "./errors.js";
import { keyText, pathText, startOf } from "./positions.js";

/** The line of the key (or item) at a path in the file. */
export type LineOf = (segments: readonly PropertyKey[]) => number;

/** What the cross checks read of one server. */
export interface CheckedServer {
  /** null when the file gives none the schema accepts: nothing to look for. */
  readonly entrypoint: string | null;
  /** The node it runs on, or null (none given, or not one the schema accepts). */
  readonly node: string | null;
  /** The address it binds: its own `host`, else its node's, else 127.0.0.1; "" when not valid. */
  readonly host: string;
  /** 0 (no fixed port to compare) when the file gives none the schema accepts. */
  readonly port: number;
  readonly config: Readonly<Record<string, unknown>>;
}

/**
 * The servers of a file the schema refused, as far as the cross checks can read them: each field
 * is taken when it validates on its own, so that one server's bad `kind` does not hide another's
 * missing entrypoint or dangling reference (every problem is reported at once).
 */
export function checkableServers(data: unknown): Record<string, CheckedServer> {
  const servers = (data as { servers?: unknown } | null)?.servers;
  if (servers === null || typeof servers !== "object" || Array.isArray(servers)) return {};
  const nodes = checkableNodes(data);
  const fields = DeploymentServerSchema.shape;
  const checked: Record<string, CheckedServer> = {};
  for (const [name, raw] of Object.entries(servers)) {
    const server = (raw !== null && typeof raw === "object" ? raw : {}) as Record<string, unknown>;
    const entrypoint = fields.entrypoint.safeParse(server.entrypoint);
    const node = fields.node.safeParse(server.node);
    const host = fields.host.safeParse(server.host);
    const port = fields.port.safeParse(server.port);
    const config = fields.config.safeParse(server.config);
    const nodeName = node.success ? node.data : null;
    checked[name] = {
      entrypoint: entrypoint.success ? entrypoint.data : null,
      node: nodeName,
      host: host.success
        ? (host.data ?? (nodeName === null ? null : nodes[nodeName]?.host) ?? "127.0.0.1")
        : "",
      // A port on a host that is not valid is compared with nothing.
      port: port.success && host.success ? port.data : 0,
      config: config.success ? config.data : {},
    };
  }
  return checked;
}

/** The nodes of a file, as far as they can be read: name → host ("" when not valid). */
export function checkableNodes(data: unknown): Record<string, { readonly host: string }> {
  const nodes = (data as { nodes?: unknown } | null)?.nodes;
  if (nodes === null || typeof nodes !== "object" || Array.isArray(nodes)) return {};
  const checked: Record<string, { host: string }> = {};
  for (const [name, raw] of Object.entries(nodes)) {
    const host = DeploymentNodeSchema.shape.host.safeParse(
      (raw as { host?: unknown } | null)?.host,
    );
    checked[name] = { host: host.success ? host.data : "" };
  }
  return checked;
}

/**
 * With `nodes:`, every server names one of them and has a fixed port: the other machines reach
 * it by its node's host and that port, with nothing exchanged at startup. Without `nodes:`, no
 * server names a node.
 */
export function nodeProblems(
  data: unknown,
  servers: Readonly<Record<string, Pick<CheckedServer, "node" | "port">>>,
  at: LineOf,
): DeploymentProblem[] {
  const declared = (data as { nodes?: unknown } | null)?.nodes !== undefined;
  const nodes = Object.keys(checkableNodes(data));
  const problems: DeploymentProblem[] = [];
  const raw = ((data as { servers?: Record<string, { port?: unknown }> } | null)?.servers ??
    {}) as Record<string, { port?: unknown } | null>;
  for (const [name, server] of Object.entries(servers)) {
    if (!declared) {
      if (server.node !== null) {
        problems.push({
          line: at(["servers", name, "node"]),
          path: `servers.${name}.node`,
          message: `server ${name} names node '${server.node}', but the deployment has no nodes: block: declare the nodes (nodes: { ${server.node}: { host: ... } }) or drop the node`,
        });
      }
      continue;
    }
    if (server.node === null) {
      problems.push({
        line: at(["servers", name]),
        path: `servers.${name}.node`,
        message: `server ${name} runs on no node: the deployment has nodes (${nodes.join(", ")}), so every server says which it runs on (node: ${nodes[0] ?? "NAME"})`,
      });
      continue;
    }
    if (!nodes.includes(server.node)) {
      problems.push({
        line: at(["servers", name, "node"]),
        path: `servers.${name}.node`,
        message: `server ${name} names node '${server.node}', which the deployment does not define${didYouMean(server.node, nodes)} (nodes: ${nodes.join(", ")}): fix the name or add the node`,
      });
    }
    const port = raw[name]?.port;
    if (port === undefined || port === 0) {
      problems.push({
        line: at(port === undefined ? ["servers", name] : ["servers", name, "port"]),
        path: `servers.${name}.port`,
        message: `server ${name} needs a fixed port: on a deployment with nodes, other machines reach it at its node's host and port, which nothing chooses for them (e.g. port: 8000)`,
      });
    }
  }
  return problems;
}

/**
 * An advertised `url` must agree with the rest of the file: https exactly when there is a `tls:`
 * block (the server serves one or the other), and a fixed port (a port chosen at startup would
 * not be the one the URL names).
 */
export function urlProblems(data: unknown, at: LineOf): DeploymentProblem[] {
  const file = (data ?? {}) as { tls?: unknown; servers?: unknown };
  const servers = file.servers;
  if (servers === null || typeof servers !== "object" || Array.isArray(servers)) return [];
  const tls = file.tls !== undefined && file.tls !== null;
  const problems: DeploymentProblem[] = [];
  for (const [name, raw] of Object.entries(servers as Record<string, unknown>)) {
    const server = (raw ?? {}) as { url?: unknown; port?: unknown };
    if (typeof server.url !== "string" || !/^https?:\/\//.test(server.url)) continue;
    const https = server.url.startsWith("https://");
    if (https !== tls) {
      problems.push({
        line: at(["servers", name, "url"]),
        path: `servers.${name}.url`,
        message: tls
          ? `server ${name}'s url is http://, but the deployment has a tls: block, so it serves https: write https://`
          : `server ${name}'s url is https://, but the deployment has no tls: block, so it serves plain http: add a tls: block or write http://`,
      });
    }
    if (server.port === undefined || server.port === 0) {
      problems.push({
        line: at(["servers", name, "url"]),
        path: `servers.${name}.port`,
        message: `server ${name} gives a url but no fixed port: the port chosen at startup would not be the one the url reaches (e.g. port: 8000)`,
      });
    }
  }
  return problems;
}

/**
 * Duplicate keys, which YAML reports as errors: a duplicate server name is named as such, with
 * the line of its first definition.
 */
export function duplicateProblems(doc: Document, lines: LineCounter): DeploymentProblem[] {
  const problems: DeploymentProblem[] = [];
  const servers = doc.get("servers", true);
  for (const error of doc.errors) {
    if (error.code !== "DUPLICATE_KEY") continue;
    const offset = error.pos[0];
    const line = lines.linePos(offset).line;
    // Find the map holding the duplicated key to name it and its first definition.
    let described: DeploymentProblem | null = null;
    visit(doc, {
      Map(_key, map) {
        const index = map.items.findIndex((pair) => startOf(pair.key) === offset);
        if (index < 0) return undefined;
        const pair = map.items[index];
        const name = keyText(pair?.key);
        const first = map.items.find((item) => keyText(item.key) === name);
        const firstLine = lines.linePos(startOf(first?.key) ?? offset).line;
        described =
          map === servers
            ? {
                line,
                path: `servers.${name}`,
                message: `duplicate server name '${name}' (first defined on line ${firstLine}): rename one of them`,
              }
            : {
                line,
                path: name,
                message: `duplicate key '${name}' (first on line ${firstLine}): keep only one`,
              };
        return visit.BREAK;
      },
    });
    problems.push(
      described ?? { line, path: "", message: "duplicate key: keys of a mapping must be unique" },
    );
  }
  return problems;
}

/**
 * Keys ending in {@link SERVER_REFERENCE_SUFFIX} anywhere in a server's `config` must name a
 * server of this deployment.
 */
export function referenceProblems(
  servers: Readonly<Record<string, Pick<CheckedServer, "config">>>,
  at: LineOf,
): DeploymentProblem[] {
  const names = Object.keys(servers);
  const problems: DeploymentProblem[] = [];
  const walk = (value: unknown, segments: readonly PropertyKey[]): void => {
    if (Array.isArray(value)) {
      value.forEach((item, index) => walk(item, [...segments, index]));
      return;
    }
    if (value === null || typeof value !== "object") return;
    for (const [key, item] of Object.entries(value)) {
      const here = [...segments, key];
      if (key.endsWith(SERVER_REFERENCE_SUFFIX) && item !== null) {
        if (typeof item !== "string") {
          problems.push({
            line: at(here),
            path: pathText(here),
            message: `${pathText(here)} must name a server of this deployment (a string), got ${JSON.stringify(item)}`,
          });
        } else if (!Object.hasOwn(servers, item)) {
          problems.push({
            line: at(here),
            path: pathText(here),
            message:
              `${pathText(here)} names server '${item}', which this deployment does not define` +
              `${didYouMean(item, names)} ` +
              `(servers: ${names.join(", ")}): fix the name or add the server`,
          });
        }
        continue;
      }
      walk(item, here);
    }
  };
  for (const [name, server] of Object.entries(servers)) {
    walk(server.config, ["servers", name, "config"]);
  }
  return problems;
}

/**
 * A fixed port (not 0) may be given to one server per host, or per node: two servers of one
 * node cannot share a port whatever addresses they bind.
 */
export function portProblems(
  servers: Readonly<Record<string, Pick<CheckedServer, "host" | "port" | "node">>>,
  at: LineOf,
): DeploymentProblem[] {
  const problems: DeploymentProblem[] = [];
  const taken = new Map<string, string>();
  for (const [name, server] of Object.entries(servers)) {
    if (server.port === 0) continue;
    const where = server.node === null ? server.host : `node ${server.node}`;
    const key = `${where}:${server.port}`;
    const other = taken.get(key);
    if (other !== undefined) {
      problems.push({
        line: at(["servers", name, "port"]),
        path: `servers.${name}.port`,
        message: `port ${server.port} on ${where} is also given to server ${other} (line ${at(["servers", other, "port"])}): give each server its own port${server.node === null ? ", or port: 0" : ""}`,
      });
    } else {
      taken.set(key, name);
    }
  }
  return problems;
}

/** A server name must start with a letter or a digit: it names a checkpoint directory. */
export function serverNameProblem(name: string, at: LineOf): DeploymentProblem | null {
  if (/^[A-Za-z0-9]/.test(name)) return null;
  return {
    line: at(["servers", name]),
    path: `servers.${name}`,
    message: `server name '${name}' must start with a letter or a digit (it names a checkpoint directory): rename it`,
  };
}
