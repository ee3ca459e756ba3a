/**
 * Loading a deployment file (YAML, or JSON, which YAML reads too): `${VAR}` and
 * `${VAR:-default}` expansion, validation with {@link DeploymentFileSchema}, the cross checks the
 * schema cannot make (duplicate names, references to servers that do not exist, clashing ports,
 * entrypoints that cannot be found), and every problem reported as `file:line: what is wrong:
 * what to do`. Nothing is started by loading.
 *
 * @see docs/deployment.md
 */
import { readFileSync, statSync } from "node:fs";
import path from "node:path";
import {
  LineCounter,
  isMap,
  isScalar,
  isSeq,
  parse as parseYaml,
  parseDocument,
  visit,
  type Document,
  type Scalar,
} from "yaml";
import type { z } from "zod";
import {
  DeploymentFileSchema,
  DeploymentServerSchema,
  SERVER_KINDS,
  SERVER_REFERENCE_SUFFIX,
  type DeploymentFile,
  type ResolvedDeployment,
  type ServerKind,
} from "../wire/deployment.js";
import { CheckpointSettingsSchema, type CheckpointSettings } from "../wire/settings.js";

/** One thing wrong with a deployment file. */
export interface DeploymentProblem {
  /** 1-based line in the file, or null when the problem has no place (an unreadable file). */
  readonly line: number | null;
  /** Where in the document, e.g. `servers.counter.kind`; `""` for the whole file. */
  readonly path: string;
  /** What is wrong and what to do about it. */
  readonly message: string;
}

/**
 * A deployment file that cannot be used; `problems` lists each with its line. The `gym` command
 * prints the message with {@link DEPLOYMENT_FILE_HINT}.
 */
export class DeploymentFileError extends Error {
  override readonly name = "DeploymentFileError";
  constructor(
    readonly file: string,
    readonly problems: readonly DeploymentProblem[],
  ) {
    const sorted = [...problems].sort((a, b) => (a.line ?? 0) - (b.line ?? 0));
    const lines = sorted.map(
      (problem) =>
        `  ${file}${problem.line === null ? "" : `:${problem.line}`}: ${problem.message}`,
    );
    super(
      `${file}: ${problems.length} problem${problems.length === 1 ? "" : "s"}; nothing was started\n${lines.join("\n")}`,
    );
  }
}

/** What to do about a {@link DeploymentFileError}, as the `gym` command says it. */
export const DEPLOYMENT_FILE_HINT =
  "fix what each line above names, then run the command again (see docs/deployment.md for the format)";

