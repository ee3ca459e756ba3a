/**
 * In-process deployments for the Simple Agent tests: a fake policy model, the agent, real
 * reference resources servers (recording the paths they are called at), a scriptable fake
 * resources server, a proxy that can hold the agent's self-dispatched turn-loop replies, and
 * the control-plane and agent-route helpers the tests share.
 *
 * Every server started here is closed by {@link cleanup} (call it in `afterEach`). Nothing
 * sleeps: holds and gates resolve on events, and state is awaited with bounded polls.
 */
import { createServer, request as httpRequest } from "node:http";
import type { AddressInfo } from "node:net";
import { readFile } from "node:fs/promises";
import path from "node:path";
import type { Express, Request } from "express";
import request from "supertest";
import { expect } from "vitest";
import CounterServer from "../../reference-servers/counter/src/index.js";
import SimpleAgent from "../../reference-servers/simple-agent/src/index.js";
import WeatherServer from "../../reference-servers/weather/src/index.js";
import { resolveCheckpointSettings, type ServerOptions } from "#sdk/server/server.js";
import { RecordsWriter } from "#sdk/store/records-writer.js";
import { deferred, type Deferred } from "#sdk/util/deferred.js";
import type { ResolvedDeployment, ServerKind } from "#sdk/wire/deployment.js";
import type { RecordBase } from "#sdk/wire/storage.js";
import { startFakeModelServer, type FakeModelServer } from "./fake-model-server.js";
import { makeTempDir, removeTempDir } from "./test-participant.js";
import { CONTROL, controlRoutes } from "./control-routes.js";
export { CONTROL } from "./control-routes.js";
import { ACTIVATION_HEADER } from "#sdk/wire/agent.js";

export const TOKEN = "simple-agent-token";
export const CHECKPOINT_ON = { enabled: true, control_auth_token: TOKEN } as const;
export const ACTIVATION = ACTIVATION_HEADER;
/** Bounded polls for state reached through other servers. */
export const POLL = { timeout: 5000, interval: 2 } as const;
const silent = { logLevel: "silent", shutdownGraceMs: 50 } as const;

interface Closable {
  close(): Promise<void>;
}
const started: Closable[] = [];
const dirs: string[] = [];

/** Closes every server started by this module and removes temporary directories. */
export async function cleanup(): Promise<void> {
  for (const server of started.splice(0).reverse()) await server.close();
  for (const dir of dirs.splice(0)) await removeTempDir(dir);
}

/** A temporary directory removed by {@link cleanup}. */
export async function tempDir(): Promise<string> {
  const dir = await makeTempDir();
  dirs.push(dir);
  return dir;
}

/** An episode id. */
export function ep(rollout: string, attempt = 0): { rollout_id: string; attempt: number } {
  return { rollout_id: rollout, attempt };
}

// ------------------------------------------------------------------------- servers

/** A resources server that records every request's full path and headers. */
export interface Recorded {
  readonly requests: { readonly path: string; readonly headers: Record<string, unknown> }[];
}

function recorder(requests: Recorded["requests"]) {
  return (req: Request, _res: unknown, next: () => void): void => {
    // `originalUrl`: the rollout prefix is already stripped from `url` here.
    requests.push({ path: req.originalUrl, headers: { ...req.headers } });
    next();
  };
}

/** The reference counter, recording its requests. */
export class RecordingCounter extends CounterServer implements Recorded {
  readonly requests: Recorded["requests"] = [];
  protected override configureApp(app: Express): void {
    app.use(recorder(this.requests));
    super.configureApp(app);
  }
}

/** The reference weather server, recording its requests. */
export class RecordingWeather extends WeatherServer implements Recorded {
  readonly requests: Recorded["requests"] = [];
  protected override configureApp(app: Express): void {
    app.use(recorder(this.requests));
    super.configureApp(app);
  }
}

/** The servers one test runs; agents each get their own deployment (their own URL). */
export class Stack {
  readonly checkpoint: boolean;
  /** The servers every agent started from now on can reach. */
  readonly servers: ResolvedDeployment["servers"] = {};

  constructor(options: { checkpoint: boolean }) {
    this.checkpoint = options.checkpoint;
  }

