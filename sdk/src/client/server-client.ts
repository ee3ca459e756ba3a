import { context, propagation } from "@opentelemetry/api";
import { Agent, Pool, type Dispatcher } from "undici";
import { ConfigError } from "../errors.js";
import { timeoutSignal } from "../util/deadline.js";
import { clientTlsOptions, isTlsFailure } from "./tls.js";
import { captureKey, type EpisodeId } from "../identity/episode-id.js";
import { rolloutPath } from "../identity/rollout-prefix.js";
import { CONTROLLER_TIME_HEADER, CONTROL_PREFIX, type Operation } from "../wire/control.js";
import type { ResolvedDeployment, ResolvedServer } from "../wire/deployment.js";
import {
  ServerReplyError,
  ServerUnreachableError,
  UnknownServerError,
  type UnreachableReason,
} from "./errors.js";

/**
 * `headers` with the active trace context (`traceparent`) added, so the called server continues
 * the caller's trace. Without a registered propagator (tracing off) nothing is added.
 */
function withTraceContext(headers: Record<string, string>): Record<string, string> {
  propagation.inject(context.active(), headers);
  return headers;
}

/**
 * Idle keep-alive connections are dropped after 4 s on this side, well before a gym server
 * drops them (65 s): a request is never sent on a connection the server is closing, which would
 * fail it after it may have been sent (and nothing is re-sent).
 */
export const IDLE = { keepAliveTimeout: 4_000, keepAliveMaxTimeout: 4_000 } as const;

/**
 * Bound on establishing a connection under a burst, in ms: see
 * {@link ServerClientOptions.connectTimeoutMs}. Every pool that opens thousands of connections at
 * once (the controller's, the policy model's to its backend) uses it.
 */
export const BURST_CONNECT_TIMEOUT_MS = 60_000;

/** Options of a {@link ServerClient}; resolved and validated once at construction. */
export interface ServerClientOptions {
  /**
   * Connections per server for data calls (model, resources, agent, `/run`). 0 means no limit.
   * @default 0
   */
  readonly dataConnectionsPerServer?: number;
  /**
   * Connections per server reserved for control calls, so data calls parked during a checkpoint
   * can never starve prepare, commit or resume. 0 means no limit.
   * @default 16
   */
  readonly controlConnectionsPerServer?: number;
  /**
   * Connections per resources server for data calls (tool calls, seed, verify, close: short
   * calls that may come in bursts of thousands). 0 means no limit. Calls to other kinds hold
   * their connection for a whole generation or activation and follow `dataConnectionsPerServer`.
   * @default 256
   */
  readonly resourcesConnectionsPerServer?: number;
  /** Bound on a data call without its own `timeoutMs`, in ms. @default 3_600_000 (one hour) */
  readonly dataTimeoutMs?: number;
  /**
   * Bound on establishing a connection, in ms. A server that is down refuses at once; the bound
   * is for one overloaded by a burst (thousands of `/run` calls at once overflow its accept
   * queue, and the kernel retransmits a dropped handshake after 1, 3, 7, 15, 31 s in all). 60 s
   * lets the fifth retransmission land: under 8,000 calls at once on two cores, a 30 s bound still
   * failed a dozen. @default 60_000
   */
  readonly connectTimeoutMs?: number;
  /**
   * Extra headers on every call to the named servers (a call's own headers win). A worker of a
   * multi-worker server names itself in `x-ng-session-owner` on calls to its own server, so a
   * self-call within one request (an agent's legacy `/run`) reaches the same process.
   * @default none
   */
  readonly serverHeaders?: Readonly<Record<string, Readonly<Record<string, string>>>>;
}

interface CompiledOptions {
  readonly dataConnectionsPerServer: number;
  readonly resourcesConnectionsPerServer: number;
  readonly controlConnectionsPerServer: number;
  readonly dataTimeoutMs: number;
  readonly connectTimeoutMs: number;
}

