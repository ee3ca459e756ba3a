import { setMaxListeners } from "node:events";
import {
  createServer,
  type IncomingMessage,
  type Server as HttpServer,
  type ServerResponse,
} from "node:http";
import { createServer as createHttpsServer } from "node:https";
import {
  createServer as createNetServer,
  type AddressInfo,
  type Server as NetServer,
  type Socket,
} from "node:net";
import express, { Router, type Express, type Request, type RequestHandler } from "express";
import { pino, type Logger } from "pino";
import { watchParticipant } from "../telemetry/metrics.js";
import {
  PROMETHEUS_CONTENT_TYPE,
  metricsHandler,
  prometheusText,
  startTelemetry,
} from "../telemetry/setup.js";
import { requestTelemetry } from "./request-telemetry.js";
import { z } from "zod";
import { ServerClient, type ServerClientOptions } from "../client/server-client.js";
import { serverTlsOptions, type ServerTlsOptions } from "../client/tls.js";
import { isLoopbackHost } from "../util/loopback.js";
import { ControlPlane } from "../control/control-plane.js";
import type { Participant } from "../control/participant.js";
import type { ServerWorker } from "./server-worker.js";
import { ConfigError } from "../errors.js";
import { buildOpenApiDocument } from "../openapi/build-document.js";
import { mountOpenApiRoutes } from "./openapi-routes.js";
import { parseBody } from "../wire/parse.js";
import type { ResolvedDeployment } from "../wire/deployment.js";
import type { RouteDoc } from "../wire/route-doc.js";
import {
  CheckpointSettingsSchema,
  TelemetrySettingsSchema,
  type CheckpointSettings,
  type CheckpointSettingsInput,
  type TelemetrySettings,
  type TelemetrySettingsInput,
} from "../wire/settings.js";
import { controlRouter } from "./control-router.js";
import type { DataRoute } from "./data-route.js";
import { errorHandler, notFoundHandler } from "./error-handler.js";
import { handlerStarted, linkedCancellations } from "./handler-lifecycle.js";
import { BODY_LIMIT_BYTES, jsonBody } from "./json-body.js";
import { rolloutOf, rolloutPrefix } from "./rollout-prefix.js";
import { SessionRouter } from "./routing/session-router.js";
import { resolveSessionSecret, type SessionSecret } from "./session-secret.js";
import { SocketMux } from "./routing/socket-mux.js";
import { sdkPackage } from "../util/sdk-package.js";

/** The header naming a session's owner on a request that carries no session cookie. */
export const SESSION_OWNER_HEADER = "x-ng-session-owner";

/** The `config:` a server without a declared schema accepts: `{}` only. */
const NO_CONFIG = z.strictObject({});

/** Options of a {@link Server}, resolved once at construction. */
export interface ServerOptions {
  /**
   * The server's configured name: the logger's name, `instance` in the control status and the
   * last component of its checkpoint storage path. Must match `^[A-Za-z0-9][A-Za-z0-9._-]*$`.
   */
  readonly name: string;
  /** The `checkpoint:` block. @default checkpointing off */
  readonly checkpoint?: CheckpointSettingsInput | null;
  /** The `telemetry:` block. @default the deployment's, else metrics on and request logs at debug */
  readonly telemetry?: TelemetrySettingsInput | null;
  /** Logger to use (a child named after the server is made). @default pino at `logLevel` */
  readonly logger?: Logger;
  /** Level of the logger the server builds when none is given. @default process.env.LOG_LEVEL ?? "info" */
  readonly logLevel?: string;
  /** How long `close()` lets in-flight requests finish before cutting them, in ms. @default 10000 */
  readonly shutdownGraceMs?: number;
  /**
   * How long a client may take to send a whole request (head and body), in ms, before the
   * connection is answered 408 and closed (Node's `requestTimeout`; its own default is 300 s).
   * It bounds what a half-sent body holds; such a request is never counted as work in flight.
   * 0 turns the bound off. @default 120000
   */
  readonly requestTimeoutMs?: number;
  /**
   * Server-specific settings (the deployment file's `config:`), validated by the server's
   * `configSchema()` when the app is built. @default {}
   */
  readonly config?: unknown;
  /** The resolved deployment: where every other server is. @default a deployment of none */
  readonly deployment?: ResolvedDeployment | null;
  /** Options of the {@link ServerClient} this server uses to reach others. */
  readonly client?: ServerClientOptions;
  /**
   * Set by `gym serve` in each worker process of a server with `num_workers` above 1: the link
   * to the server's coordinator, which answers the control routes and routes sessions.
   * @default none (one process)
   */
  readonly worker?: ServerWorker | null;
  /**
   * The secret the server's session cookies are signed with (each cookie gets its own key
   * derived from it). `gym serve` passes the deployment file's `servers.<name>.session_secret`.
   * Set it when cookies must stay valid across a control-token change, or must differ between
   * deployments sharing a token; the value is never logged, serialized or served.
   * @default derived from `checkpoint.control_auth_token` with checkpointing on (stable across
   * a crash and restore), else random per process
   * @see docs/resources-server.md#the-session-cookie
   */
  readonly sessionSecret?: string | null;
}

