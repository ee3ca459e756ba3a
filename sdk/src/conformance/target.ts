/**
 * The server under test, as the kit calls it: raw HTTP with a bound on every call, so a check
 * can send what no well-behaved client would (a wrong token, a body that is not JSON) and see
 * exactly what came back. A call that gets no reply within its bound is {@link NoReply}, so a
 * server that hangs fails its check instead of hanging the kit.
 */
import { Agent, request } from "undici";
import { rolloutPath } from "../identity/rollout-prefix.js";
import { CONTROL_PREFIX, type Operation } from "../wire/control.js";

/** Bound on one call without its own, in ms. */
export const DEFAULT_CALL_TIMEOUT_MS = 10_000;

/** One reply: status, headers, the body as text and, when it parses, as JSON. */
export interface Reply {
  readonly status: number;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  readonly text: string;
  /** The body parsed as JSON; undefined when it is not JSON. */
  readonly json: unknown;
}

/** A call got no reply within its bound, or the connection failed. */
export class NoReply extends Error {
  override readonly name = "NoReply";
}

/** What to send. */
export interface CallOptions {
  /** A JSON value (encoded), or raw bytes/text sent as they are. */
  readonly body?: unknown;
  /** Send `body` as given, not JSON-encoded. */
  readonly raw?: boolean;
  readonly headers?: Readonly<Record<string, string>>;
  /** The cookie jar to send and update (data calls of one client). */
  readonly jar?: CookieJar;
  /** @default DEFAULT_CALL_TIMEOUT_MS */
  readonly timeoutMs?: number;
}

/** The cookies one client holds, by name (attributes ignored: one server, one path). */
export class CookieJar {
  readonly #cookies = new Map<string, string>();

  /** The `cookie` header to send, or null when empty. */
  header(): string | null {
    if (this.#cookies.size === 0) return null;
    return [...this.#cookies].map(([name, value]) => `${name}=${value}`).join("; ");
  }

  /** Keeps the cookies a reply sets. */
  update(setCookie: string | string[] | undefined): void {
    for (const line of setCookie === undefined ? [] : [setCookie].flat()) {
      const pair = line.split(";", 1)[0] ?? "";
      const eq = pair.indexOf("=");
      if (eq > 0) this.#cookies.set(pair.slice(0, eq).trim(), pair.slice(eq + 1).trim());
    }
  }

  /** How many cookies it holds. */
  get size(): number {
    return this.#cookies.size;
  }
}

/** The code of an error envelope `{"error": {"code"}}`, or null when the body is not one. */
export function errorCodeOf(reply: Reply): string | null {
  const error = (reply.json as { error?: { code?: unknown } } | null | undefined)?.error;
  return typeof error?.code === "string" ? error.code : null;
}

/** `HTTP 409 invalid_phase` / `HTTP 200`: a reply in a few words, for a failure's reason. */
export function describeReply(reply: Reply): string {
  const code = errorCodeOf(reply);
  return code === null ? `HTTP ${reply.status}` : `HTTP ${reply.status} ${code}`;
}

/** One server, its control token, and the connections the kit holds to it. */
export class Target {
  readonly url: string;
  readonly #token: string;
  #agent = new Agent({ keepAliveTimeout: 4_000, keepAliveMaxTimeout: 4_000 });

  /** @param url the server's base URL, `http://host:port` */
  constructor(url: string, token: string) {
    this.url = url.replace(/\/+$/, "");
    this.#token = token;
  }

  /** The `Authorization` header of the control routes. */
  get authorization(): string {
    return `Bearer ${this.#token}`;
  }

  /** `GET` or `POST` any path, as given. */
  async call(method: "GET" | "POST", path: string, options: CallOptions = {}): Promise<Reply> {
    const headers: Record<string, string> = { ...options.headers };
    let body: string | Buffer | undefined;
    if (options.body !== undefined) {
      body =
        options.raw === true ? (options.body as string | Buffer) : JSON.stringify(options.body);
      headers["content-type"] ??= "application/json";
    }
    const cookie = options.jar?.header() ?? null;
    if (cookie !== null) headers.cookie = cookie;
    const timeoutMs = options.timeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    let response;
    try {
      response = await request(`${this.url}${path}`, {
        method,
        headers,
        body,
        dispatcher: this.#agent,
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (error) {
      throw new NoReply(
        `${method} ${path}: no reply within ${timeoutMs} ms (${error instanceof Error ? error.message : String(error)})`,
        { cause: error },
      );
    }
    let text: string;
    try {
      text = await response.body.text();
    } catch (error) {
      throw new NoReply(
        `${method} ${path}: the reply's body did not arrive within ${timeoutMs} ms`,
        {
          cause: error,
        },
      );
    }
    options.jar?.update(response.headers["set-cookie"]);
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: response.statusCode, headers: response.headers, text, json };
  }

  /** A control call with the right token (unless `headers` says otherwise). */
  async control(
    operation: Exclude<Operation, "status">,
    body: unknown,
    options: Omit<CallOptions, "body"> = {},
  ): Promise<Reply> {
    return await this.call("POST", `${CONTROL_PREFIX}/${operation}`, {
      ...options,
      body,
      headers: { authorization: this.authorization, ...options.headers },
    });
  }

  /** `GET .../status` with the right token. */
  async status(options: Omit<CallOptions, "body"> = {}): Promise<Reply> {
    return await this.call("GET", `${CONTROL_PREFIX}/status`, {
      ...options,
      headers: { authorization: this.authorization, ...options.headers },
    });
  }

  /** A data call, under the rollout prefix of `rollout` (a capture key) when given. */
  async data(
    path: string,
    body: unknown,
    options: CallOptions & { readonly rollout?: string | null } = {},
  ): Promise<Reply> {
    const full = options.rollout == null ? path : rolloutPath(options.rollout, path);
    return await this.call("POST", full, { ...options, body });
  }

  /** Drops the kit's connections (the server was restarted: they lead nowhere). */
  async reconnect(): Promise<void> {
    const old = this.#agent;
    this.#agent = new Agent({ keepAliveTimeout: 4_000, keepAliveMaxTimeout: 4_000 });
    await old.destroy();
  }

  /** Closes the kit's connections. */
  async close(): Promise<void> {
    await this.#agent.close();
  }
}