function compile(options: ServerClientOptions): CompiledOptions {
  const compiled = {
    dataConnectionsPerServer: options.dataConnectionsPerServer ?? 0,
    resourcesConnectionsPerServer: options.resourcesConnectionsPerServer ?? 256,
    controlConnectionsPerServer: options.controlConnectionsPerServer ?? 16,
    dataTimeoutMs: options.dataTimeoutMs ?? 3_600_000,
    connectTimeoutMs: options.connectTimeoutMs ?? BURST_CONNECT_TIMEOUT_MS,
  };
  for (const [name, value] of Object.entries(compiled)) {
    const positive = name.endsWith("Ms");
    if (!Number.isSafeInteger(value) || value < 0 || (positive && value === 0)) {
      throw new ConfigError(
        `ServerClient option ${name} must be an integer ${positive ? "> 0" : ">= 0 (0: no limit)"}, got ${value}`,
      );
    }
  }
  return compiled;
}

/** Options of one data call. */
export interface CallOptions {
  /**
   * The rollout the call is made for. With checkpointing on, the call goes to
   * `/ng-rollout/<capture key>/<path>`, so the callee can fence and track it.
   */
  readonly rollout?: EpisodeId | string | null;
  /** Bound on the whole call, in ms. @default the client's `dataTimeoutMs` */
  readonly timeoutMs?: number;
  /** Cancels the call. */
  readonly signal?: AbortSignal;
  /** Extra request headers. */
  readonly headers?: Record<string, string>;
}

/** A reply of {@link ServerClient.postText}: any status, the body as text. */
export interface TextReply {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: string;
}

/** A reply: status, headers and the parsed JSON body. */
export interface CallReply<T> {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: T;
}

/**
 * Calls the servers of a deployment by name. Data calls and control calls use separate
 * connection pools (undici agents): data calls that a checkpoint parks hold only data
 * connections. Every call is bounded; a non-2xx reply becomes a {@link ServerReplyError} with the
 * remote error code; a failure to connect or a lost connection a {@link ServerUnreachableError}.
 * Nothing is retried after a request was sent, so a `/run` is never sent twice.
 *
 * @example
 * const client = new ServerClient(deployment);
 * const reply = await client.post("counter", "/increment", { by: 1 }, { rollout: "task-3-a1" });
 *
 * @see docs/controller.md
 */
export class ServerClient {
  readonly deployment: ResolvedDeployment;
  readonly #options: CompiledOptions;
  readonly #serverHeaders: Readonly<Record<string, Readonly<Record<string, string>>>>;
  readonly #data: Agent;
  readonly #control: Agent;