/** Where a listening server can be reached. */
export interface ListeningAddress {
  readonly host: string;
  readonly port: number;
  /** `http://<host>:<port>`, or `https://` when the deployment has a `tls:` block */
  readonly url: string;
}

/** Validates the `checkpoint:` block once, naming the key at fault. */
export function resolveCheckpointSettings(
  input: CheckpointSettingsInput | null | undefined,
): CheckpointSettings {
  const result = CheckpointSettingsSchema.safeParse(input ?? {});
  if (result.success) return result.data;
  const problems = result.error.issues
    .map((issue) => {
      const key = issue.path.length > 0 ? `checkpoint.${issue.path.join(".")}` : "checkpoint";
      return issue.message.includes(key) ? issue.message : `${key}: ${issue.message}`;
    })
    .join("; ");
  throw new ConfigError(`invalid checkpoint settings: ${problems}`);
}

/** Validates the `telemetry:` block once, naming the key at fault. */
export function resolveTelemetrySettings(
  input: TelemetrySettingsInput | null | undefined,
): TelemetrySettings {
  const result = TelemetrySettingsSchema.safeParse(input ?? {});
  if (result.success) return result.data;
  const problems = result.error.issues
    .map((issue) => `telemetry.${issue.path.join(".")}: ${issue.message}`)
    .join("; ");
  throw new ConfigError(`invalid telemetry settings: ${problems}`);
}

/** Answers a scrape on a worker with the merged exposition its coordinator gathers. */
function workerMetrics(link: ServerWorker): RequestHandler {
  return (_req, res, next) => {
    link.serverMetrics().then((text) => {
      res.setHeader("content-type", PROMETHEUS_CONTENT_TYPE);
      res.end(text);
    }, next);
  };
}

/**
 * The base of every gym server: an express app with `GET /health`, the rollout prefix
 * middleware, the data routes a subclass declares, and, when checkpointing is on and the server
 * has a participant, the bearer-protected control routes. `GET /openapi.json` and Swagger UI at
 * `/docs` describe exactly the routes this server serves.
 *
 * Subclasses override {@link routes} (or, on a server kind, {@link extraRoutes}) and
 * {@link configSchema} to declare `config:` settings typed as `Config`; the participant kinds'
 * base classes override {@link createParticipant} and {@link installKindMiddleware}. Nothing
 * needs calling in a special order: no override has to call `super`.
 *
 * ## Request bodies
 * Every data and control route reads its JSON body with the same bounds (size, encoding,
 * nesting; see {@link DataRoute}). With a participant, data routes' bodies are read before
 * {@link installKindMiddleware} and {@link configureApp} middleware run, so the
 * participant admits only complete requests; without one, at the route, after that middleware
 * (which can then refuse a request before its body is read). A whole request must arrive
 * within `requestTimeoutMs`.
 *
 * @example
 * class Hello extends Server {
 *   protected override routes() {
 *     return [dataRoute({ method: "get", path: "/hello", summary: "Say hello", handler: () => ({ hello: "world" }) })];
 *   }
 * }
 * const { url } = await new Hello({ name: "hello" }).listen({ port: 0 });
 *
 * @see docs/servers.md
 */
export class Server<Config = unknown> {
  readonly name: string;
  readonly checkpointSettings: CheckpointSettings;
  /** Metrics, request logs (see docs/observability.md). */
  readonly telemetrySettings: TelemetrySettings;
  readonly logger: Logger;
  readonly shutdownGraceMs: number;
  readonly requestTimeoutMs: number;