  get #checkpointSettings() {
    return this.checkpoint ? CHECKPOINT_ON : null;
  }

  /** Registers a server under `name`. */
  register(name: string, kind: ServerKind, url: string): void {
    const parsed = new URL(url);
    this.servers[name] = {
      kind,
      url,
      host: parsed.hostname,
      port: Number(parsed.port),
      num_workers: 1,
      config: {},
    };
  }

  /** Starts the fake policy model as `policy`. */
  async model(): Promise<FakeModelServer> {
    const model = await startFakeModelServer();
    started.push(model);
    this.register("policy", "model", model.url);
    return model;
  }

  /** Starts a resources server class as `name` (checkpointing as the stack's, unless told). */
  async resources<T extends CounterServer | WeatherServer>(
    Server: new (options: ServerOptions) => T,
    options: { name?: string; port?: number; checkpoint?: boolean } = {},
  ): Promise<{ server: T; url: string }> {
    const name = options.name ?? "resources";
    const checkpoint = options.checkpoint ?? this.checkpoint;
    const server = new Server({ name, checkpoint: checkpoint ? CHECKPOINT_ON : null, ...silent });
    started.push(server);
    const { url } = await server.listen({ port: options.port ?? 0 });
    this.register(name, "resources", url);
    return { server, url };
  }

  /**
   * Starts a Simple Agent named `agent`. Its deployment holds the servers registered so far and
   * itself (or `selfUrl`: where its self-dispatch goes, e.g. a {@link HoldingProxy}).
   */
  async agent(
    config: Record<string, unknown> = {},
    options: { selfUrl?: (url: string) => Promise<string> } = {},
  ): Promise<{ agent: SimpleAgent; url: string }> {
    const settings = this.#checkpointSettings;
    const deployment: ResolvedDeployment = {
      checkpoint: settings === null ? null : resolveCheckpointSettings(settings),
      servers: { ...this.servers },
    };
    const agent = new SimpleAgent({
      name: "agent",
      checkpoint: settings,
      config: { model_server: "policy", ...config },
      deployment,
      ...silent,
    });
    started.push(agent);
    const { url } = await agent.listen({ port: 0 });
    const self = options.selfUrl === undefined ? url : await options.selfUrl(url);
    const parsed = new URL(self);
    deployment.servers.agent = {
      kind: "agent",
      url: self,
      host: parsed.hostname,
      port: Number(parsed.port),
      num_workers: 1,
      config: {},
    };
    return { agent, url };
  }
}

// ------------------------------------------------------------------------- fake resources

/** One call the fake resources server received. */
export interface ResourcesCall {
  /** The route without the rollout prefix, e.g. `/verify`. */
  readonly route: string;
  /** The capture key of the prefix, or null. */
  readonly captureKey: string | null;
  readonly body: Record<string, unknown>;
  readonly headers: Record<string, string | string[] | undefined>;
}

/** A gate on one route: calls wait at it until released. */
export interface RouteGate {
  /** Resolves when the first call reaches the gate. */
  readonly arrived: Promise<void>;
  release(): void;
}

/**
 * A scriptable resources server: `/seed_session` sets cookie `res_session` and declares
 * `verifyMode` in `x-ng-checkpoint-verify`; `/verify` answers `{...body, reward}`;
 * `/close_session` (with {@link closeStatus}), `/aggregate_metrics` and any tool answer JSON.
 * Calls can be gated.
 */
