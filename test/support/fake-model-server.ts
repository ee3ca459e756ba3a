/**
 * A scripted fake policy-model server for tests: it speaks the OpenAI Responses API shape
 * (`POST /v1/responses`, JSON only, no streaming) and answers from per-rollout scripts.
 *
 * ## Paths
 * It answers `POST /v1/responses`, also under the rollout prefix
 * (`/ng-rollout/<capture key>/v1/responses`) and with the token-capture segment
 * (`[/ng-rollout/<capture key>]/training-token-capture/v1/responses`). A query string is
 * ignored. Other paths get 404, other methods 405, a malformed prefix key 400
 * `invalid_rollout_id`, a body that is not a JSON object 400; none of these is recorded.
 *
 * ## Scripts
 * {@link FakeModelServer.script} queues replies under a capture key (exactly as written in the
 * path, e.g. `r-a1`), or under `"*"` (or null), the default queue. A call takes the next reply of
 * its own key's queue, else of the default queue, else `defaultReply` (an assistant message
 * `"done"`), so a test never hangs on an exhausted script. The reply is taken when the call
 * arrives (arrival order decides who gets what); a function reply is evaluated when the reply is
 * about to be sent (after any hold), with the call as input.
 *
 * A reply is a Responses JSON object (sent with 200 as is; build one with {@link message},
 * {@link functionCall}, {@link functionCalls}, {@link incomplete} or {@link response}), an HTTP
 * error `{ status: 500, body }` (see {@link httpError}), or a function of the call returning
 * either. A function that throws answers 500.
 *
 * ## Cookies
 * Every reply (errors included) sets `model_session=<n>; Path=/`, `n` being the 1-based number
 * of the call, so an agent's cookie forwarding shows in the next call's `cookies`. The name,
 * value and attributes are set by {@link FakeModelServerOptions.cookie}; `false` turns it off.
 *
 * ## Holds and waits (no sleeps)
 * {@link FakeModelServer.hold} withholds the replies of matching calls (they are still received
 * and recorded) until the test releases the hold; `hold.arrived(n)` resolves the moment the n-th
 * matching call is held. {@link FakeModelServer.nextCall} resolves when the next matching call
 * arrives. Both are event-driven. A held call whose client disconnects is dropped quietly (its
 * `signal` aborts); the server keeps serving.
 *
 * @example
 * const model = await startFakeModelServer();
 * model.script("r-a0", [functionCall("get_weather", { city: "Paris" }), message("Sunny.")]);
 * const hold = model.hold((call) => call.captureKey === "r-a1");
 * // ... drive the agent, then:
 * await hold.arrived();
 * hold.release();
 * await model.close();
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { splitRolloutPath } from "#sdk/identity/rollout-prefix.js";
import { deferred, type Deferred } from "#sdk/util/deferred.js";

// -------------------------------------------------------------------- response shapes

/** Token usage of a response. */
export interface FakeUsage {
  readonly input_tokens: number;
  readonly output_tokens: number;
  readonly total_tokens: number;
}

/** An `output_text` content part of an assistant message. */
export interface FakeOutputText {
  readonly type: "output_text";
  readonly text: string;
  readonly annotations: readonly unknown[];
}

/** An assistant `message` output item. */
export interface FakeMessageItem {
  readonly type: "message";
  readonly id: string;
  readonly role: "assistant";
  readonly status: "completed" | "incomplete";
  readonly content: readonly FakeOutputText[];
}

/** A `function_call` output item; `arguments` is a JSON string, as on the wire. */
export interface FakeFunctionCallItem {
  readonly type: "function_call";
  readonly id: string;
  readonly call_id: string;
  readonly name: string;
  readonly arguments: string;
  readonly status: "completed";
}

/** An output item the builders make; a hand-written response may hold any other item. */
export type FakeOutputItem = FakeMessageItem | FakeFunctionCallItem;

/**
 * A Responses JSON object as sent on the wire. The builders fill every field below; a
 * hand-written one only needs `object: "response"` and is sent verbatim.
 */
export interface ResponsesJson {
  readonly object: "response";
  readonly [field: string]: unknown;
}

