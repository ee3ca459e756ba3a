/**
 * Loading a deployment file (YAML, or JSON, which YAML reads too): parse, expand `${VAR}`
 * references, validate with {@link DeploymentFileSchema}, run the cross checks and resolve each
 * entrypoint. Every problem is collected and reported at once as `file:line: what is wrong: what
 * to do`. Nothing is started by loading.
 *
 * @see docs/deployment.md
 */
import path from "node:path";
import { LineCounter, parseDocument } from "yaml";
import {
  DeploymentFileSchema,
  SERVER_NAME_PATTERN,
  type DeploymentNode,
  type ServerKind,
} from "../wire/deployment.js";
import type { CheckpointSettings, TelemetrySettings, TlsSettings } from "../wire/settings.js";
import {
  checkableServers,
  duplicateProblems,
  nodeProblems,
  portProblems,
  urlProblems,
  referenceProblems,
  serverNameProblem,
  type LineOf,
} from "./check.js";
import { EntrypointError, resolveEntrypoint } from "./entrypoint.js";
import { DeploymentFileError, type DeploymentProblem } from "./errors.js";
import { expandDocument } from "./expand.js";
import { readDeploymentText } from "./read-text.js";
import { issueProblems, type IssueContext } from "./issues.js";
import { locate } from "./positions.js";

/** One server of a loaded deployment, with its entrypoint resolved to a module file. */
export interface LoadedServer {
  readonly name: string;
  readonly kind: ServerKind;
  /** Absolute path of the module whose default export is the server. */
  readonly entrypoint: string;
  /** The node it runs on, or null in a deployment without nodes. */
  readonly node: string | null;
  /** The address it binds: its own `host`, else its node's, else 127.0.0.1. */
  readonly host: string;
  /** 0: the launcher picks a free port. */
  readonly port: number;
  /** The URL others reach it at, when the file gives one (else built from host and port). */
  readonly url: string | null;
  readonly num_workers: number;
  /** Extra Node.js flags of the server's process. */
  readonly node_args: readonly string[];
  readonly config: Record<string, unknown>;
  /**
   * The secret signing the server's session cookies, or null for the default. Kept out of the
   * resolved deployment: only this server's process receives it.
   */
  readonly session_secret: string | null;
  /** The line of the server's name in the file. */
  readonly line: number;
}

/** A validated deployment file. */
export interface LoadedDeployment {
  /** Absolute path of the file. */
  readonly file: string;
  /** Its directory: entrypoints and the default state directory are relative to it. */
  readonly dir: string;
  /** The `checkpoint:` block, or null when absent (checkpointing off). */
  readonly checkpoint: CheckpointSettings | null;
  /** The `telemetry:` block, or null when absent (the defaults). */
  readonly telemetry: TelemetrySettings | null;
  /** The `tls:` block with its paths made absolute, or null: plain HTTP. */
  readonly tls: TlsSettings | null;
  /** The `nodes:` block, or null in a deployment on one machine. */
  readonly nodes: Readonly<Record<string, DeploymentNode>> | null;
  /** In file order. */
  readonly servers: Readonly<Record<string, LoadedServer>>;
}

/** Options of {@link loadDeploymentFile}. */
export interface LoadOptions {
  /** Variables `${VAR}` expands from. @default process.env */
  readonly env?: NodeJS.ProcessEnv;
  /** Resolve each entrypoint and report those that cannot be found. @default true */
  readonly checkEntrypoints?: boolean;
  /** The directory a relative `file` is resolved against (it is still shown as given). @default process.cwd() */
  readonly cwd?: string;
}

/** The `tls:` block with every path resolved against the deployment file's directory. */
function absoluteTls(tls: TlsSettings, dir: string): TlsSettings {
  const resolve = (file: string | null): string | null =>
    file === null ? null : path.resolve(dir, file);
  return {
    cert_file: path.resolve(dir, tls.cert_file),
    key_file: path.resolve(dir, tls.key_file),
    ca_file: resolve(tls.ca_file),
    client_ca_file: resolve(tls.client_ca_file),
  };
}

/**
 * Loads and checks a deployment file. Throws {@link DeploymentFileError} listing every problem
 * found, each with its line and what to do.
 *
 * @example
 * const deployment = loadDeploymentFile("deployment.yaml");
 * console.log(Object.keys(deployment.servers));
 */
