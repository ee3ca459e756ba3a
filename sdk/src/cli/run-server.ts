/**
 * How one server process starts: import the entrypoint, build the server from its default
 * export (a `Server` subclass, or a factory returning a server), listen, and stop gracefully on
 * SIGTERM or SIGINT. `gym serve` starts every server this way (through `server-process`);
 * {@link serveMain} runs a server module on its own, for debugging.
 *
 * @see docs/deployment.md
 */
import { readFileSync, realpathSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import type { Logger } from "pino";
import { parse as parseYaml } from "yaml";
import { resolveCheckpointSettings, type ServerOptions } from "../server/server.js";
import { ResolvedDeploymentSchema, type ResolvedDeployment } from "../wire/deployment.js";
import { describeError } from "./output.js";
import { processLogger } from "./process-logger.js";
import { SESSION_SECRET_ENV, takeEnv } from "./session-secrets.js";
import { drainBeforeStop, termGraceOf, type DrainEnd } from "./term-grace.js";
import {
  ServerModuleError,
  startServer,
  type RunningServer,
  type ServerModuleExport,
} from "../server/serve.js";
import { serveEntry } from "../workers/serve-entry.js";

/** Imports a server module and returns its default export, checked. */
export async function importServerModule(entrypoint: string): Promise<ServerModuleExport> {
  const module = (await import(pathToFileURL(entrypoint).href)) as { default?: unknown };
  const exported = module.default;
  if (typeof exported !== "function") {
    throw new ServerModuleError(
      `${entrypoint} has no usable default export (got ${exported === undefined ? "none" : typeof exported}): ` +
        "export default your server class (export default class MyServer extends Server { ... }) " +
        "or a factory (export default (options) => new MyServer(options))",
    );
  }
  return exported as ServerModuleExport;
}

/**
 * Stops the server on SIGTERM or SIGINT: closes it gracefully, then lets the process end. A
 * second signal, or a close that takes longer than `forceAfterMs`, exits at once. With a term
 * grace (`termGraceMs` > 0, `gym serve --term-grace`), SIGTERM first lets a participant serve on
 * until a checkpoint commits, anything else until the grace passes (repeats are ignored);
 * SIGINT then stops it at once.
 */
export function stopOnSignals(
  running: RunningServer,
  options: { logger?: Logger; forceAfterMs?: number; termGraceMs?: number } = {},
): void {
  let signalled = false;
  let draining: AbortController | null = null;
  const onSignal = (signal: NodeJS.Signals): void => {
    const termGraceMs = options.termGraceMs ?? 0;
    if (termGraceMs > 0 && signal === "SIGTERM" && !signalled) {
      if (draining !== null) return; // the engine and gym serve may both send it
      draining = new AbortController();
      const state = running.checkpointState ?? null;
      const participant = state !== null && state() !== null;
      options.logger?.info(
        { signal, term_grace_ms: termGraceMs },
        participant
          ? "SIGTERM: serving until a checkpoint commits, then stopping"
          : "SIGTERM: serving until the term grace passes, then stopping",
      );
      void drainBeforeStop(participant ? state : null, termGraceMs, draining.signal).then((end) => {
        if (!signalled) stopNow("SIGTERM", end);
      });
      return;
    }
    if (draining !== null && !signalled) {
      draining.abort();
      stopNow(signal, "interrupted");
      return;
    }
    stopNow(signal, null);
  };
  const stopNow = (signal: NodeJS.Signals, drained: DrainEnd | null): void => {
    if (signalled) {
      options.logger?.warn({ signal }, "second signal: exiting now");
      process.exit(1);
    }
    signalled = true;
    options.logger?.info({ signal, ...(drained === null ? {} : { drained }) }, "stopping");
    running.stop().then(
      () => {
        process.exitCode = 0;
        // Nothing should be left running; if something is, do not hang on it.
        setTimeout(() => process.exit(0), options.forceAfterMs ?? 5_000).unref();
      },
      (error: unknown) => {
        options.logger?.error({ err: error }, "close failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
}

/** Where `gym serve` tells a server process what to run. */
export interface ServerProcessArgs {
  /** The resolved deployment file (JSON). */
  readonly deploymentFile: string;
  /** The server's name in the deployment. */
  readonly name: string;
  /** The module to import. */
  readonly entrypoint: string;
  /** The server's configured session secret (from {@link SESSION_SECRET_ENV}). @default none */
  readonly sessionSecret?: string;
}

/** Environment fallbacks of the server process's flags. */
export const SERVER_PROCESS_ENV = {
  deploymentFile: "GYM_DEPLOYMENT_FILE",
  name: "GYM_SERVER_NAME",
  entrypoint: "GYM_SERVER_ENTRYPOINT",
} as const;

/** Reads a resolved deployment file. */
export function readResolvedDeployment(file: string): ResolvedDeployment {
  const value = JSON.parse(readFileSync(file, "utf8")) as unknown;
  return ResolvedDeploymentSchema.parse(value);
}

/**
 * Starts the named server of a resolved deployment: `new Cls({ name, checkpoint, config,
 * deployment, logger })` (or the factory with the same options), listening on its host and port.
 */
export async function startFromDeployment(
  args: ServerProcessArgs & { logger?: Logger },
): Promise<RunningServer> {
  const deployment = readResolvedDeployment(args.deploymentFile);
  const entry = deployment.servers[args.name];
  if (entry === undefined) {
    throw new ServerModuleError(
      `the deployment ${args.deploymentFile} has no server named ${args.name}`,
    );
  }
  const exported = await importServerModule(args.entrypoint);
  const logger = args.logger ?? processLogger();
  const options: ServerOptions = {
    name: args.name,
    checkpoint: deployment.checkpoint,
    config: entry.config,
    deployment,
    logger,
    ...(args.sessionSecret === undefined ? {} : { sessionSecret: args.sessionSecret }),
  };
  return await serveEntry({
    exported,
    options,
    listen: { port: entry.port, host: entry.host },
    workers: entry.num_workers,
    logger,
    termGraceMs: termGraceOf(process.env),
  });
}

/**
 * The body of a server process started by `gym serve`:
 * `server-process --deployment FILE --name NAME --entrypoint MODULE` (or the environment
 * variables of {@link SERVER_PROCESS_ENV}). Exits 1 when the server cannot start, 2 on bad
 * arguments.
 */
export async function runServerProcess(argv: readonly string[]): Promise<void> {
  let values: { deployment?: string; name?: string; entrypoint?: string };
  try {
    ({ values } = parseArgs({
      args: [...argv],
      options: {
        deployment: { type: "string" },
        name: { type: "string" },
        entrypoint: { type: "string" },
      },
      strict: true,
    }));
  } catch (error) {
    process.stderr.write(`gym server process: ${describeError(error)}\n`);
    process.exitCode = 2;
    return;
  }
  const args = {
    deploymentFile: values.deployment ?? process.env[SERVER_PROCESS_ENV.deploymentFile],
    name: values.name ?? process.env[SERVER_PROCESS_ENV.name],
    entrypoint: values.entrypoint ?? process.env[SERVER_PROCESS_ENV.entrypoint],
  };
  if (
    args.deploymentFile === undefined ||
    args.name === undefined ||
    args.entrypoint === undefined
  ) {
    process.stderr.write(
      "gym server process: --deployment FILE, --name NAME and --entrypoint MODULE are required\n",
    );
    process.exitCode = 2;
    return;
  }
  const logger = processLogger();
  // Taken out of the environment: a worker gets it from its coordinator, nothing else needs it.
  const sessionSecret = takeEnv(process.env, SESSION_SECRET_ENV);
  let running: RunningServer;
  try {
    running = await startFromDeployment({
      deploymentFile: args.deploymentFile,
      name: args.name,
      entrypoint: args.entrypoint,
      logger,
      ...(sessionSecret === undefined ? {} : { sessionSecret }),
    });
  } catch (error) {
    process.stderr.write(
      `gym: server ${args.name} failed to start: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exitCode = 1;
    // Let pino flush; nothing else keeps the process alive.
    setTimeout(() => process.exit(1), 1_000).unref();
    return;
  }
  stopOnSignals(running, { logger, termGraceMs: termGraceOf(process.env) });
}

const SERVE_MAIN_USAGE = `usage: node <server module> [options]

Runs this server on its own (for debugging).

options:
  --port N                 port to listen on (default 0: any free port)
  --host HOST              host to bind (default 127.0.0.1)
  --config FILE            the server's settings, JSON or YAML (default {})
  --name NAME              the server's name (default "server")
  --checkpoint-token TOKEN turn checkpointing on with this control token (default off)
  --deployment FILE        a resolved deployment (JSON) naming the other servers
  --tls-cert FILE          serve HTTPS with this PEM certificate (with --tls-key)
  --tls-key FILE           the PEM private key of --tls-cert
  --tls-client-ca FILE     mutual TLS: require client certificates signed by this PEM CA
  -h, --help               show this help

environment:
  GYM_SESSION_SECRET       the secret signing session cookies (default: derived from the
                           checkpoint token, else random per process)`;

/**
 * Runs a server module on its own: `node dist/main.js --port 8101 --config settings.json
 * [--name N] [--checkpoint-token T] [--deployment FILE]`. Prints where it listens, stops
 * gracefully on SIGTERM/SIGINT. Bad arguments set exit status 2, a failed start 1; both
 * return null.
 *
 * @example
 * export default class Counter extends Server {}
 * if (isMainModule(import.meta.url)) await serveMain(Counter);
 *
 * @see docs/deployment.md
 */
export async function serveMain(
  exported: ServerModuleExport,
  argv: readonly string[] = process.argv.slice(2),
): Promise<RunningServer | null> {
  let values: {
    port?: string;
    host?: string;
    config?: string;
    name?: string;
    "checkpoint-token"?: string;
    deployment?: string;
    "tls-cert"?: string;
    "tls-key"?: string;
    "tls-client-ca"?: string;
    help?: boolean;
  };
  try {
    ({ values } = parseArgs({
      args: [...argv],
      options: {
        port: { type: "string" },
        host: { type: "string" },
        config: { type: "string" },
        name: { type: "string" },
        "checkpoint-token": { type: "string" },
        deployment: { type: "string" },
        "tls-cert": { type: "string" },
        "tls-key": { type: "string" },
        "tls-client-ca": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
    }));
  } catch (error) {
    process.stderr.write(`${describeError(error)}\n\n${SERVE_MAIN_USAGE}\n`);
    process.exitCode = 2;
    return null;
  }
  if (values.help === true) {
    process.stdout.write(`${SERVE_MAIN_USAGE}\n`);
    return null;
  }
  const port = Number(values.port ?? "0");
  if (!Number.isInteger(port) || port < 0 || port > 65_535) {
    process.stderr.write(`--port ${values.port} is not a port (0-65535)\n`);
    process.exitCode = 2;
    return null;
  }
  const tlsCert = values["tls-cert"];
  const tlsKey = values["tls-key"];
  if (
    (tlsCert === undefined) !== (tlsKey === undefined) ||
    (values["tls-client-ca"] !== undefined && tlsCert === undefined)
  ) {
    process.stderr.write("--tls-cert and --tls-key go together (--tls-client-ca needs both)\n");
    process.exitCode = 2;
    return null;
  }
  const name = values.name ?? "server";
  const logger = processLogger();
  try {
    const config: unknown =
      values.config === undefined ? {} : parseYaml(readFileSync(values.config, "utf8"));
    const file: ResolvedDeployment | null =
      values.deployment === undefined ? null : readResolvedDeployment(values.deployment);
    const token = values["checkpoint-token"];
    const checkpoint =
      token !== undefined
        ? { enabled: true, control_auth_token: token }
        : (file?.checkpoint ?? null);
    // The flags' certificate stands in for the deployment's `tls:` block, keeping its CA.
    const deployment: ResolvedDeployment | null =
      tlsCert === undefined || tlsKey === undefined
        ? file
        : {
            ...(file ?? {
              checkpoint: checkpoint === null ? null : resolveCheckpointSettings(checkpoint),
              servers: {},
            }),
            tls: {
              cert_file: path.resolve(tlsCert),
              key_file: path.resolve(tlsKey),
              ca_file: file?.tls?.ca_file ?? null,
              client_ca_file:
                values["tls-client-ca"] === undefined
                  ? null
                  : path.resolve(values["tls-client-ca"]),
            },
          };
    const sessionSecret = takeEnv(process.env, SESSION_SECRET_ENV);
    const running = await startServer(
      exported,
      {
        name,
        checkpoint,
        config: config ?? {},
        deployment,
        logger,
        ...(sessionSecret === undefined ? {} : { sessionSecret }),
      },
      { port, host: values.host ?? "127.0.0.1" },
    );
    console.log(
      `${name} listening on ${running.address.url} (Swagger UI: ${running.address.url}/docs)`,
    );
    stopOnSignals(running, { logger });
    return running;
  } catch (error) {
    process.stderr.write(`${name} failed to start: ${describeError(error)}\n`);
    process.exitCode = 1;
    return null;
  }
}

/**
 * Whether the module with this `import.meta.url` is the script Node was started with (so a
 * server module can call {@link serveMain} only when run directly).
 *
 * @example
 * if (isMainModule(import.meta.url)) await serveMain(Counter);
 */
export function isMainModule(importMetaUrl: string): boolean {
  const script = process.argv[1];
  if (script === undefined) return false;
  const real = (file: string): string => {
    try {
      return realpathSync(file);
    } catch {
      return path.resolve(file);
    }
  };
  const self = real(fileURLToPath(importMetaUrl));
  const started = real(script);
  return self === started || self.replace(/\.[cm]?[jt]s$/, "") === started;
}