/** A response made by the builders. */
export interface FakeResponse extends ResponsesJson {
  /** `resp_<n>`, unique in the process. */
  readonly id: string;
  readonly object: "response";
  /** Unix seconds. */
  readonly created_at: number;
  readonly model: string;
  readonly status: "completed" | "incomplete";
  readonly output: readonly FakeOutputItem[];
  readonly usage: FakeUsage;
  readonly incomplete_details: { readonly reason: string } | null;
}

/** An HTTP error reply: `body` is sent as JSON with `status`. */
export interface FakeHttpError {
  readonly status: number;
  /** @default an OpenAI-style `{ error: { message, type, param, code } }` */
  readonly body?: unknown;
  /** Extra response headers (e.g. `retry-after`). */
  readonly headers?: Readonly<Record<string, string>>;
}

/** A reply that is a value: a response or an HTTP error. */
export type FakeReplyValue = ResponsesJson | FakeHttpError;

/** A reply computed from the call when it is about to be sent. */
export type FakeReplyFn = (call: FakeModelCall) => FakeReplyValue | Promise<FakeReplyValue>;

/** One scripted reply. */
export type FakeReply = FakeReplyValue | FakeReplyFn;

// -------------------------------------------------------------------- builders

/** The model name builders put in responses unless told otherwise. */
export const FAKE_MODEL_NAME = "fake-model";

/** The `input_tokens` builders report unless told otherwise. */
export const DEFAULT_INPUT_TOKENS = 10;

/** Options of the response builders. */
export interface ResponseOptions {
  /** @default {@link FAKE_MODEL_NAME} */
  readonly model?: string;
  /** @default a fresh `resp_<n>` */
  readonly id?: string;
  /** @default {@link DEFAULT_INPUT_TOKENS} */
  readonly inputTokens?: number;
  /** @default the number of words of the output's texts and arguments */
  readonly outputTokens?: number;
}

/** One function call of {@link functionCalls}. */
export interface FunctionCallSpec {
  readonly name: string;
  /** An object (JSON-encoded for the wire) or the arguments string itself. */
  readonly args: unknown;
  /** @default a fresh `call_<n>` */
  readonly callId?: string;
}

let nextId = 0;
function freshId(prefix: string): string {
  nextId += 1;
  return `${prefix}_${nextId}`;
}

function wordCount(text: string): number {
  return text.split(/\s+/).filter((word) => word.length > 0).length;
}

