/**
 * A scripted fake resources server for environment-server tests, and the small recording HTTP
 * server it (and `fake-agent-server.ts`) is built on.
 *
 * ## Paths
 * Every route is also answered under the rollout prefix (`/ng-rollout/<capture key>/<route>`);
 * a call records the path as sent, the route without the prefix and the capture key. Unknown
 * routes get 404 (recorded too).
 *
 * ## Resources routes
 * - `POST /seed_session`: `{resources_session_id}` echoed, `Set-Cookie: resources_session=<id>`
 *   (unless `settings.cookie` is false), `x-ng-checkpoint-verify: <settings.verifyMode>` and
 *   `x-ng-checkpoint-restart: 1` when set, `resources_tools` when set.
 * - `POST /verify`: the body plus `reward: settings.reward`.
 * - `POST /close_session`: `{resources_session_id}` echoed.
 * - `POST /aggregate_metrics`: `{aggregated: <body>}`.
 *
 * ## Failures, holds and waits (no sleeps)
 * {@link ScriptedServer.failNext} answers the next call(s) of a route with an error reply.
 * {@link ScriptedServer.hold} withholds the replies of matching calls until released;
 * `hold.arrived` resolves the moment the first one is held. {@link ScriptedServer.nextCall}
 * resolves when the next matching call arrives. A held call whose client goes away is dropped.
 *
 * @example
 * const resources = await startFakeResourcesServer({ verifyMode: "replay" });
 * const hold = resources.hold("/verify");
 * // ... drive the environment server, then:
 * await hold.arrived;
 * hold.release();
 * await resources.close();
 */
import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type ServerResponse,
} from "node:http";
import type { AddressInfo } from "node:net";
import { splitRolloutPath } from "#sdk/identity/rollout-prefix.js";
import { parseCookieHeader, type CookieJar } from "#sdk/util/cookies.js";
import { deferred, type Deferred } from "#sdk/util/deferred.js";

/** Arrivals across every fake of the process, so calls to several fakes can be ordered. */
let arrivals = 0;

/** One call a fake received. */
export interface FakeCall {
  /** 1-based arrival number on this server. */
  readonly n: number;
  /** Arrival number across every fake of this process. */
  readonly seq: number;
  readonly method: string;
  /** The path as sent, prefix included, query dropped. */
  readonly path: string;
  /** The path without its rollout prefix. */
  readonly route: string;
  /** The capture key of the rollout prefix, or null without one. */
  readonly captureKey: string | null;
  readonly headers: IncomingHttpHeaders;
  readonly cookies: CookieJar;
  /** The parsed JSON body (the raw text when it is not JSON; undefined when empty). */
  readonly body: unknown;
  /** Aborts when the client goes away before the reply. */
  readonly signal: AbortSignal;
}

/** A reply of a fake. */
export interface FakeReply {
  /** @default 200 */
  readonly status?: number;
  readonly headers?: Record<string, string | string[]>;
  readonly body?: unknown;
}

/** Answers one route. */
export type FakeHandler = (call: FakeCall) => FakeReply | Promise<FakeReply>;

/** Selects calls. */
export type CallMatch = (call: FakeCall) => boolean;

/** Withheld replies of matching calls. */
export interface CallHold {
  /** Resolves with the first call held. */
  readonly arrived: Promise<FakeCall>;
  /** Lets every held (and later matching) call through; with `reply`, they answer with it. */
  release(reply?: FakeReply): void;
}

interface ActiveHold {
  readonly route: string;
  readonly match: CallMatch;
  readonly first: Deferred<FakeCall>;
  readonly gate: Deferred<FakeReply | undefined>;
  held: boolean;
}

/** A recording HTTP server answering scripted routes. */
export class ScriptedServer {
  readonly calls: FakeCall[] = [];
  readonly #handlers = new Map<string, FakeHandler>();
  readonly #failures = new Map<string, FakeReply[]>();
  readonly #holds: ActiveHold[] = [];
  readonly #waiters: { route: string; match: CallMatch; found: Deferred<FakeCall> }[] = [];
  readonly #http = createServer((req, res) => void this.#serve(req, res));
  #port = 0;

  /** `http://127.0.0.1:<port>` once started (kept after close). */
  get url(): string {
    return `http://127.0.0.1:${this.#port}`;
  }

  /** The port once started (kept after close). */
  get port(): number {
    return this.#port;
  }

  /** Answers `POST <route>` (also under a rollout prefix) with `handler`. */
  route(route: string, handler: FakeHandler): this {
    this.#handlers.set(route, handler);
    return this;
  }

  /** The routes called so far, in arrival order. */
  routes(): string[] {
    return this.calls.map((call) => call.route);
  }

  /** The calls of one route. */
  callsTo(route: string): FakeCall[] {
    return this.calls.filter((call) => call.route === route);
  }

  /** Answers the next `times` calls of `route` with `reply` (a status: an error body). */
  failNext(route: string, reply: FakeReply | number = 500, times = 1): void {
    const failure =
      typeof reply === "number"
        ? { status: reply, body: { error: { code: `http_${reply}`, detail: "scripted" } } }
        : reply;
    const queue = this.#failures.get(route) ?? [];
    for (let i = 0; i < times; i++) queue.push(failure);
    this.#failures.set(route, queue);
  }

  /** Withholds the replies of calls of `route` (matching `match`) until released. */
  hold(route: string, match: CallMatch = () => true): CallHold {
    const hold: ActiveHold = {
      route,
      match,
      first: deferred<FakeCall>(),
      gate: deferred<FakeReply | undefined>(),
      held: false,
    };
    this.#holds.push(hold);
    return {
      arrived: hold.first.promise,
      release: (reply) => {
        const at = this.#holds.indexOf(hold);
        if (at >= 0) this.#holds.splice(at, 1);
        hold.gate.resolve(reply);
      },
    };
  }