/** One server of a loaded deployment, with its entrypoint resolved to a module file. */
export interface LoadedServer {
  readonly name: string;
  readonly kind: ServerKind;
  /** Absolute path of the module whose default export is the server. */
  readonly entrypoint: string;
  readonly host: string;
  /** 0: the launcher picks a free port. */
  readonly port: number;
  readonly num_workers: number;
  /** Extra Node.js flags of the server's process. */
  readonly node_args: readonly string[];
  readonly config: Record<string, unknown>;
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

// ---------------------------------------------------------------------------------------------
// Variable expansion
// ---------------------------------------------------------------------------------------------

const REFERENCE = /\$\$|\$\{([^}]*)\}/g;
const VARIABLE = /^([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?$/s;

/** The outcome of {@link expandVariables}. */
export interface Expansion {
  readonly value: string;
  /** Whether any `${...}` was replaced. */
  readonly expanded: boolean;
  /** What could not be expanded, with what to do. */
  readonly problems: readonly string[];
}

/**
 * Expands `${VAR}` (must be set) and `${VAR:-default}` (the default when VAR is unset or
 * empty); `$$` is a literal `$`.
 */
export function expandVariables(text: string, env: NodeJS.ProcessEnv): Expansion {
  const problems: string[] = [];
  let expanded = false;
  const value = text.replace(REFERENCE, (whole, inner: string | undefined) => {
    if (whole === "$$") return "$";
    expanded = true;
    const match = VARIABLE.exec(inner ?? "");
    if (match === null) {
      problems.push(
        `${whole} is not a variable reference: write \${NAME} or \${NAME:-default} (NAME: letters, digits, _), or $$ for a literal $`,
      );
      return "";
    }
    const [, name = "", fallback] = match;
    const set = env[name];
    if (fallback !== undefined) return set === undefined || set === "" ? fallback : set;
    if (set === undefined) {
      problems.push(
        `\${${name}} is not set: export ${name}, or give a default: \${${name}:-value}`,
      );
      return "";
    }
    return set;
  });
  return { value, expanded, problems };
}

// ---------------------------------------------------------------------------------------------
// Positions
// ---------------------------------------------------------------------------------------------

function keyText(node: unknown): string {
  if (isScalar(node)) return String(node.value);
  return String(node);
}

function startOf(node: unknown): number | null {
  const range = (node as { range?: [number, number, number] } | null)?.range;
  return range === undefined ? null : range[0];
}

/** Finds the deepest node along `segments` and the line of the key (or item) that holds it. */
function locate(
  doc: Document,
  lines: LineCounter,
  segments: readonly PropertyKey[],
): { line: number; node: unknown; found: boolean } {
  let node: unknown = doc.contents;
  let offset = startOf(node);
  let found = true;
  for (const segment of segments) {
    if (isMap(node)) {
      // The last pair wins, as when the document is read.
      const pair = node.items.findLast((item) => keyText(item.key) === String(segment));
      if (pair === undefined) {
        found = false;
        break;
      }
      offset = startOf(pair.key) ?? startOf(pair.value) ?? offset;
      node = pair.value;
    } else if (isSeq(node)) {
      const item = node.items[Number(segment)];
      if (item === undefined) {
        found = false;
        break;
      }
      offset = startOf(item) ?? offset;
      node = item;
    } else {
      found = false;
      break;
    }
  }
  return { line: offset === null ? 1 : lines.linePos(offset).line, node, found };
}

function pathText(segments: readonly PropertyKey[]): string {
  return segments.map(String).join(".");
}

function valueAt(
  data: unknown,
  segments: readonly PropertyKey[],
): { present: boolean; value: unknown } {
  let value: unknown = data;
  for (const segment of segments) {
    if (value === null || typeof value !== "object" || !Object.hasOwn(value, segment)) {
      return { present: false, value: undefined };
    }
    value = (value as Record<PropertyKey, unknown>)[segment];
  }
  return { present: true, value };
}

// ---------------------------------------------------------------------------------------------
// Schema issues → problems
// ---------------------------------------------------------------------------------------------

const ROOT_KEYS = Object.keys(DeploymentFileSchema.shape);
const SERVER_KEYS = Object.keys(DeploymentServerSchema.shape);
const CHECKPOINT_KEYS = Object.keys(CheckpointSettingsSchema.shape);

function allowedKeys(segments: readonly PropertyKey[]): readonly string[] | null {
  if (segments.length === 0) return ROOT_KEYS;
  if (segments.length === 1 && segments[0] === "checkpoint") return CHECKPOINT_KEYS;
  if (segments.length === 2 && segments[0] === "servers") return SERVER_KEYS;
  return null;
}

function describeWhere(segments: readonly PropertyKey[]): string {
  if (segments.length === 0) return "at the top level";
  if (segments.length === 2 && segments[0] === "servers") return `in server ${String(segments[1])}`;
  return `in ${pathText(segments)}`;
}

interface IssueContext {
  readonly doc: Document;
  readonly lines: LineCounter;
  readonly data: unknown;
  readonly expandedNodes: ReadonlySet<unknown>;
  /** Nodes whose expansion failed: already reported, so their schema issues are not. */
  readonly failedNodes: ReadonlySet<unknown>;
}

function issueProblems(issue: z.core.$ZodIssue, context: IssueContext): DeploymentProblem[] {
  const segments = issue.path;
  if (context.failedNodes.has(locate(context.doc, context.lines, segments).node)) return [];
  const at = (where: readonly PropertyKey[]): number =>
    locate(context.doc, context.lines, where).line;

  if (issue.code === "unrecognized_keys") {
    const allowed = allowedKeys(segments);
    return issue.keys.map((key) => ({
      line: at([...segments, key]),
      path: pathText([...segments, key]),
      message:
        `unknown key '${key}' ${describeWhere(segments)}: remove it or fix its spelling` +
        (allowed === null ? "" : ` (allowed: ${allowed.join(", ")})`),
    }));
  }

  if (issue.code === "invalid_key" && segments[0] === "servers") {
    const name = String(segments[1]);
    return [
      {
        line: at(segments),
        path: pathText(segments),
        message: `bad server name '${name}': a name holds only letters, digits, _ and -; rename it`,
      },
    ];
  }

  const { present, value } = valueAt(context.data, segments);
  const line = at(segments);
  const where = pathText(segments);
  const last = segments[segments.length - 1];

  if (where === "checkpoint.control_auth_token" && issue.code === "custom") {
    return [
      {
        line,
        path: where,
        message:
          "checkpoint.control_auth_token is required and not blank (empty or whitespace only) " +
          "when checkpoint.enabled is true: set it (e.g. control_auth_token: ${GYM_CONTROL_TOKEN}) " +
          "or set enabled: false",
      },
    ];
  }

  if (!present && segments.length > 0) {
    const parent = pathText(segments.slice(0, -1)) || "the file";
    const choices =
      last === "kind" && segments[0] === "servers" ? ` (one of ${SERVER_KINDS.join(", ")})` : "";
    return [{ line, path: where, message: `${parent} has no ${String(last)}: add it${choices}` }];
  }

  if (segments[0] === "servers" && segments.length === 3 && last === "kind") {
    return [
      {
        line,
        path: where,
        message: `bad kind ${JSON.stringify(value)} for server ${String(segments[1])}: use one of ${SERVER_KINDS.join(", ")}`,
      },
    ];
  }

  const node = locate(context.doc, context.lines, segments).node;
  const quoteHint =
    context.expandedNodes.has(node) && issue.code === "invalid_type" && issue.expected === "string"
      ? ` (the value comes from a \${...} reference: quote it to keep it a string, e.g. "\${VAR}")`
      : "";
  return [
    {
      line,
      path: where,
      message: `${where === "" ? "the file" : where}: ${issue.message}${quoteHint}`,
    },
  ];
}

// ---------------------------------------------------------------------------------------------
// Entrypoints
// ---------------------------------------------------------------------------------------------

/** Module file extensions tried when an entrypoint names a file without one. */
const MODULE_EXTENSIONS = [".js", ".mjs", ".cjs", ".ts", ".mts", ".cts"];
/** Index files tried in a directory without package.json. */
const INDEX_FILES = ["index.js", "index.mjs", "index.ts", "index.mts", "main.js", "main.ts"];

function kindOf(file: string): "file" | "dir" | null {
  try {
    const stat = statSync(file);
    return stat.isDirectory() ? "dir" : stat.isFile() ? "file" : null;
  } catch {
    return null;
  }
}

/** An entrypoint that cannot be resolved; `message` says why and what to do. */
export class EntrypointError extends Error {
  override readonly name = "EntrypointError";
}

function exportTarget(exports: unknown): string | null {
  if (typeof exports === "string") return exports;
  if (Array.isArray(exports)) {
    for (const item of exports) {
      const target = exportTarget(item);
      if (target !== null) return target;
    }
    return null;
  }
  if (exports === null || typeof exports !== "object") return null;
  const record = exports as Record<string, unknown>;
  if ("." in record) return exportTarget(record["."]);
  for (const condition of ["import", "node", "default"]) {
    if (condition in record) {
      const target = exportTarget(record[condition]);
      if (target !== null) return target;
    }
  }
  return null;
}

function fromPackageDir(dir: string, shown: string): string {
  const manifestPath = path.join(dir, "package.json");
  if (kindOf(manifestPath) === "file") {
    let manifest: { exports?: unknown; main?: unknown };
    try {
      manifest = JSON.parse(readFileSync(manifestPath, "utf8")) as typeof manifest;
    } catch (error) {
      throw new EntrypointError(
        `entrypoint ${shown}: ${manifestPath} is not valid JSON (${(error as Error).message}): fix it`,
      );
    }
    const target =
      exportTarget(manifest.exports) ??
      (typeof manifest.main === "string" ? manifest.main : "index.js");
    const file = path.resolve(dir, target);
    if (kindOf(file) !== "file") {
      throw new EntrypointError(
        `entrypoint ${shown}: its package.json points at ${target}, which does not exist: ` +
          `build the package first (e.g. npm run build in ${dir})`,
      );
    }
    return file;
  }
  for (const index of INDEX_FILES) {
    const file = path.join(dir, index);
    if (kindOf(file) === "file") return file;
  }
  throw new EntrypointError(
    `entrypoint ${shown} is a directory with neither package.json nor ${INDEX_FILES.join("/")}: ` +
      "point it at the server module or its package",
  );
}

/**
 * Resolves an entrypoint relative to `baseDir` to a module file: a file as is (`.ts` allowed;
 * a missing extension is tried), a directory through its package.json (`exports`, then `main`)
 * or an index file, and a bare package name through `node_modules` upwards.
 */
export function resolveEntrypoint(entrypoint: string, baseDir: string): string {
  const direct = path.resolve(baseDir, entrypoint);
  const kind = kindOf(direct);
  if (kind === "file") return direct;
  if (kind === "dir") return fromPackageDir(direct, entrypoint);
  for (const extension of MODULE_EXTENSIONS) {
    if (kindOf(direct + extension) === "file") return direct + extension;
  }
  const bare = !entrypoint.startsWith(".") && !path.isAbsolute(entrypoint);
  if (bare) {
    for (let dir = baseDir; ; dir = path.dirname(dir)) {
      const candidate = path.join(dir, "node_modules", entrypoint);
      if (kindOf(candidate) === "dir") return fromPackageDir(candidate, entrypoint);
      if (path.dirname(dir) === dir) break;
    }
  }
  throw new EntrypointError(
    `entrypoint ${entrypoint} not found (looked for ${direct}${bare ? " and node_modules/" + entrypoint : ""}): ` +
      "fix the path; it is relative to the deployment file",
  );
}

// ---------------------------------------------------------------------------------------------
// Cross checks
// ---------------------------------------------------------------------------------------------

function referenceProblems(
  file: DeploymentFile,
  at: (segments: readonly PropertyKey[]) => number,
): DeploymentProblem[] {
  const names = Object.keys(file.servers);
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
        } else if (!Object.hasOwn(file.servers, item)) {
          problems.push({
            line: at(here),
            path: pathText(here),
            message:
              `${pathText(here)} names server '${item}', which this deployment does not define ` +
              `(servers: ${names.join(", ")}): fix the name or add the server`,
          });
        }
        continue;
      }
      walk(item, here);
    }
  };
  for (const [name, server] of Object.entries(file.servers)) {
    walk(server.config, ["servers", name, "config"]);
  }
  return problems;
}