  readonly #rawConfig: unknown;
  /** The validated settings, once read (boxed: `Config` itself may be undefined). */
  #config: { readonly value: Config } | null = null;
  readonly #deployment: ResolvedDeployment;
  readonly #clientOptions: ServerClientOptions;
  #client: ServerClient | null = null;
  #app: Express | null = null;
  /** Whether {@link app} is building the app (its `/openapi.json` asks for the document). */
  #building = false;
  #controlPlane: ControlPlane | null = null;
  #participant: Participant | null = null;
  /** Stops reporting the participant's gauges. */
  #unwatch: () => void = () => undefined;
  /** Whether the control routes are served (here, or through the worker's coordinator). */
  #controlRoutes = false;
  readonly #worker: ServerWorker | null;
  readonly #sessionSecret: SessionSecret;
  /** The deployment's certificate and key (read once), or null: plain HTTP. */
  readonly #tls: ServerTlsOptions | null;
  #http: HttpServer | null = null;
  /** A worker's private socket, where other workers pass on its sessions' requests. */
  #privateHttp: HttpServer | null = null;
  /** The socket other workers connect to, and their connections. */
  #privateMux: { readonly server: NetServer; readonly sockets: Set<Socket> } | null = null;
  #router: SessionRouter | null = null;
  readonly #shutdown = ((): AbortController => {
    const controller = new AbortController();
    setMaxListeners(0, controller.signal); // one listener per in-flight request
    return controller;
  })();

  constructor(options: ServerOptions) {
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(options.name)) {
      throw new ConfigError(
        `server name ${JSON.stringify(options.name)} must match ^[A-Za-z0-9][A-Za-z0-9._-]*$`,
      );
    }
    this.name = options.name;
    this.checkpointSettings = resolveCheckpointSettings(options.checkpoint);
    this.telemetrySettings = resolveTelemetrySettings(
      options.telemetry ?? options.deployment?.telemetry ?? null,
    );
    const base =
      options.logger ?? pino({ level: options.logLevel ?? process.env.LOG_LEVEL ?? "info" });
    this.logger = base.child({ server: options.name });
    this.shutdownGraceMs = options.shutdownGraceMs ?? 10_000;
    this.requestTimeoutMs = options.requestTimeoutMs ?? 120_000;
    if (!Number.isSafeInteger(this.requestTimeoutMs) || this.requestTimeoutMs < 0) {
      throw new ConfigError(
        `server ${options.name}: requestTimeoutMs must be a whole number of ms, 0 or more (got ${this.requestTimeoutMs})`,
      );
    }
    this.#rawConfig = options.config ?? {};
    this.#deployment = options.deployment ?? {
      checkpoint: options.checkpoint === undefined ? null : this.checkpointSettings,
      servers: {},
    };
    this.#clientOptions = options.client ?? {};
    this.#tls = serverTlsOptions(this.#deployment.tls);
    this.#worker = options.worker ?? null;
    this.#sessionSecret = resolveSessionSecret(
      options.sessionSecret,
      this.checkpointSettings,
      this.#worker?.sessionSecret ?? null,
    );
  }

  /**
   * The schema of this server's `config:` settings, whose output is `Config`; null takes the
   * kind's base settings ({@link baseConfigSchema}). Override it to declare settings: they are
   * validated once, when the app is built, and a bad value fails the start naming the key. On a
   * server kind, extend the kind's schema (e.g. `AgentConfigSchema.extend({...})`).
   */
  protected configSchema(): z.ZodType<Config> | null {
    return null;
  }

  /**
   * The settings a server kind takes when its subclass declares none (kinds' base classes
   * override it); a plain server accepts `{}` only.
   */
  protected baseConfigSchema(): z.ZodType {
    return NO_CONFIG;
  }

  /** The validated `config:` settings (see {@link configSchema}). */
  protected get config(): Config {
    if (this.#config === null) {
      const declared = this.configSchema();
      const result = (declared ?? this.baseConfigSchema()).safeParse(this.#rawConfig);
      if (!result.success) {
        const problems = result.error.issues
          .map(
            (issue) => `config.${issue.path.map(String).join(".") || "(root)"}: ${issue.message}`,
          )
          .join("; ");
        throw new ConfigError(`server ${this.name}: invalid settings: ${problems}`);
      }
      // The declared schema's output is `Config`; without one, `Config` is the kind's base
      // settings (or `{}`), which is what the base schema outputs.
      this.#config = { value: result.data as Config };
    }
    return this.#config.value;
  }

  /** The resolved deployment this server runs in. */
  get deployment(): ResolvedDeployment {
    return this.#deployment;
  }

  /** A client reaching the other servers of the deployment by name (built on first use). */
  get client(): ServerClient {
    // A worker's calls to its own server come back to it (see SESSION_OWNER_HEADER).
    const self =
      this.#worker === null
        ? {}
        : { [this.name]: { [SESSION_OWNER_HEADER]: this.#worker.routingId } };
    this.#client ??= new ServerClient(this.#deployment, {
      ...this.#clientOptions,
      serverHeaders: { ...self, ...this.#clientOptions.serverHeaders },
    });
    return this.#client;
  }

  /** Whether the `checkpoint:` block enables checkpointing. */
  get checkpointEnabled(): boolean {
    return this.checkpointSettings.enabled;
  }

  /**
   * The participant owning this server's checkpoint state, once the app is built with
   * checkpointing on; null otherwise. Each kind narrows its type.
   */
  get participant(): Participant | null {
    this.app();
    return this.#participant;
  }

  /**
   * Reports `controlPlane`'s phase, admission and counts as this server's gauges, in place of
   * its own control plane's: a multi-worker server's coordinator builds the server once for its
   * hooks, and the control plane that answers its control calls is another.
   * @internal
   */
  reportControlPlane(controlPlane: ControlPlane): void {
    this.app();
    this.#unwatch?.();
    this.#unwatch = watchParticipant(controlPlane.gauges(this.name));
  }

  /**
   * This process's metrics as Prometheus text, or null when metrics are off.
   * @internal
   */
  async metricsText(): Promise<string | null> {
    return this.telemetrySettings.metrics ? await prometheusText() : null;
  }

  /** The control plane, once the app is built with checkpointing on and a participant. */
  get controlPlane(): ControlPlane | null {
    this.app();
    return this.#controlPlane;
  }

  /** Fires when the server shuts down; handlers' signals follow it. */
  get shutdownSignal(): AbortSignal {
    return this.#shutdown.signal;
  }

  /**
   * The participant owning this server's checkpoint state; null when the server takes no part
   * in checkpoints. Called once, when the app is built, only with checkpointing on.
   */
  protected createParticipant(): Participant | null {
    return null;
  }

  /**
   * The worker owning the session a raw request names (null: none; `""`: a session of a
   * one-process server), read before anything else runs when the server runs several workers. The base reads the `x-ng-session-owner` header;
   * kinds with session cookies read the owner their cookie names.
   */
  protected sessionOwnerOf(req: IncomingMessage): string | null {
    const named = req.headers[SESSION_OWNER_HEADER];
    return typeof named === "string" && named.length > 0 ? named : null;
  }

  /** This worker's link to its coordinator, or null when the server runs as one process. */
  protected get workerLink(): ServerWorker | null {
    return this.#worker;
  }

  /**
   * The signing key of one of this server's session cookies, derived from its session secret
   * (see {@link ServerOptions.sessionSecret}); kinds with session cookies sign them with it.
   */
  protected sessionCookieKey(cookieName: string): Buffer {
    return this.#sessionSecret.keyFor(cookieName);
  }

  /** The routing ID of this worker process, or null when the server runs as one process. */
  protected get workerRoutingId(): string | null {
    return this.#worker?.routingId ?? null;
  }

  /** The data routes this server serves (a server kind serves its own: see {@link extraRoutes}). */
  protected routes(): readonly DataRoute[] {
    return [];
  }

  /** Routes of your own, served after {@link routes} (every server kind takes them). */
  protected extraRoutes(): readonly DataRoute[] {
    return [];
  }

  /**
   * Installs a server kind's own request middleware (session layer, checkpoint tracking), before
   * {@link configureApp}, so an override of `configureApp` cannot leave it out. Kinds' base
   * classes only.
   */
  protected installKindMiddleware(_app: Express): void {}

  /** Adds middleware of your own before the data routes (rarely needed); no `super` call. */
  protected configureApp(_app: Express): void {}

  /** The express app (built once). */
  app(): Express {
    if (this.#app === null) {
      this.#building = true;
      try {
        this.#app = this.#build();
      } finally {
        this.#building = false;
      }
    }
    return this.#app;
  }

  /**
   * `info.version` and `info.description` of the server's OpenAPI document. Override to publish
   * your server's own version. @default the SDK's version, and a description naming the server
   */
  protected apiInfo(): { readonly version: string; readonly description?: string } {
    const sdk = sdkPackage();
    return {
      version: sdk.version,
      description: `The routes of the gym server \`${this.name}\`, served by ${sdk.name} ${sdk.version}.`,
    };
  }

  /** The OpenAPI document of the routes this server serves (also before it listens). */
  openApiDocument(): ReturnType<typeof buildOpenApiDocument> {
    // The control plane, if any, comes with the app: build it first (unless building it now).
    if (!this.#building) this.app();
    return buildOpenApiDocument({
      title: `${this.name} (gym server)`,
      ...this.apiInfo(),
      controlRoutes: this.#controlRoutes,
      checkpointing: this.checkpointSettings.enabled,
      routes: this.#allRoutes().map((route): RouteDoc => route),
      operations: {
        metricsPath: this.telemetrySettings.metrics ? this.telemetrySettings.metrics_path : null,
      },
    });
  }

  #allRoutes(): readonly DataRoute[] {
    return [...this.routes(), ...this.extraRoutes()];
  }

  #build(): Express {
    void this.config; // validated at startup, before anything is served
    const app = express();
    app.disable("x-powered-by");
    // One spelling per route: `/seed_session/` or `/SEED_SESSION` must not reach a handler that
    // the checkpoint middleware would not recognise (an untracked session start).
    app.set("case sensitive routing", true);
    app.set("strict routing", true);
    // Data routes' bodies are read by the route's own reader unless a participant counts its
    // work: then they are read here, before its middleware, so it admits only complete requests
    // (a half-sent body must not hold a checkpoint). `#mount` adds a reader per route.
    const bodies = Router({ caseSensitive: true, strict: true });
    const telemetry = this.telemetrySettings;
    startTelemetry({
      serviceName: this.name,
      prometheus: telemetry.metrics,
      onWarning: (message) => this.logger.warn(message),
    });
    // First: every request, control or data, runs inside its span and is timed and logged.
    app.use(...requestTelemetry(this.logger, telemetry));
    // Control routes come before the rollout prefix is stripped: they are never under it.
    if (this.checkpointSettings.enabled) {
      const participant = this.createParticipant();
      this.#participant = participant;
      if (participant !== null) {
        // A worker's control calls are answered by its server's coordinator.
        const dispatcher =
          this.#worker ??
          (this.#controlPlane = new ControlPlane(participant, {
            instance: this.name,
            leaseGraceSeconds: this.checkpointSettings.lease_grace_seconds,
            logger: this.logger,
          }));
        this.#controlRoutes = true;
        app.use(
          controlRouter(dispatcher, this.checkpointSettings.control_auth_token ?? "", this.name),
        );
      }
    }
    app.use(rolloutPrefix());
    app.get("/health", (_req, res) => {
      const worker = this.#worker;
      if (worker !== null && worker.lostWorkers.length > 0) {
        // Never silently partial: sessions of the lost worker are gone, checkpoints refused.
        res.status(503).json({
          status: "worker_lost",
          name: this.name,
          workers: worker.liveWorkers,
          expected_workers: worker.count,
          lost_workers: worker.lostWorkers,
        });
        return;
      }
      if (worker !== null && !worker.allJoined) {
        res.status(503).json({
          status: "starting",
          name: this.name,
          workers: worker.liveWorkers,
          expected_workers: worker.count,
        });
        return;
      }
      res.json({ status: "ok", name: this.name });
    });
    app.get("/ready", (_req, res) => {
      const reasons = this.#notReadyReasons();
      if (reasons.length > 0) {
        res.status(503).json({ status: "not_ready", name: this.name, reasons });
        return;
      }
      res.json({ status: "ready", name: this.name });
    });
    if (telemetry.metrics) {
      // A worker's scrape shows the whole server: its coordinator and every worker.
      const worker = this.#worker;
      if (worker !== null) worker.metricsSource = prometheusText;
      app.get(telemetry.metrics_path, worker === null ? metricsHandler : workerMetrics(worker));
    }
    const controlPlane = this.#controlPlane;
    if (controlPlane !== null) {
      this.#unwatch = watchParticipant(controlPlane.gauges(this.name));
    }
    if (this.#controlRoutes) app.use(bodies);
    this.installKindMiddleware(app);
    this.configureApp(app);
    for (const route of this.#allRoutes()) this.#mount(app, bodies, route);
    mountOpenApiRoutes(app, () => this.openApiDocument());
    app.use(notFoundHandler);
    app.use(errorHandler(this.logger));
    return app;
  }

  #mount(app: Express, bodies: Router, route: DataRoute): void {
    const schema = route.request ?? null;
    const json = jsonBody({ limitBytes: BODY_LIMIT_BYTES });
    const what = `${route.method.toUpperCase()} ${route.path}`;
    const before = route.before ?? [];
    // The early reader (when installed) takes the body; the route's own then passes it on.
    bodies[route.method](route.path, ...before, json);
    app[route.method](route.path, ...before, json, async (req: Request, res) => {
      const body: unknown =
        schema === null
          ? undefined
          : (route.parse?.(req.body) ?? parseBody(schema, req.body, what));
      const abort = new AbortController();
      const onClose = (): void => {
        if (!res.writableFinished) abort.abort(new Error("the client closed the connection"));
      };
      res.on("close", onClose);
      const onShutdown = (): void => abort.abort(this.#shutdown.signal.reason);
      this.#shutdown.signal.addEventListener("abort", onShutdown, { once: true });
      for (const linked of linkedCancellations(req)) {
        if (linked.aborted) abort.abort(linked.reason);
        else linked.addEventListener("abort", () => abort.abort(linked.reason), { once: true });
      }
      const settled = handlerStarted(res);
      try {
        const result = await route.handler({
          body: body as never,
          rollout: rolloutOf(req),
          signal: abort.signal,
          req,
          res,
        });
        if (result !== undefined && !res.headersSent) res.json(result);
      } finally {
        settled();
        this.#shutdown.signal.removeEventListener("abort", onShutdown);
      }
    });
  }

  /** Starts listening. @default port 0 (any free port), host 127.0.0.1 */
  async listen(options: { port?: number; host?: string } = {}): Promise<ListeningAddress> {
    if (this.#http !== null) throw new ConfigError(`server ${this.name} is already listening`);
    const host = options.host ?? "127.0.0.1";
    const app = this.app();
    const worker = this.#worker;
    let listener: (req: IncomingMessage, res: ServerResponse) => void = app;
    if (worker !== null) {
      // Sessions live on the worker that made them: their requests go there first.
      this.#router = new SessionRouter(worker, (req) => this.sessionOwnerOf(req), app);
      listener = this.#router.listener;
      // Requests other workers pass on arrive as streams of one socket per worker pair, each
      // handed to an HTTP server of its own that never listens.
      const privateHttp = this.#createHttp(app);
      this.#privateHttp = privateHttp;
      const muxSockets = new Set<Socket>();
      const muxServer = createNetServer((socket) => {
        muxSockets.add(socket);
        socket.on("close", () => muxSockets.delete(socket));
        new SocketMux(socket, (stream) => privateHttp.emit("connection", stream));
      });
      this.#privateMux = { server: muxServer, sockets: muxSockets };
      await new Promise<void>((resolve, reject) => {
        muxServer.once("error", reject);
        // Exclusive: bound by this worker itself, not shared through the cluster's primary.
        const path = worker.socketOf(worker.routingId);
        muxServer.listen({ path, backlog: 65_535, exclusive: true }, () => {
          muxServer.off("error", reject);
          resolve();
        });
      });
    }
    // Only the public socket speaks TLS: the workers' private one stays on this machine.
    const http = this.#createHttp(listener, this.#tls);
    this.#http = http;
    // While closing, a keep-alive connection is cut as soon as its last response is sent.
    for (const server of [http, ...(this.#privateHttp === null ? [] : [this.#privateHttp])]) {
      server.on("request", (_req, res) => {
        res.on("finish", () => {
          if (this.#http !== http) setImmediate(() => server.closeIdleConnections());
        });
      });
    }
    await new Promise<void>((resolve, reject) => {
      http.once("error", reject);
      // A deep accept queue: thousands of rollouts connect at once (the kernel caps it at
      // net.core.somaxconn); Node's default of 511 times connections out under such bursts.
      http.listen({ port: options.port ?? 0, host, backlog: 65_535 }, () => {
        http.off("error", reject);
        resolve();
      });
    });
    const address = http.address() as AddressInfo;
    // Where the session secret came from (never its value), for whoever audits a deployment.
    this.logger.info(
      { port: address.port, host, session_secret: this.#sessionSecret.source },
      "listening",
    );
    // Once per server: a multi-worker server's first worker speaks for all of them.
    if (this.#tls === null && !isLoopbackHost(host) && (worker === null || worker.index === 0)) {
      this.logger.warn(
        { host, port: address.port },
        `listening on ${host}, which is not a loopback address, without TLS: the control token ` +
          "and all data cross the network in clear. Add a tls: block (cert_file, key_file, " +
          "ca_file) to the deployment file (see docs/deployment.md#tls), or bind 127.0.0.1",
      );
    }
    const scheme = this.#tls === null ? "http" : "https";
    return { host, port: address.port, url: `${scheme}://${host}:${address.port}` };
  }

  #createHttp(
    listener: (req: IncomingMessage, res: ServerResponse) => void,
    tls: ServerTlsOptions | null = null,
  ): HttpServer {
    const requestTimeout = this.requestTimeoutMs;
    const options = {
      requestTimeout,
      // Node checks the timeouts on this interval (30 s by default): a quarter of the bound
      // keeps it from stretching a short bound by much.
      connectionsCheckingInterval:
        requestTimeout > 0 ? Math.min(30_000, Math.max(250, requestTimeout / 4)) : 30_000,
    };
    // An HTTPS server is an HTTP server over TLS sockets: same requests, timeouts and closing.
    const http: HttpServer =
      tls === null
        ? createServer(options, listener)
        : createHttpsServer({ ...options, ...tls }, listener);
    // Longer than any client's idle keep-alive (the SDK's clients drop theirs after 4 s, the
    // session router's after 30 s), so a client never sends a request on a connection this
    // side is closing.
    http.keepAliveTimeout = 65_000;
    // Node bounds a request by the larger of the two timeouts: a shorter request bound needs
    // a head bound no longer than itself.
    http.headersTimeout = requestTimeout > 0 ? Math.min(66_000, requestTimeout) : 66_000;
    return http;
  }

  /**
   * Graceful shutdown: stops accepting connections, lets in-flight requests finish for
   * `shutdownGraceMs`, then aborts handlers' signals and cuts what remains.
   */
  /** Why `/ready` answers 503 now: admission closed, a restore installing, a worker missing. */
  #notReadyReasons(): string[] {
    const reasons: string[] = [];
    const worker = this.#worker;
    if (worker !== null && worker.lostWorkers.length > 0) {
      reasons.push(`worker(s) lost: ${worker.lostWorkers.join(", ")}`);
    } else if (worker !== null && !worker.allJoined) {
      reasons.push(`workers starting: ${worker.liveWorkers} of ${worker.count}`);
    }
    const controlPlane = this.#controlPlane;
    if (controlPlane !== null) {
      if (controlPlane.phase !== "idle") {
        reasons.push(
          `admission closed: checkpoint ${controlPlane.checkpointId} is ${controlPlane.phase}`,
        );
      }
      if (controlPlane.installing) reasons.push("a restore is still installing");
    }
    return reasons;
  }

  async close(): Promise<void> {
    this.#unwatch();
    this.#controlPlane?.close();
    const http = this.#http;
    if (http === null) {
      this.#shutdown.abort(new Error(`server ${this.name} is shutting down`));
      await this.#client?.close();
      return;
    }
    this.#http = null;
    const servers = [http, ...(this.#privateHttp === null ? [] : [this.#privateHttp])];
    this.#privateHttp = null;
    const closed = Promise.all(
      servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))),
    );
    for (const server of servers) server.closeIdleConnections();
    const grace = setTimeout(() => {
      this.#shutdown.abort(new Error(`server ${this.name} is shutting down`));
      for (const server of servers) server.closeAllConnections();
    }, this.shutdownGraceMs);
    grace.unref();
    const mux = this.#privateMux;
    this.#privateMux = null;
    mux?.server.close();
    await closed;
    this.#router?.close();
    for (const socket of mux?.sockets ?? []) socket.destroy();
    clearTimeout(grace);
    this.#shutdown.abort(new Error(`server ${this.name} is shutting down`));
    // Last: closing the client waits for its calls, which the aborted handlers have dropped.
    await this.#client?.destroy();
    this.logger.info("closed");
  }
}