function outputWords(output: readonly FakeOutputItem[]): number {
  let words = 0;
  for (const item of output) {
    if (item.type === "message") for (const part of item.content) words += wordCount(part.text);
    else words += wordCount(item.arguments.replace(/[{}[\]",:]/g, " "));
  }
  return words;
}

/**
 * An assistant `message` output item with one `output_text` part.
 *
 * @example
 * response([messageItem("Let me check."), functionCallItem("lookup", { q: "x" })]);
 */
export function messageItem(
  text: string,
  status: FakeMessageItem["status"] = "completed",
): FakeMessageItem {
  return {
    type: "message",
    id: freshId("msg"),
    role: "assistant",
    status,
    content: [{ type: "output_text", text, annotations: [] }],
  };
}

/**
 * A `function_call` output item; an object `args` is JSON-encoded, a string is kept as is.
 *
 * @example
 * functionCallItem("get_weather", { city: "Paris" }, "call_1").arguments; // '{"city":"Paris"}'
 */
export function functionCallItem(
  name: string,
  args: unknown,
  callId?: string,
): FakeFunctionCallItem {
  return {
    type: "function_call",
    id: freshId("fc"),
    call_id: callId ?? freshId("call"),
    name,
    arguments: typeof args === "string" ? args : JSON.stringify(args),
    status: "completed",
  };
}

/**
 * A completed response with the given output items.
 *
 * @example
 * response([messageItem("a"), messageItem("b")], { model: "policy" });
 */
export function response(
  output: readonly FakeOutputItem[],
  options: ResponseOptions = {},
): FakeResponse {
  return build("completed", output, null, options);
}

/**
 * A completed response with one assistant message.
 *
 * @example
 * model.script("*", [message("Hello!")]);
 */
export function message(text: string, options: ResponseOptions = {}): FakeResponse {
  return response([messageItem(text)], options);
}

/**
 * A completed response with one function call.
 *
 * @example
 * model.script("r-a0", [functionCall("add", { a: 1, b: 2 }, "call_add")]);
 */
export function functionCall(
  name: string,
  args: unknown,
  callId?: string,
  options: ResponseOptions = {},
): FakeResponse {
  return response([functionCallItem(name, args, callId)], options);
}

/**
 * A completed response with several function calls, in order.
 *
 * @example
 * functionCalls([{ name: "a", args: {} }, { name: "b", args: "{}", callId: "call_b" }]);
 */
export function functionCalls(
  calls: readonly FunctionCallSpec[],
  options: ResponseOptions = {},
): FakeResponse {
  return response(
    calls.map((call) => functionCallItem(call.name, call.args, call.callId)),
    options,
  );
}

/** Options of {@link incomplete}. */
export interface IncompleteOptions extends ResponseOptions {
  /** `incomplete_details.reason`. @default "max_output_tokens" */
  readonly reason?: string;
}

/**
 * An `incomplete` response (`incomplete_details: { reason }`); a non-empty `text` becomes a
 * partial assistant message (its item `status` is `incomplete`), an empty one leaves no output.
 *
 * @example
 * incomplete("The answer is", { reason: "max_output_tokens" });
 */
export function incomplete(text = "", options: IncompleteOptions = {}): FakeResponse {
  const output = text === "" ? [] : [messageItem(text, "incomplete")];
  return build("incomplete", output, { reason: options.reason ?? "max_output_tokens" }, options);
}

/**
 * An HTTP error reply with an OpenAI-style error body unless one is given.
 *
 * @example
 * model.script("*", [httpError(503), message("recovered")]);
 */
export function httpError(status: number, body?: unknown): FakeHttpError {
  return { status, body: body ?? errorBody(`fake model error ${status}`, "server_error") };
}

function build(
  status: FakeResponse["status"],
  output: readonly FakeOutputItem[],
  details: FakeResponse["incomplete_details"],
  options: ResponseOptions,
): FakeResponse {
  const inputTokens = options.inputTokens ?? DEFAULT_INPUT_TOKENS;
  const outputTokens = options.outputTokens ?? outputWords(output);
  return {
    id: options.id ?? freshId("resp"),
    object: "response",
    created_at: Math.floor(Date.now() / 1000),
    model: options.model ?? FAKE_MODEL_NAME,
    status,
    output,
    usage: {
      input_tokens: inputTokens,
      output_tokens: outputTokens,
      total_tokens: inputTokens + outputTokens,
    },
    incomplete_details: details,
  };
}

function errorBody(message: string, type: string, code: string | null = null): unknown {
  return { error: { message, type, param: null, code } };
}

// -------------------------------------------------------------------- the server

/** The queue key of replies for any call (and for calls without a rollout prefix). */
export const DEFAULT_SCRIPT_KEY = "*";

/** The default name of the cookie set on every reply. */
export const MODEL_SESSION_COOKIE = "model_session";

/** One received `/v1/responses` call, recorded before its reply is chosen or sent. */
export interface FakeModelCall {
  /** 0-based position in {@link FakeModelServer.calls}. */
  readonly index: number;
  /** The path as received, prefix and query string included. */
  readonly path: string;
  /** The capture key of the `/ng-rollout/<key>/` prefix, or null without one. */
  readonly captureKey: string | null;
  /** Whether the path went through `/training-token-capture/`. */
  readonly tokenCapture: boolean;
  /** The parsed JSON body (always an object). */
  readonly body: Readonly<Record<string, unknown>>;
  /** Request headers, names lowercased, repeated values joined with `, `. */
  readonly headers: Readonly<Record<string, string>>;
  /** The `Cookie` header parsed as name → value (empty when none). */
  readonly cookies: Readonly<Record<string, string>>;
  /** Aborts when the client goes away before the reply is sent, or the server closes. */
  readonly signal: AbortSignal;
}

/** Selects calls for {@link FakeModelServer.hold} and {@link FakeModelServer.nextCall}. */
export type CallPredicate = (call: FakeModelCall) => boolean;

/** The cookie set on every reply. */
export interface FakeCookieOptions {
  /** @default {@link MODEL_SESSION_COOKIE} */
  readonly name?: string;
  /** @default the 1-based call number (`String(call.index + 1)`) */
  readonly value?: (call: FakeModelCall) => string;
  /** Appended after `name=value; `. @default "Path=/" */
  readonly attributes?: string;
}

/** Options of {@link startFakeModelServer}. */
export interface FakeModelServerOptions {
  /** The reply when no script has one left. @default a fresh `message("done")` per call */
  readonly defaultReply?: FakeReply;
  /** The cookie set on every reply; `false` sets none. @default `model_session=<n>; Path=/` */
  readonly cookie?: FakeCookieOptions | false;
}

/** A hold on the replies of matching calls. */
export interface Hold {
  /** The calls this hold has withheld so far, in arrival order. */
  readonly calls: readonly FakeModelCall[];
  /** Whether {@link Hold.release} was called (or the server closed). */
  readonly released: boolean;
  /**
   * Resolves with the first `count` held calls once that many have been held (default 1).
   * Rejects if the hold is released, or the server closes, before they arrive.
   */
  arrived(count?: number): Promise<FakeModelCall[]>;
  /** Lets every held call reply; later matching calls are no longer held. Idempotent. */
  release(): void;
}

/** A running fake model server. */
export interface FakeModelServer {
  /** `http://127.0.0.1:<port>`, with no trailing slash. */
  readonly url: string;
  /** Every recorded call, in arrival order. */
  readonly calls: readonly FakeModelCall[];
  /** `calls.length`. */
  readonly callCount: number;
  /** Queues replies for a capture key, or for every call under `"*"` (or null). */
  script(captureKey: string | null, replies: readonly FakeReply[]): void;
  /** How many scripted replies are left for a key (`"*"` or null: the default queue). */
  remaining(captureKey: string | null): number;
  /** The calls made under one capture key (null: those without a prefix). */
  callsFor(captureKey: string | null): FakeModelCall[];
  /** Withholds the replies of calls matching `predicate` (default: all) until released. */
  hold(predicate?: CallPredicate): Hold;
  /** Resolves with the next call matching `predicate` (default: any) to arrive from now on. */
  nextCall(predicate?: CallPredicate): Promise<FakeModelCall>;
  /** Releases every hold, cuts open connections and stops listening. Idempotent. */
  close(): Promise<void>;
}

/**
 * Starts a {@link FakeModelServer} on 127.0.0.1 on a free port.
 *
 * @example
 * const model = await startFakeModelServer({ defaultReply: message("bye") });
 * const reply = await fetch(`${model.url}/ng-rollout/r-a0/v1/responses`, {
 *   method: "POST",
 *   headers: { "content-type": "application/json" },
 *   body: JSON.stringify({ model: "policy", input: "hi" }),
 * });
 * await model.close();
 */
export async function startFakeModelServer(
  options: FakeModelServerOptions = {},
): Promise<FakeModelServer> {
  const server = new FakeModel(options);
  await server.listen();
  return server;
}

interface HoldState {
  readonly predicate: CallPredicate;
  readonly calls: FakeModelCall[];
  readonly done: Deferred<void>;
  waiters: { count: number; done: Deferred<FakeModelCall[]> }[];
  released: boolean;
}

interface CallWaiter {
  readonly predicate: CallPredicate;
  readonly done: Deferred<FakeModelCall>;
}

const TOKEN_CAPTURE = "/training-token-capture";
const RESPONSES = "/v1/responses";

class FakeModel implements FakeModelServer {
  url = "";
  readonly calls: FakeModelCall[] = [];
  readonly #http = createServer((req, res) => void this.#handle(req, res));
  readonly #defaultReply: FakeReply;
  readonly #cookie: FakeCookieOptions | false;
  readonly #queues = new Map<string, FakeReply[]>();
  readonly #controllers = new Set<AbortController>();
  #holds: HoldState[] = [];
  #callWaiters: CallWaiter[] = [];
  #closed: Promise<void> | null = null;

  constructor(options: FakeModelServerOptions) {
    this.#defaultReply = options.defaultReply ?? (() => message("done"));
    this.#cookie = options.cookie ?? {};
  }

  get callCount(): number {
    return this.calls.length;
  }

  async listen(): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.#http.once("error", reject);
      this.#http.listen(0, "127.0.0.1", () => {
        this.#http.off("error", reject);
        resolve();
      });
    });
    const { port } = this.#http.address() as AddressInfo;
    this.url = `http://127.0.0.1:${port}`;
  }

  script(captureKey: string | null, replies: readonly FakeReply[]): void {
    const key = captureKey ?? DEFAULT_SCRIPT_KEY;
    const queue = this.#queues.get(key) ?? [];
    queue.push(...replies);
    this.#queues.set(key, queue);
  }

  remaining(captureKey: string | null): number {
    return this.#queues.get(captureKey ?? DEFAULT_SCRIPT_KEY)?.length ?? 0;
  }

  callsFor(captureKey: string | null): FakeModelCall[] {
    return this.calls.filter((call) => call.captureKey === captureKey);
  }

  hold(predicate: CallPredicate = () => true): Hold {
    const state: HoldState = {
      predicate,
      calls: [],
      done: deferred<void>(),
      waiters: [],
      released: false,
    };
    if (this.#closed === null) this.#holds.push(state);
    else this.#release(state, "the fake model server is closed");
    return {
      calls: state.calls,
      get released() {
        return state.released;
      },
      arrived: (count = 1) => {
        if (state.calls.length >= count) return Promise.resolve(state.calls.slice(0, count));
        if (state.released) {
          return Promise.reject(
            new Error(`hold released after ${state.calls.length} of ${count} calls arrived`),
          );
        }
        const done = deferred<FakeModelCall[]>();
        state.waiters.push({ count, done });
        return done.promise;
      },
      release: () => this.#release(state, "hold released"),
    };
  }

  nextCall(predicate: CallPredicate = () => true): Promise<FakeModelCall> {
    if (this.#closed !== null) return Promise.reject(new Error("the fake model server is closed"));
    const done = deferred<FakeModelCall>();
    this.#callWaiters.push({ predicate, done });
    return done.promise;
  }

  close(): Promise<void> {
    this.#closed ??= this.#close();
    return this.#closed;
  }

  async #close(): Promise<void> {
    for (const hold of this.#holds) this.#release(hold, "the fake model server is closed");
    for (const waiter of this.#callWaiters) {
      waiter.done.reject(new Error("the fake model server closed before the call arrived"));
    }
    this.#callWaiters = [];
    for (const controller of this.#controllers) controller.abort();
    const stopped = new Promise<void>((resolve) => this.#http.close(() => resolve()));
    this.#http.closeAllConnections();
    await stopped;
  }

  #release(state: HoldState, why: string): void {
    if (state.released) return;
    state.released = true;
    this.#holds = this.#holds.filter((hold) => hold !== state);
    for (const waiter of state.waiters) {
      waiter.done.reject(new Error(`${why} after ${state.calls.length} of ${waiter.count} calls`));
    }
    state.waiters = [];
    state.done.resolve();
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    req.on("error", () => undefined);
    res.on("error", () => undefined);
    const path = req.url ?? "/";
    const queryAt = path.indexOf("?");
    let rest = queryAt < 0 ? path : path.slice(0, queryAt);
    let captureKey: string | null = null;
    const split = splitRolloutPath(rest);
    if (split !== null && "malformed" in split) {
      const text = `malformed rollout prefix: ${JSON.stringify(split.captureKey)}`;
      this.#sendJson(res, 400, errorBody(text, "invalid_request_error", "invalid_rollout_id"));
      return;
    }
    if (split !== null) {
      captureKey = split.captureKey;
      rest = split.rest;
    }
    const tokenCapture = rest.startsWith(`${TOKEN_CAPTURE}/`);
    if (tokenCapture) rest = rest.slice(TOKEN_CAPTURE.length);
    if (rest !== RESPONSES) {
      this.#sendJson(res, 404, errorBody(`no route ${path}`, "invalid_request_error"));
      return;
    }
    if (req.method !== "POST") {
      res.setHeader("allow", "POST");
      this.#sendJson(res, 405, errorBody(`${req.method} ${path}`, "invalid_request_error"));
      return;
    }

    let body: unknown;
    try {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    } catch {
      if (!res.destroyed) {
        this.#sendJson(res, 400, errorBody("body is not JSON", "invalid_request_error"));
      }
      return;
    }
    if (typeof body !== "object" || body === null || Array.isArray(body)) {
      this.#sendJson(res, 400, errorBody("body is not a JSON object", "invalid_request_error"));
      return;
    }

    const controller = new AbortController();
    this.#controllers.add(controller);
    res.on("close", () => {
      this.#controllers.delete(controller);
      if (!res.writableFinished) controller.abort();
    });
    const call: FakeModelCall = {
      index: this.calls.length,
      path,
      captureKey,
      tokenCapture,
      body: body as Record<string, unknown>,
      headers: headerRecord(req),
      cookies: parseCookies(req.headers.cookie),
      signal: controller.signal,
    };
    this.calls.push(call);
    const reply = this.#take(captureKey);
    const holds = this.#holds.filter((hold) => hold.predicate(call));
    for (const hold of holds) {
      hold.calls.push(call);
      const still: HoldState["waiters"] = [];
      for (const waiter of hold.waiters) {
        if (hold.calls.length >= waiter.count)
          waiter.done.resolve(hold.calls.slice(0, waiter.count));
        else still.push(waiter);
      }
      hold.waiters = still;
    }
    const waiting: CallWaiter[] = [];
    for (const waiter of this.#callWaiters) {
      if (waiter.predicate(call)) waiter.done.resolve(call);
      else waiting.push(waiter);
    }
    this.#callWaiters = waiting;

    if (holds.length > 0) {
      const aborted = new Promise<void>((resolve) =>
        controller.signal.addEventListener("abort", () => resolve(), { once: true }),
      );
      await Promise.race([Promise.all(holds.map((hold) => hold.done.promise)), aborted]);
    }
    if (controller.signal.aborted || res.destroyed) return;

    let value: FakeReplyValue;
    try {
      value = typeof reply === "function" ? await reply(call) : reply;
    } catch (error) {
      value = httpError(500, errorBody(`reply function threw: ${String(error)}`, "server_error"));
    }
    if (controller.signal.aborted || res.destroyed) return;
    if (this.#cookie !== false) {
      const name = this.#cookie.name ?? MODEL_SESSION_COOKIE;
      const cookieValue = this.#cookie.value?.(call) ?? String(call.index + 1);
      res.setHeader("set-cookie", `${name}=${cookieValue}; ${this.#cookie.attributes ?? "Path=/"}`);
    }
    if (isHttpError(value)) {
      for (const [name, headerValue] of Object.entries(value.headers ?? {})) {
        res.setHeader(name, headerValue);
      }
      const body = "body" in value ? value.body : httpError(value.status).body;
      this.#sendJson(res, value.status, body ?? null);
    } else {
      this.#sendJson(res, 200, value);
    }
  }

  #take(captureKey: string | null): FakeReply {
    for (const key of [captureKey ?? DEFAULT_SCRIPT_KEY, DEFAULT_SCRIPT_KEY]) {
      const reply = this.#queues.get(key)?.shift();
      if (reply !== undefined) return reply;
    }
    return this.#defaultReply;
  }

  #sendJson(res: ServerResponse, status: number, body: unknown): void {
    const text = JSON.stringify(body);
    res.statusCode = status;
    res.setHeader("content-type", "application/json");
    res.setHeader("content-length", Buffer.byteLength(text));
    res.end(text);
  }
}

function isHttpError(value: FakeReplyValue): value is FakeHttpError {
  return typeof value.status === "number";
}

function headerRecord(req: IncomingMessage): Record<string, string> {
  const headers = new Map<string, string>();
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined) continue;
    headers.set(name.toLowerCase(), Array.isArray(value) ? value.join(", ") : value);
  }
  return Object.fromEntries(headers);
}

function parseCookies(header: string | undefined): Record<string, string> {
  // A Map, then fromEntries: names like `__proto__` become plain own properties.
  const cookies = new Map<string, string>();
  for (const pair of (header ?? "").split(";")) {
    const eq = pair.indexOf("=");
    if (eq < 0) continue;
    const name = pair.slice(0, eq).trim();
    if (name === "" || cookies.has(name)) continue;
    let value = pair.slice(eq + 1).trim();
    if (value.startsWith('"') && value.endsWith('"') && value.length >= 2) {
      value = value.slice(1, -1);
    }
    try {
      cookies.set(name, decodeURIComponent(value));
    } catch {
      cookies.set(name, value);
    }
  }
  return Object.fromEntries(cookies);
}