function duplicateProblems(doc: Document, lines: LineCounter): DeploymentProblem[] {
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

function portProblems(
  file: DeploymentFile,
  at: (segments: readonly PropertyKey[]) => number,
): DeploymentProblem[] {
  const problems: DeploymentProblem[] = [];
  const taken = new Map<string, string>();
  for (const [name, server] of Object.entries(file.servers)) {
    if (server.port === 0) continue;
    const key = `${server.host}:${server.port}`;
    const other = taken.get(key);
    if (other !== undefined) {
      problems.push({
        line: at(["servers", name, "port"]),
        path: `servers.${name}.port`,
        message: `port ${server.port} on ${server.host} is also given to server ${other} (line ${at(["servers", other, "port"])}): give each server its own port, or port: 0`,
      });
    } else {
      taken.set(key, name);
    }
  }
  return problems;
}

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

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
  let text: string;
  try {
    text = readFileSync(absolute, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new DeploymentFileError(file, [
      {
        line: null,
        path: "",
        message:
          code === "ENOENT"
            ? "no such file: check the path"
            : `cannot read it: ${(error as Error).message}`,
      },
    ]);
  }

  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, uniqueKeys: true, prettyErrors: false });
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

  // Expand ${VAR} in values (never in keys); a plain scalar is re-read as YAML, so
  // `port: ${PORT:-0}` is a number and a quoted one stays a string.
  const env = options.env ?? process.env;
  const expandedNodes = new Set<unknown>();
  const failedNodes = new Set<unknown>();
  visit(doc, {
    Scalar(key, node: Scalar) {
      if (key === "key" || typeof node.value !== "string" || !node.value.includes("$")) return;
      const expansion = expandVariables(node.value, env);
      const line = lines.linePos(startOf(node) ?? 0).line;
      for (const message of expansion.problems) problems.push({ line, path: "", message });
      if (expansion.problems.length > 0) {
        // Keep the reference as written: it is reported once, not again by the schema.
        failedNodes.add(node);
        return;
      }
      if (!expansion.expanded && expansion.value === node.value) return;
      expandedNodes.add(node);
      if (node.type === "PLAIN" || node.type === undefined) {
        let reread: unknown;
        try {
          reread = parseYaml(expansion.value);
        } catch {
          reread = expansion.value;
        }
        node.value =
          reread === null || ["string", "number", "boolean"].includes(typeof reread)
            ? reread
            : expansion.value;
      } else {
        node.value = expansion.value;
      }
    },
  });

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
  const at = (segments: readonly PropertyKey[]): number => locate(doc, lines, segments).line;
  const parsed = DeploymentFileSchema.safeParse(data ?? {});
  if (!parsed.success) {
    const context: IssueContext = { doc, lines, data, expandedNodes, failedNodes };
    for (const issue of parsed.error.issues) problems.push(...issueProblems(issue, context));
    throw new DeploymentFileError(file, problems);
  }

  const deployment = parsed.data;
  problems.push(...referenceProblems(deployment, at));
  problems.push(...portProblems(deployment, at));
  const servers: Record<string, LoadedServer> = {};
  for (const [name, server] of Object.entries(deployment.servers)) {
    if (!/^[A-Za-z0-9]/.test(name)) {
      problems.push({
        line: at(["servers", name]),
        path: `servers.${name}`,
        message: `server name '${name}' must start with a letter or a digit (it names a checkpoint directory): rename it`,
      });
    }
    let entrypoint = server.entrypoint;
    if (options.checkEntrypoints ?? true) {
      try {
        entrypoint = resolveEntrypoint(server.entrypoint, dir);
      } catch (error) {
        if (!(error instanceof EntrypointError)) throw error;
        problems.push({
          line: at(["servers", name, "entrypoint"]),
          path: `servers.${name}.entrypoint`,
          message: error.message,
        });
      }
    } else {
      entrypoint = path.resolve(dir, server.entrypoint);
    }
    servers[name] = {
      name,
      kind: server.kind,
      entrypoint,
      host: server.host,
      port: server.port,
      num_workers: server.num_workers,
      node_args: server.node_args,
      config: server.config,
      line: at(["servers", name]),
    };
  }
  if (problems.length > 0) throw new DeploymentFileError(file, problems);
  return { file: absolute, dir, checkpoint: deployment.checkpoint ?? null, servers };
}

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
  return { checkpoint: loaded.checkpoint, servers };
}