export class FakeResources {
  readonly calls: ResourcesCall[] = [];
  url = "";
  verifyMode: "wait" | "replay" = "wait";
  /** Seed replies say the episode is a restart (`x-ng-checkpoint-restart: 1`). */
  restart = false;
  reward = 1;
  /** The status `/close_session` answers with. */
  closeStatus = 200;
  readonly #gates = new Map<string, { gate: Deferred<void>; arrived: Deferred<void> }>();
  readonly #http = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      void (async () => {
        const full = req.url ?? "/";
        const match = /^\/ng-rollout\/([^/]+)(\/.*)$/.exec(full);
        const route = match === null ? full : (match[2] as string);
        const text = Buffer.concat(chunks).toString("utf8");
        const body = (text === "" ? {} : JSON.parse(text)) as Record<string, unknown>;
        this.calls.push({ route, captureKey: match?.[1] ?? null, body, headers: req.headers });
        const gate = this.#gates.get(route);
        if (gate !== undefined) {
          gate.arrived.resolve();
          await gate.gate.promise;
        }
        let reply: unknown = { ok: true, route };
        if (route === "/seed_session") {
          res.setHeader("set-cookie", `res_session=s${this.calls.length}; Path=/`);
          res.setHeader("x-ng-checkpoint-verify", this.verifyMode);
          if (this.restart) res.setHeader("x-ng-checkpoint-restart", "1");
          reply = {};
        } else if (route === "/verify") {
          reply = { ...body, reward: this.reward };
        } else if (route === "/aggregate_metrics") {
          reply = { aggregated: body };
        } else if (route === "/close_session") {
          res.statusCode = this.closeStatus;
        }
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify(reply));
      })();
    });
  });

  /** Calls of one route (optionally under one capture key). */
  callsOf(route: string, key?: string | null): ResourcesCall[] {
    return this.calls.filter(
      (call) => call.route === route && (key === undefined || call.captureKey === key),
    );
  }

  /** Gates the next calls of `route` until released. */
  gate(route: string): RouteGate {
    const entry = { gate: deferred<void>(), arrived: deferred<void>() };
    this.#gates.set(route, entry);
    return {
      arrived: entry.arrived.promise,
      release: () => {
        if (this.#gates.get(route) === entry) this.#gates.delete(route);
        entry.gate.resolve();
      },
    };
  }

  async listen(): Promise<void> {
    await new Promise<void>((resolve) => this.#http.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.#http.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    for (const entry of this.#gates.values()) entry.gate.resolve();
    const closed = new Promise<void>((resolve) => this.#http.close(() => resolve()));
    this.#http.closeAllConnections();
    await closed;
  }
}

/** Starts a {@link FakeResources} and registers it as `resources`. */
export async function fakeResources(stack: Stack): Promise<FakeResources> {
  const server = new FakeResources();
  await server.listen();
  started.push(server);
  stack.register("resources", "resources", server.url);
  return server;
}

// ------------------------------------------------------------------------- holding proxy

/**
 * An HTTP proxy in front of one server that can hold the *replies* of matching requests: the
 * target has finished its work, the caller has not seen the result yet.
 */
export class HoldingProxy {
  url = "";
  #hold: { gate: Deferred<void>; arrived: Deferred<void>; path: RegExp } | null = null;
  readonly #http = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const target = new URL(this.target);
      const upstream = httpRequest(
        {
          host: target.hostname,
          port: target.port,
          method: req.method,
          path: req.url,
          headers: req.headers,
        },
        (reply) => {
          const parts: Buffer[] = [];
          reply.on("data", (chunk: Buffer) => parts.push(chunk));
          reply.on("end", () => {
            void (async () => {
              const hold = this.#hold;
              if (hold !== null && hold.path.test(req.url ?? "")) {
                hold.arrived.resolve();
                await hold.gate.promise;
              }
              res.writeHead(reply.statusCode ?? 502, reply.headers);
              res.end(Buffer.concat(parts));
            })();
          });
        },
      );
      upstream.on("error", () => res.destroy());
      upstream.end(Buffer.concat(chunks));
    });
  });

  constructor(readonly target: string) {}

  /** Holds the replies of requests whose path matches, until released. */
  hold(pathPattern: RegExp): RouteGate {
    const entry = { gate: deferred<void>(), arrived: deferred<void>(), path: pathPattern };
    this.#hold = entry;
    return {
      arrived: entry.arrived.promise,
      release: () => {
        if (this.#hold === entry) this.#hold = null;
        entry.gate.resolve();
      },
    };
  }

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.#http.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.#http.address() as AddressInfo).port}`;
    return this.url;
  }

  async close(): Promise<void> {
    this.#hold?.gate.resolve();
    const closed = new Promise<void>((resolve) => this.#http.close(() => resolve()));
    this.#http.closeAllConnections();
    await closed;
  }
}

/** Starts a {@link HoldingProxy} in front of `target`. */
export async function holdingProxy(target: string): Promise<HoldingProxy> {
  const proxy = new HoldingProxy(target);
  await proxy.listen();
  started.push(proxy);
  return proxy;
}

// ------------------------------------------------------------------------- control plane

/** A control operation with a 30 s deadline. */
export const { control } = controlRoutes(TOKEN);

/** The control status of a server. */
export async function controlStatus(url: string): Promise<{ phase: string }> {
  const res = await request(url)
    .get(`${CONTROL}/status`)
    .set("Authorization", `Bearer ${TOKEN}`)
    .expect(200);
  return res.body as { phase: string };
}

/** Prepares `id` on each server in order, expecting `prepared`. */
export async function prepare(urls: readonly string[], id: string): Promise<void> {
  for (const url of urls) {
    const res = await control(url, "prepare", { checkpoint_id: id });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.phase, JSON.stringify(res.body)).toBe("prepared");
  }
}