  constructor(deployment: ResolvedDeployment, options: ServerClientOptions = {}) {
    this.deployment = deployment;
    this.#options = compile(options);
    this.#serverHeaders = options.serverHeaders ?? {};
    // Read once: the deployment's CA (and, under mutual TLS, the certificate this side presents).
    const connect = {
      timeout: this.#options.connectTimeoutMs,
      ...clientTlsOptions(deployment.tls),
    };
    const resourceOrigins = new Set(
      Object.values(deployment.servers)
        .filter((server) => server.kind === "resources")
        .map((server) => new URL(server.url).origin),
    );
    const dataLimit = this.#options.dataConnectionsPerServer || null;
    const ownLimit = this.#options.resourcesConnectionsPerServer || null;
    // dataConnectionsPerServer caps every data pool; resources pools may be capped lower.
    const resourcesLimit =
      dataLimit === null || ownLimit === null
        ? (dataLimit ?? ownLimit)
        : Math.min(dataLimit, ownLimit);
    this.#data = new Agent({
      connections: dataLimit,
      connect,
      ...IDLE,
      // Each open connection is a file: a process has a bounded number of them.
      factory: (origin, options) =>
        new Pool(origin, {
          ...options,
          connections: resourceOrigins.has(String(origin)) ? resourcesLimit : dataLimit,
        }),
    });
    this.#control = new Agent({
      connections: this.#options.controlConnectionsPerServer || null,
      connect,
      ...IDLE,
    });
  }

  /** Whether the deployment's `checkpoint:` block enables checkpointing. */
  get checkpointEnabled(): boolean {
    return this.deployment.checkpoint?.enabled === true;
  }

  /** The server names, sorted. */
  serverNames(): string[] {
    return Object.keys(this.deployment.servers).sort();
  }

  /** A server's entry, or {@link UnknownServerError}. */
  server(name: string): ResolvedServer {
    // Own keys only: `constructor` or `toString` is no server unless the deployment names it.
    const servers = this.deployment.servers;
    if (!Object.hasOwn(servers, name)) throw new UnknownServerError(name, this.serverNames());
    return servers[name] as ResolvedServer;
  }

  /** The path a data call is sent to: prefixed with the rollout when checkpointing is on. */
  dataPath(path: string, rollout: EpisodeId | string | null | undefined): string {
    const normalized = path.startsWith("/") ? path : `/${path}`;
    if (!this.checkpointEnabled || rollout === null || rollout === undefined) return normalized;
    return rolloutPath(typeof rollout === "string" ? rollout : captureKey(rollout), normalized);
  }

  /** POSTs JSON to a server's data route and returns the parsed reply body. */
  async post<T = unknown>(
    server: string,
    path: string,
    body: unknown,
    options: CallOptions = {},
  ): Promise<T> {
    return (await this.postWithReply<T>(server, path, body, options)).body;
  }

  /** Like {@link post}, also returning status and headers (e.g. seed-reply headers). */
  async postWithReply<T = unknown>(
    server: string,
    path: string,
    body: unknown,
    options: CallOptions = {},
  ): Promise<CallReply<T>> {
    return await this.#call<T>(this.#data, server, "POST", this.dataPath(path, options.rollout), {
      body: JSON.stringify(body ?? null),
      timeoutMs: options.timeoutMs ?? this.#options.dataTimeoutMs,
      signal: options.signal,
      headers: options.headers,
    });
  }

  /**
   * POSTs JSON to a server's data route and returns the reply whatever its status, with the
   * body as text: for calls whose every status is an answer (a tool's output), or that need
   * the reply's cookies. Unlike {@link post}, `path` is sent as given: prefix it yourself.
   */
  async postText(
    server: string,
    path: string,
    body: unknown,
    options: Omit<CallOptions, "rollout"> = {},
  ): Promise<TextReply> {
    return await this.#call<string>(
      this.#data,
      server,
      "POST",
      path.startsWith("/") ? path : `/${path}`,
      {
        body: JSON.stringify(body ?? null),
        timeoutMs: options.timeoutMs ?? this.#options.dataTimeoutMs,
        signal: options.signal,
        headers: options.headers,
      },
      true,
    );
  }

  /** GETs a server's data route and returns the parsed reply body. */
  async get<T = unknown>(server: string, path: string, options: CallOptions = {}): Promise<T> {
    const reply = await this.#call<T>(
      this.#data,
      server,
      "GET",
      this.dataPath(path, options.rollout),
      {
        body: null,
        timeoutMs: options.timeoutMs ?? this.#options.dataTimeoutMs,
        signal: options.signal,
        headers: options.headers,
      },
    );
    return reply.body;
  }

  /**
   * Sends one control operation over the reserved control pool. `body` is the already-encoded
   * JSON (coordination encodes a fan-out body once and sends the same bytes everywhere).
   */
  async control<T = unknown>(
    server: string,
    operation: Operation,
    body: Uint8Array | null,
    options: { token: string; timeoutMs: number; signal?: AbortSignal },
  ): Promise<T> {
    return (await this.controlWithReply<T>(server, operation, body, options)).body;
  }

  /**
   * Like {@link control}, also returning status and headers (discovery reads the reply's
   * `Date` when a status reply has no `now`). Every control call carries this side's clock in
   * `x-ng-controller-time`, so a participant can report its offset from the controller's.
   */
  async controlWithReply<T = unknown>(
    server: string,
    operation: Operation,
    body: Uint8Array | null,
    options: { token: string; timeoutMs: number; signal?: AbortSignal },
  ): Promise<CallReply<T>> {
    return await this.#call<T>(
      this.#control,
      server,
      operation === "status" ? "GET" : "POST",
      `${CONTROL_PREFIX}/${operation}`,
      {
        body,
        timeoutMs: options.timeoutMs,
        signal: options.signal,
        headers: {
          authorization: `Bearer ${options.token}`,
          [CONTROLLER_TIME_HEADER]: (Date.now() / 1000).toFixed(3),
        },
      },
    );
  }

  /** Destroys both pools: calls still in flight fail at once. */
  async destroy(): Promise<void> {
    await Promise.all([this.#data.destroy(), this.#control.destroy()]);
  }

  /** Closes both pools. */
  async close(): Promise<void> {
    await Promise.all([this.#data.close(), this.#control.close()]);
  }

  async #call<T>(
    agent: Agent,
    server: string,
    method: "GET" | "POST",
    path: string,
    call: {
      body: string | Uint8Array | null;
      timeoutMs: number;
      signal: AbortSignal | undefined;
      headers: Record<string, string> | undefined;
    },
    raw = false,
  ): Promise<CallReply<T>> {
    const origin = new URL(this.server(server).url).origin;
    if (!(call.timeoutMs >= 0) || !Number.isFinite(call.timeoutMs)) {
      throw new RangeError(
        `${method} ${path}: timeoutMs must be a finite number >= 0, got ${call.timeoutMs}`,
      );
    }
    const bound = timeoutSignal(call.timeoutMs, () => new Error("the call's time bound passed"));
    try {
      return await this.#send<T>(agent, server, origin, method, path, call, bound.signal, raw);
    } finally {
      bound.dispose();
    }
  }

  async #send<T>(
    agent: Agent,
    server: string,
    origin: string,
    method: "GET" | "POST",
    path: string,
    call: {
      body: string | Uint8Array | null;
      signal: AbortSignal | undefined;
      headers: Record<string, string> | undefined;
    },
    timeout: AbortSignal,
    raw: boolean,
  ): Promise<CallReply<T>> {
    const signal = call.signal === undefined ? timeout : AbortSignal.any([timeout, call.signal]);
    let response: Dispatcher.ResponseData;
    try {
      response = await agent.request({
        origin,
        path,
        method,
        signal,
        headers: withTraceContext({
          ...(call.body === null ? {} : { "content-type": "application/json" }),
          ...this.#serverHeaders[server],
          ...call.headers,
        }),
        body: call.body,
        // The whole-call bound is the signal; undici's own timers would cut long generations.
        headersTimeout: 0,
        bodyTimeout: 0,
      });
    } catch (error) {
      throw new ServerUnreachableError(server, method, path, unreachableReason(error, timeout), {
        cause: error,
      });
    }
    let text: string;
    try {
      text = await response.body.text();
    } catch (error) {
      throw new ServerUnreachableError(server, method, path, unreachableReason(error, timeout), {
        cause: error,
      });
    }
    if (raw) return { status: response.statusCode, headers: response.headers, body: text as T };
    const parsed = parseJson(text);
    if (response.statusCode < 200 || response.statusCode >= 300) {
      const envelope = (parsed as { error?: { code?: unknown; detail?: unknown } } | undefined)
        ?.error;
      const code =
        typeof envelope?.code === "string" ? envelope.code : `http_${response.statusCode}`;
      const detail =
        typeof envelope?.detail === "string"
          ? envelope.detail
          : text.slice(0, 500) || "(empty body)";
      throw new ServerReplyError(server, method, path, response.statusCode, code, detail);
    }
    return { status: response.statusCode, headers: response.headers, body: parsed as T };
  }
}

function parseJson(text: string): unknown {
  if (text.length === 0) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

function unreachableReason(error: unknown, timeout: AbortSignal): UnreachableReason {
  if (timeout.aborted) return "timeout";
  const code = (error as { code?: string }).code ?? "";
  const name = (error as { name?: string }).name ?? "";
  if (name === "AbortError" || code === "UND_ERR_ABORTED") return "aborted";
  if (isTlsFailure(error)) return "tls";
  if (
    code === "ECONNREFUSED" ||
    code === "UND_ERR_CONNECT_TIMEOUT" ||
    code === "ENOTFOUND" ||
    // A machine that is gone: no route, no answer to ARP, or the kernel gave up on the SYN.
    code === "EHOSTUNREACH" ||
    code === "ENETUNREACH" ||
    code === "EHOSTDOWN" ||
    code === "ETIMEDOUT"
  ) {
    return "connect";
  }
  return "connection_lost";
}