  /** Resolves with the next call of `route` (matching `match`) to arrive. */
  nextCall(route: string, match: CallMatch = () => true): Promise<FakeCall> {
    const found = deferred<FakeCall>();
    this.#waiters.push({ route, match, found });
    return found.promise;
  }

  /** Forgets the calls recorded so far. */
  clearCalls(): void {
    this.calls.length = 0;
  }

  async listen(): Promise<void> {
    await new Promise<void>((resolve) => this.#http.listen(0, "127.0.0.1", resolve));
    this.#port = (this.#http.address() as AddressInfo).port;
  }

  /** Lets held calls go and stops, cutting open connections. */
  async close(): Promise<void> {
    for (const hold of this.#holds.splice(0)) hold.gate.resolve(undefined);
    const closed = new Promise<void>((resolve) => this.#http.close(() => resolve()));
    this.#http.closeAllConnections();
    await closed;
  }

  async #serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const abort = new AbortController();
    res.on("close", () => {
      if (!res.writableFinished) abort.abort(new Error("the client went away"));
    });
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString("utf8");
    let body: unknown = undefined;
    if (text.length > 0) {
      try {
        body = JSON.parse(text) as unknown;
      } catch {
        body = text;
      }
    }
    const path = (req.url ?? "/").split("?", 1)[0] ?? "/";
    const split = splitRolloutPath(path);
    const prefixed = split !== null && !("malformed" in split) ? split : null;
    const call: FakeCall = {
      n: this.calls.length + 1,
      seq: ++arrivals,
      method: req.method ?? "GET",
      path,
      route: prefixed?.rest ?? path,
      captureKey: prefixed?.captureKey ?? null,
      headers: req.headers,
      cookies: parseCookieHeader(req.headers.cookie),
      body,
      signal: abort.signal,
    };
    this.calls.push(call);
    for (const waiter of [...this.#waiters]) {
      if (waiter.route !== call.route || !waiter.match(call)) continue;
      this.#waiters.splice(this.#waiters.indexOf(waiter), 1);
      waiter.found.resolve(call);
    }
    const failure = this.#failures.get(call.route)?.shift();
    const hold = this.#holds.find((h) => h.route === call.route && h.match(call));
    let override: FakeReply | undefined;
    if (hold !== undefined) {
      hold.first.resolve(call);
      override = await Promise.race([
        hold.gate.promise,
        new Promise<undefined>((resolve) =>
          abort.signal.addEventListener("abort", () => resolve(undefined)),
        ),
      ]);
      if (abort.signal.aborted) return; // dropped quietly
    }
    const handler = this.#handlers.get(call.route);
    let reply: FakeReply;
    try {
      reply =
        override ??
        failure ??
        (handler === undefined
          ? { status: 404, body: { error: { code: "not_found", detail: call.route } } }
          : await handler(call));
    } catch (error) {
      reply = { status: 500, body: { error: { code: "fake_error", detail: String(error) } } };
    }
    if (res.destroyed) return;
    res.statusCode = reply.status ?? 200;
    for (const [name, value] of Object.entries(reply.headers ?? {})) res.setHeader(name, value);
    if (reply.body === undefined) {
      res.end();
    } else {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify(reply.body));
    }
  }
}

/** The cookie a fake resources server sets on a seed. */
export const RESOURCES_COOKIE = "resources_session";

/** What the fake resources server answers; change them between calls as a test needs. */
export interface FakeResourcesSettings {
  /** `x-ng-checkpoint-verify` on seed replies; null: no header. @default null */
  verifyMode: "wait" | "replay" | null;
  /** Send `x-ng-checkpoint-restart: 1` on seed replies. @default false */
  restart: boolean;
  /** Set the session cookie on seed replies. @default true */
  cookie: boolean;
  /** `resources_tools` of seed replies; null: left out. @default null */
  resourcesTools: Record<string, unknown> | null;
  /** The reward `/verify` answers. @default 1 */
  reward: number;
}

/** A fake resources server. */
export interface FakeResourcesServer extends ScriptedServer {
  readonly settings: FakeResourcesSettings;
}

/** Starts a fake resources server on a free port. */
export async function startFakeResourcesServer(
  settings: Partial<FakeResourcesSettings> = {},
): Promise<FakeResourcesServer> {
  const s: FakeResourcesSettings = {
    verifyMode: null,
    restart: false,
    cookie: true,
    resourcesTools: null,
    reward: 1,
    ...settings,
  };
  const server: FakeResourcesServer = Object.assign(new ScriptedServer(), { settings: s });
  const sessionOf = (call: FakeCall): unknown =>
    (call.body as { resources_session_id?: unknown } | undefined)?.resources_session_id;
  server
    .route("/seed_session", (call) => {
      const headers: Record<string, string> = {};
      if (s.cookie)
        headers["set-cookie"] = `${RESOURCES_COOKIE}=${String(sessionOf(call))}; Path=/`;
      if (s.verifyMode !== null) headers["x-ng-checkpoint-verify"] = s.verifyMode;
      if (s.restart) headers["x-ng-checkpoint-restart"] = "1";
      const body: Record<string, unknown> = { resources_session_id: sessionOf(call) };
      if (s.resourcesTools !== null) body.resources_tools = s.resourcesTools;
      return { headers, body };
    })
    .route("/verify", (call) => ({ body: { ...(call.body as object), reward: s.reward } }))
    .route("/close_session", (call) => ({ body: { resources_session_id: sessionOf(call) } }))
    .route("/aggregate_metrics", (call) => ({ body: { aggregated: call.body } }));
  await server.listen();
  return server;
}