export function loadDeploymentFile(file: string, options: LoadOptions = {}): LoadedDeployment {
  const absolute = path.resolve(options.cwd ?? process.cwd(), file);
  const dir = path.dirname(absolute);
  const text = readDeploymentText(file, absolute);

  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, uniqueKeys: true, prettyErrors: false });
  // Syntax errors stop here; duplicate keys are reported with the other problems.
  const syntax = doc.errors.filter((error) => error.code !== "DUPLICATE_KEY");
  if (syntax.length > 0) {
    throw new DeploymentFileError(
      file,
      syntax.map((error) => ({
        line: lines.linePos(error.pos[0]).line,
        path: "",
        message: `not valid YAML or JSON: ${error.message.split("\n")[0]}`,
      })),
    );
  }
  const problems: DeploymentProblem[] = duplicateProblems(doc, lines);
  const expansion = expandDocument(doc, lines, options.env ?? process.env);
  problems.push(...expansion.problems);

  let data: unknown;
  try {
    data = doc.toJS({ maxAliasCount: 1000 });
  } catch (error) {
    // e.g. an alias bomb: yaml refuses to expand it, and the file names nothing usable.
    throw new DeploymentFileError(file, [
      {
        line: 1,
        path: "",
        message: `cannot read the document: ${(error as Error).message}; write the servers out without YAML aliases`,
      },
    ]);
  }
  const at: LineOf = (segments) => locate(doc, lines, segments).line;
  const parsed = DeploymentFileSchema.safeParse(data ?? {});
  if (!parsed.success) {
    const context: IssueContext = {
      doc,
      lines,
      data,
      expandedNodes: expansion.expandedNodes,
      failedNodes: expansion.failedNodes,
    };
    for (const issue of parsed.error.issues) problems.push(...issueProblems(issue, context));
  }

  // The cross checks run on a refused file too, on what of it can be read, so one pass lists
  // every problem rather than the schema's first and the rest after a fix.
  const checked = checkableServers(data);
  problems.push(...referenceProblems(checked, at));
  problems.push(...portProblems(checked, at));
  problems.push(...nodeProblems(data, checked, at));
  problems.push(...urlProblems(data, at));
  const entrypoints: Record<string, string> = {};
  for (const [name, server] of Object.entries(checked)) {
    const badName = serverNameProblem(name, at);
    if (badName !== null && SERVER_NAME_PATTERN.test(name)) problems.push(badName);
    if (server.entrypoint === null) continue;
    entrypoints[name] = path.resolve(dir, server.entrypoint);
    // A `${VAR}` that could not be expanded is reported already; its file is not looked for.
    const node = locate(doc, lines, ["servers", name, "entrypoint"]).node;
    if (!(options.checkEntrypoints ?? true) || expansion.failedNodes.has(node)) continue;
    try {
      entrypoints[name] = resolveEntrypoint(server.entrypoint, dir);
    } catch (error) {
      if (!(error instanceof EntrypointError)) throw error;
      problems.push({
        line: at(["servers", name, "entrypoint"]),
        path: `servers.${name}.entrypoint`,
        message: error.message,
      });
    }
  }
  if (!parsed.success || problems.length > 0) throw new DeploymentFileError(file, problems);

  const deployment = parsed.data;
  const nodes = deployment.nodes ?? null;
  const servers: Record<string, LoadedServer> = {};
  for (const [name, server] of Object.entries(deployment.servers)) {
    const node = server.node === null ? undefined : nodes?.[server.node];
    servers[name] = {
      name,
      kind: server.kind,
      entrypoint: entrypoints[name] ?? path.resolve(dir, server.entrypoint),
      node: server.node,
      host: server.host ?? node?.host ?? "127.0.0.1",
      port: server.port,
      url: server.url,
      num_workers: server.num_workers,
      node_args: server.node_args,
      config: server.config,
      session_secret: server.session_secret,
      line: at(["servers", name]),
    };
  }
  return {
    file: absolute,
    dir,
    checkpoint: deployment.checkpoint ?? null,
    telemetry: deployment.telemetry ?? null,
    tls: deployment.tls === undefined ? null : absoluteTls(deployment.tls, dir),
    nodes,
    servers,
  };
}