/** Commits `id` on each server into one directory; returns it. */
export async function commit(
  urls: readonly string[],
  id: string,
  scope: readonly { rollout_id: string; attempt: number }[] | null,
  dir?: string,
): Promise<string> {
  const into = dir ?? (await tempDir());
  for (const url of urls) {
    const res = await control(url, "commit", {
      checkpoint_id: id,
      checkpoint_dir: into,
      episode_ids: scope,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
  }
  return into;
}

/** Prepares and commits `id` on each server; returns the directory. */
export async function checkpoint(
  urls: readonly string[],
  id: string,
  scope: readonly { rollout_id: string; attempt: number }[] | null = null,
): Promise<string> {
  await prepare(urls, id);
  return await commit(urls, id, scope);
}

/** Restores `dir` into a fresh server and resumes it. */
export async function restoreAndResume(
  url: string,
  id: string,
  dir: string,
  scope: readonly { rollout_id: string; attempt: number }[],
): Promise<void> {
  const restored = await control(url, "restore", {
    checkpoint_id: id,
    checkpoint_dir: dir,
    episode_ids: scope,
  });
  expect(restored.status, JSON.stringify(restored.body)).toBe(200);
  await control(url, "resume", { checkpoint_id: id }).expect(200);
}

/** One stored agent record. */
export interface AgentRecordJson {
  episode_id: { rollout_id: string; attempt: number };
  session_key: string;
  session: Record<string, unknown>;
  boundary: Record<string, unknown> | null;
  episode: Record<string, unknown> | null;
}

/** The agent records a commit wrote under `dir`. */
export async function agentRecords(dir: string, instance = "agent"): Promise<AgentRecordJson[]> {
  const base = path.join(dir, "gym", "agent", instance);
  const manifest = JSON.parse(await readFile(path.join(base, "manifest.json"), "utf8")) as {
    records_file: string;
  };
  const text = await readFile(path.join(base, manifest.records_file), "utf8");
  return text
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as AgentRecordJson);
}

/** Writes agent records as checkpoint `id` into a fresh directory; returns it. */
export async function writeAgentRecords(
  records: readonly AgentRecordJson[],
  id: string,
  instance = "agent",
): Promise<string> {
  const dir = await tempDir();
  await new RecordsWriter({ checkpointDir: dir, kind: "agent", instance, checkpointId: id }).write(
    records as unknown as readonly RecordBase[],
  );
  return dir;
}

// ------------------------------------------------------------------------- agent routes

/** The cookie header value of a reply's Set-Cookie lines (name=value pairs only). */
export function cookieOf(res: { headers: Record<string, unknown> }): string {
  const lines = (res.headers["set-cookie"] ?? []) as string[];
  return lines.map((line) => line.split(";")[0]).join("; ");
}

/** Seeds an agent session; returns its cookie. */
export async function seed(
  url: string,
  id: string,
  episode: { rollout_id: string; attempt: number },
  extra: Record<string, unknown> = {},
): Promise<string> {
  const res = await request(url)
    .post("/v1/agent_sessions")
    .send({
      agent_session_id: id,
      episode_id: episode,
      task_id: { taskset: "t", task_id: id },
      ...extra,
    });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return cookieOf(res);
}

/** An activation of a session under `/ng-rollout/<key>` (with an index when given). */
export function activate(
  url: string,
  cookie: string,
  key: string,
  body: Record<string, unknown>,
  index?: number,
) {
  const req = request(url).post(`/ng-rollout/${key}/v1/responses`).set("Cookie", cookie);
  if (index !== undefined) req.set(ACTIVATION, String(index));
  return req.send(body);
}

/** Closes an agent session. */
export function closeSession(
  url: string,
  id: string,
  episode: { rollout_id: string; attempt: number },
) {
  return request(url)
    .post("/v1/agent_sessions/close")
    .send({ agent_session_id: id, episode_id: episode });
}

/** Settles with `work` and tells whether it has settled yet. */
export function track<T>(work: PromiseLike<T>): { done: () => boolean; value: Promise<T> } {
  let settled = false;
  const value = Promise.resolve(work).finally(() => {
    settled = true;
  });
  value.catch(() => undefined); // a request a test leaves behind must not fail the run
  return { done: () => settled, value };
}

// ------------------------------------------------------------------------- counter

/** Seeds a native counter session under `key`; returns its cookie jar. */
export async function seedCounter(
  url: string,
  key: string,
  sessionId: string,
  task: { initial_count?: number; target?: number },
): Promise<Record<string, string>> {
  const res = await request(url)
    .post(`/ng-rollout/${key}/seed_session`)
    .send({ resources_session_id: sessionId, task_data: task });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  const pair = cookieOf(res);
  const at = pair.indexOf("=");
  return { [pair.slice(0, at)]: pair.slice(at + 1) };
}

/** The `Cookie` header of a jar. */
export function jarHeader(jar: Record<string, string>): string {
  return Object.entries(jar)
    .map(([name, value]) => `${name}=${value}`)
    .join("; ");
}
