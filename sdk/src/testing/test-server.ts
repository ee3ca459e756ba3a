import type { z } from "zod";
import {
  captureKey,
  episodeId,
  episodeIdToWire,
  fromCaptureKey,
  nextAttempt,
  parseEpisodeId,
  type EpisodeId,
} from "../identity/episode-id.js";
import { rolloutPath } from "../identity/rollout-prefix.js";
import { episodeFromRunBody, type RunRolloutFields } from "../identity/run-body.js";
import type { ServerOptions } from "../server/server.js";
import { readCheckpoint } from "../store/records-reader.js";
import { cookieHeader, setCookieJar, type CookieJar } from "../util/cookies.js";
import { nowTs } from "../util/deadline.js";
import { CONTROL_PREFIX, type Operation, type StatusReply } from "../wire/control.js";
import type { CommitReply, RecordBase, RestoreReply } from "../wire/storage.js";
import { BoundaryGates, holdingAtBoundaries } from "./boundary-gates.js";
import { boundedFetch, type TestReply } from "./bounded-fetch.js";
import { TestEnvironment } from "./environment.js";
import { ServerLog } from "./server-log.js";
import { TestKitError } from "./test-kit-error.js";

/** How long a call may take unless told otherwise, in ms. */
const DEFAULT_TIMEOUT_MS = 10_000;
/** A control call answers at its deadline at the latest; this covers the trip back. */
const REPLY_GRACE_MS = 2_000;
/** How many restores one call may take under `checkpointEvery: "boundary"` unless told. */
const DEFAULT_MAX_RESTORES = 100;

/**
 * What the kit needs of a server, structurally (so a class built against the published SDK
 * and one built against its sources both fit).
 */
export interface TestableServer {
  readonly name: string;
  readonly controlPlane: {
    readonly participant: { readonly kind: string; readonly recordSchema: z.ZodType };
  } | null;
  listen(options?: { port?: number; host?: string }): Promise<{ url: string }>;
  close(): Promise<void>;
}

/** A server class the kit can start: constructed from {@link ServerOptions}. */
export type TestableServerClass<S extends TestableServer> = new (options: ServerOptions) => S;

/** Options of {@link startTestServer}. */
export interface TestServerOptions {
  /** The server's name (also its instance name and part of its cookie name). @default "test" */
  readonly name?: string;
  /** The server's `config:` settings. @default {} */
  readonly config?: unknown;
  /**
   * Further server options; `checkpoint` is always the kit's own. Without a `logger`, warnings
   * and errors are kept in memory and quoted by a failed control call. @default {}
   */
  readonly serverOptions?: Partial<Omit<ServerOptions, "checkpoint" | "name" | "config">>;
  /** Bound of every call (a control call's deadline, a data call's wait), in ms. @default 10000 */
  readonly timeoutMs?: number;
  /**
   * Take the hard path every time: checkpoint, restore into a fresh instance (the old one is
   * dropped as a crashed process would be, its final cleanup never run) and go on there, so a
   * test of a whole episode proves the server's hooks and boundaries lose nothing.
   *
   * - `"request"`: after every data request (each has finished before the checkpoint).
   *   Resources servers and agents with session hooks.
   * - `"boundary"`: at every boundary. For a resources server that is between requests, as
   *   `"request"`. For an environment server, while a `/run` is in flight: at each boundary its
   *   episode records, prepare finds it parked there, commit, restore, and the replacement
   *   attempt's `/run` is sent as a controller would (same body, next attempt), until the
   *   episode ends. For an agent with session hooks: at each boundary an activation records
   *   (its request is sent again under the next attempt, with the same headers and cookies),
   *   and after every request. A boundary the restored attempt records again unchanged (its
   *   entry boundary) is not restored twice.
   *
   * A server that could not continue after a crash is refused at start: an environment server
   * without `checkpointBoundaries`, an agent without session hooks, a `restart_only` resources
   * server. With either mode, make one call at a time. @default null (never)
   */
  readonly checkpointEvery?: "request" | "boundary" | null;
  /**
   * Under `checkpointEvery: "boundary"`, how many restores one call may take before the kit
   * gives up: a server that never gets further than its restored boundary would otherwise loop
   * for ever. @default 100
   */
  readonly maxRestores?: number;
}

/** Options of one data request. */
export interface RequestOptions {
  /**
   * The rollout the call is made for: its ID, sent under the attempt this handle is at (0, or
   * the replacement attempt a restore installed). @default no rollout prefix
   */
  readonly rollout?: string;
  /** Send under this attempt instead (e.g. to act as a retired attempt). */
  readonly attempt?: number;
  /** A jar to send and update instead of the handle's own (one per concurrent session). */
  readonly cookies?: CookieJar;
  /** The HTTP method. @default "POST" */
  readonly method?: "GET" | "POST";
  /** Extra request headers (e.g. `x-ng-agent-activation`). @default none */
  readonly headers?: Readonly<Record<string, string>>;
}

/** A committed checkpoint: where it is, the records read back from it, and the reply. */
export interface CommitResult {
  readonly checkpointId: string;
  readonly dir: string;
  readonly records: RecordBase[];
  readonly reply: CommitReply;
}

/** An episode as an ID or its capture key (`r`, `r-a1`). */
export type EpisodeRef = EpisodeId | string;

/** @internal One started instance. */
export interface Instance<S> {
  readonly server: S;
  readonly url: string;
  /** Null when the test gave its own logger. */
  readonly log: ServerLog | null;
  /** Where its boundaries are held (`checkpointEvery: "boundary"` only). */
  readonly gates: BoundaryGates | null;
}

/** @internal What the handles of one environment share. */
export interface Shared<S extends TestableServer> {
  readonly env: TestEnvironment;
  readonly ServerClass: TestableServerClass<S>;
  readonly options: TestServerOptions;
  readonly timeoutMs: number;
}

function toEpisode(ref: EpisodeRef): EpisodeId {
  return typeof ref === "string" ? fromCaptureKey(ref) : ref;
}

async function startInstance<S extends TestableServer>(shared: Shared<S>): Promise<Instance<S>> {
  const { options } = shared;
  const log = options.serverOptions?.logger === undefined ? new ServerLog() : null;
  const gates = options.checkpointEvery === "boundary" ? new BoundaryGates() : null;
  const ServerClass =
    gates === null ? shared.ServerClass : holdingAtBoundaries(shared.ServerClass, gates);
  const server = new ServerClass({
    ...(log === null ? {} : { logger: log.logger }),
    ...options.serverOptions,
    name: options.name ?? "test",
    config: options.config ?? {},
    checkpoint: { enabled: true, control_auth_token: shared.env.token },
  });
  const { url } = await server.listen({ port: 0 });
  return { server, url, log, gates };
}

/**
 * Starts `ServerClass` in process with checkpointing on and returns a {@link TestServer}
 * driving it, modelled on Temporal's `TestWorkflowEnvironment`: one object, one async method
 * per control operation, every call bounded.
 *
 * @example
 * const counter = await startTestServer(CounterServer);
 * await counter.request("/seed_session", { target: 2 }, { rollout: "ep1" });
 * await counter.request("/increment_counter", { count: 1 }, { rollout: "ep1" });
 * await counter.checkpoint();
 * const restored = await counter.restoreInto(); // ep1 continues as ep1-a1
 * await restored.request("/increment_counter", { count: 1 }, { rollout: "ep1" });
 */
export async function startTestServer<S extends TestableServer>(
  ServerClass: TestableServerClass<S>,
  options: TestServerOptions = {},
): Promise<TestServer<S>> {
  const shared: Shared<S> = {
    env: new TestEnvironment(),
    ServerClass,
    options,
    timeoutMs: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
  };
  const instance = await startInstance(shared);
  const handle = new TestServer(shared, instance, {}, new Map());
  const mode = options.checkpointEvery ?? null;
  if (mode !== null) {
    const refusal = await refusalOf(handle, mode);
    if (refusal !== null) {
      await handle.close();
      throw new TestKitError("startTestServer", refusal);
    }
  }
  return handle;
}

/** Why `mode` cannot run against this server, or null when it can. */
async function refusalOf<S extends TestableServer>(
  handle: TestServer<S>,
  mode: "request" | "boundary",
): Promise<string | null> {
  const kind = handle.server.controlPlane?.participant.kind ?? null;
  const cls = handle.server.constructor as {
    name: string;
    checkpointBoundaries?: unknown;
    checkpointSessionsSupported?: unknown;
  };
  const every = `checkpointEvery: "${mode}"`;
  switch (kind) {
    case "resources": {
      if ((await handle.status()).mode !== "restart_only") return null;
      return `cannot use ${every} with ${cls.name}: a restart_only server saves no session, so after a crash its rollouts start over`;
    }
    case "environment":
      if (mode === "request") {
        return `cannot use ${every} with environment server ${cls.name}: a /run is a whole episode; use checkpointEvery: "boundary"`;
      }
      if (cls.checkpointBoundaries === true) return null;
      return `cannot use ${every} with ${cls.name}: without static checkpointBoundaries = true every episode is a restart and starts over after a crash`;
    case "agent":
      if (cls.checkpointSessionsSupported === true) return null;
      return `cannot use ${every} with ${cls.name}: an agent without session hooks (static checkpointSessionsSupported = true) is restart-only, so its rollouts start over after a crash`;
    default:
      return `cannot use ${every} with ${cls.name}: only resources servers, agents and environment servers are supported (this one is ${kind ?? "not checkpointing"})`;
  }
}

/**
 * One running server under test: data calls under the rollout prefix with a cookie jar, and
 * the checkpoint control operations over its real, bearer-protected control routes. A failed
 * or late call throws a {@link TestKitError} naming the operation and the participant's reply.
 */
export class TestServer<S extends TestableServer> {
  /** The handle's cookie jar, sent with and updated by every request that brings none. */
  readonly cookies: CookieJar;
  readonly #shared: Shared<S>;
  #instance: Instance<S>;
  /** The attempt each rollout is at on this instance (absent: attempt 0). */
  readonly #attempts: Map<string, number>;
  #checkpointId: string | null = null;
  #lastCommit: CommitResult | null = null;
  #closed = false;
  /** A call is running under `checkpointEvery` (which takes one call at a time). */
  #busy = false;

  /** @internal Use {@link startTestServer} or {@link TestServer.restoreInto}. */
  constructor(
    shared: Shared<S>,
    instance: Instance<S>,
    cookies: CookieJar,
    attempts: Map<string, number>,
  ) {
    this.#shared = shared;
    this.#instance = instance;
    this.cookies = cookies;
    this.#attempts = attempts;
    shared.env.opened();
  }

  /** The server instance currently under test (a new one after each hop of `checkpointEvery`). */
  get server(): S {
    return this.#instance.server;
  }

  /** Where the current instance listens: `http://127.0.0.1:<port>`. */
  get url(): string {
    return this.#instance.url;
  }

  /** The last commit of this handle, or null. */
  get lastCommit(): CommitResult | null {
    return this.#lastCommit;
  }

  /** The attempt `rolloutId` is at on this instance (0 until a restore installs the next). */
  attemptOf(rolloutId: string): number {
    return this.#attempts.get(rolloutId) ?? 0;
  }

  /**
   * The episode `rolloutId` is at on this instance, in its wire form: what a seed or close
   * body's `episode_id` names after restores moved the rollout on.
   */
  episodeOf(rolloutId: string): EpisodeId {
    return episodeId(rolloutId, this.attemptOf(rolloutId));
  }

  /**
   * A data call: `path` under the rollout prefix of `options.rollout` (at its current attempt),
   * with the cookie jar. Never throws for an error status: the test asserts on it. With
   * `checkpointEvery`, the call is checkpointed and restored as that option says.
   */
  async request(path: string, body?: unknown, options: RequestOptions = {}): Promise<TestReply> {
    const mode = this.#shared.options.checkpointEvery ?? null;
    if (mode === null) return await this.#send(path, body, options);
    if (this.#busy) {
      throw new TestKitError(
        `${options.method ?? "POST"} ${path}`,
        "was called while another call of this handle runs; with checkpointEvery, await each call first",
      );
    }
    this.#busy = true;
    try {
      const kind = this.server.controlPlane?.participant.kind;
      if (mode === "boundary" && kind === "environment") {
        return await this.#acrossBoundaries(path, body, options, runEpisodeOf(body));
      }
      let reply: TestReply;
      if (mode === "boundary" && kind === "agent" && options.rollout !== undefined) {
        const episode = episodeId(
          options.rollout,
          options.attempt ?? this.attemptOf(options.rollout),
        );
        reply = await this.#acrossBoundaries(path, body, options, episode);
      } else {
        reply = await this.#send(path, body, options);
      }
      await this.#hop();
      return reply;
    } finally {
      this.#busy = false;
    }
  }

  /** One HTTP call: the prefix, cookies and headers of `options`; updates the jar. */
  async #send(
    path: string,
    body: unknown,
    options: RequestOptions,
    signal?: AbortSignal,
  ): Promise<TestReply> {
    const method = options.method ?? "POST";
    const jar = options.cookies ?? this.cookies;
    let target = path;
    if (options.rollout !== undefined) {
      const attempt = options.attempt ?? this.attemptOf(options.rollout);
      target = rolloutPath(captureKey(episodeId(options.rollout, attempt)), path);
    }
    const headers: Record<string, string> = { ...options.headers };
    const cookie = cookieHeader(jar);
    if (cookie !== undefined) headers.cookie = cookie;
    if (method === "POST") headers["content-type"] = "application/json";
    const reply = await boundedFetch(
      `${method} ${target}`,
      `${this.url}${target}`,
      { method, headers, body: method === "POST" ? JSON.stringify(body ?? {}) : undefined },
      this.#shared.timeoutMs,
      signal,
    );
    Object.assign(jar, setCookieJar(reply.headers.getSetCookie()));
    return reply;
  }

  /**
   * Sends a call of `episode` and, each time the execution records a boundary, checkpoints it
   * there; a boundary it had not restored from yet is restored into a fresh instance and the
   * call sent again as the next attempt. Returns the reply of the attempt that finished.
   */
  async #acrossBoundaries(
    path: string,
    firstBody: unknown,
    options: RequestOptions,
    first: EpisodeId | null,
  ): Promise<TestReply> {
    if (first === null) return await this.#send(path, firstBody, options);
    const maxRestores = this.#shared.options.maxRestores ?? DEFAULT_MAX_RESTORES;
    const operation = `${options.method ?? "POST"} ${path}`;
    let episode = first;
    let body = firstBody;
    /** The boundaries the running attempt was restored from (canonical JSON), or null. */
    let restoredFrom: string | null = null;
    for (let restores = 0; ; restores += 1) {
      const gates = this.#instance.gates;
      if (gates === null) throw new TestKitError(operation, "found no boundary gates");
      const key = captureKey(episode);
      const abort = new AbortController();
      const sending = this.#send(
        path,
        body,
        { ...options, attempt: episode.attempt },
        abort.signal,
      );
      // Settled below, or dropped when this attempt's instance is crashed.
      sending.catch(() => undefined);
      let at: string | null = null;
      try {
        while (at === null) {
          const next = await Promise.race([
            sending.then((reply) => ({ reply, held: null })),
            gates.next(key).then((held) => ({ reply: null, held })),
          ]);
          if (next.held === null) {
            gates.stopWaiting(key);
            return next.reply;
          }
          const { records } = await this.checkpoint();
          const boundaries = records
            .filter((record) => record.episode_id.rollout_id === episode.rollout_id)
            .map((record) => (record as { boundary?: unknown }).boundary ?? null);
          const found = boundaries.length === 0 ? null : canonicalJson(boundaries);
          // No record: a restart, which no restore continues. The same boundaries: the restored
          // attempt recorded its entry boundary again; restoring there again tests nothing new.
          if (found === null || found === restoredFrom) next.held.release();
          else at = found;
        }
      } catch (error) {
        // Cut the held call, or closing its instance would wait out the shutdown grace.
        abort.abort();
        throw error;
      }
      if (restores >= maxRestores) {
        abort.abort();
        throw new TestKitError(
          operation,
          `made no progress: ${restores} restores without finishing. Does the server continue from its restored boundary (steps.continuation(), activation.continuation)? If the execution really records more boundaries, raise maxRestores`,
        );
      }
      await this.#crash(abort);
      restoredFrom = at;
      episode = nextAttempt(episode);
      body = path === "/run" ? replacementRunBody(body, episode) : body;
    }
  }

  /**
   * Drops the current instance as a crash would (its final cleanup never runs, its in-flight
   * call is cut), then restores the last commit into a fresh one and goes on there.
   */
  async #crash(inFlight: AbortController): Promise<void> {
    const old = this.#instance;
    old.gates?.abandon();
    inFlight.abort(new Error("the test kit crashed this instance"));
    await old.server.close();
    const { instance, attempts } = await this.#restoreFresh();
    this.#instance = instance;
    this.#attempts.clear();
    for (const [rollout, attempt] of attempts) this.#attempts.set(rollout, attempt);
    this.#lastCommit = null;
  }

  /** The participant's control status (phase, report with its counts, participant extras). */
  async status(): Promise<StatusReply> {
    return (await this.#control("status", null)) as StatusReply;
  }

  /**
   * Opens a checkpoint and waits (until the call's bound) for every execution to reach a
   * boundary. A prepare still `preparing` at its deadline is resumed and fails, listing the
   * blockers in its reply.
   */
  async prepare(options: { timeoutMs?: number } = {}): Promise<void> {
    const id = this.#shared.env.nextCheckpointId();
    const body = { checkpoint_id: id };
    const reply = (await this.#control("prepare", body, options.timeoutMs)) as { phase: string };
    if (reply.phase !== "prepared") {
      await this.#control("resume", body); // reopen admission so the test can go on
      throw new TestKitError("prepare", "did not become ready by its deadline", {
        status: 200,
        body: reply,
      });
    }
    this.#checkpointId = id;
  }

  /**
   * Commits the prepared checkpoint into a fresh temporary directory (`episodes` scopes it;
   * default: everything) and reads the participant's records back from it.
   */
  async commit(options: { episodes?: readonly EpisodeRef[] } = {}): Promise<CommitResult> {
    const checkpointId = this.#requireCheckpoint("commit");
    const dir = await this.#shared.env.tempDir();
    const episodes = options.episodes?.map((ref) => episodeIdToWire(toEpisode(ref))) ?? null;
    const reply = (await this.#control("commit", {
      checkpoint_id: checkpointId,
      checkpoint_dir: dir,
      episode_ids: episodes,
    })) as CommitReply;
    const participant = this.server.controlPlane?.participant;
    if (participant === undefined) throw new TestKitError("commit", "found no participant");
    const { records } = await readCheckpoint({
      checkpointDir: dir,
      kind: participant.kind,
      instance: this.server.name,
      scope: null,
      recordSchema: participant.recordSchema as z.ZodType<RecordBase>,
    });
    this.#lastCommit = { checkpointId, dir, records, reply };
    return this.#lastCommit;
  }

  /** Ends the open checkpoint and reopens admission. */
  async resume(): Promise<void> {
    const checkpointId = this.#requireCheckpoint("resume");
    await this.#control("resume", { checkpoint_id: checkpointId });
    this.#checkpointId = null;
  }

  /** prepare, commit, resume; a failed commit still resumes before it throws. */
  async checkpoint(options: { episodes?: readonly EpisodeRef[] } = {}): Promise<CommitResult> {
    await this.prepare();
    try {
      return await this.commit(options);
    } finally {
      await this.resume();
    }
  }

  /**
   * Starts a fresh instance of the same class, restores the last commit into it (`episodes`,
   * default: every committed episode, each continuing as its next attempt) and resumes it. The
   * new handle carries this one's cookies, so a client continues where it was.
   */
  async restoreInto(options: { episodes?: readonly EpisodeRef[] } = {}): Promise<TestServer<S>> {
    const { instance, attempts } = await this.#restoreFresh(options.episodes);
    return new TestServer(this.#shared, instance, { ...this.cookies }, attempts);
  }

  /** Retires attempts (and every earlier attempt of their rollouts). */
  async retire(episodes: readonly EpisodeRef[]): Promise<void> {
    await this.#control("retire", {
      checkpoint_id: this.#shared.env.nextCheckpointId(),
      episode_ids: episodes.map((ref) => episodeIdToWire(toEpisode(ref))),
    });
  }

  /** Drops the retired marks of rollouts finished for good. */
  async forget(rolloutIds: readonly string[]): Promise<void> {
    await this.#control("forget", {
      checkpoint_id: this.#shared.env.nextCheckpointId(),
      rollout_ids: rolloutIds,
    });
  }

  /** Closes the current instance; the environment's directories go with its last handle. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    try {
      await this.server.close();
    } finally {
      await this.#shared.env.closed();
    }
  }

  /** checkpoint → restore into a fresh instance → close the old one → go on with the new. */
  async #hop(): Promise<void> {
    await this.checkpoint();
    const { instance, attempts } = await this.#restoreFresh();
    const old = this.#instance;
    this.#instance = instance;
    this.#attempts.clear();
    for (const [rollout, attempt] of attempts) this.#attempts.set(rollout, attempt);
    this.#lastCommit = null;
    await old.server.close();
  }

  async #restoreFresh(
    refs?: readonly EpisodeRef[],
  ): Promise<{ instance: Instance<S>; attempts: Map<string, number> }> {
    const commit = this.#lastCommit;
    if (commit === null) throw new TestKitError("restore", "needs a commit first; call commit()");
    const episodes = (refs ?? commit.reply.episode_ids).map(toEpisode);
    const instance = await startInstance(this.#shared);
    const checkpointId = this.#shared.env.nextCheckpointId();
    try {
      const reply = (await control(this.#shared, instance, "restore", {
        checkpoint_id: checkpointId,
        checkpoint_dir: commit.dir,
        episode_ids: episodes.map(episodeIdToWire),
      })) as RestoreReply;
      await control(this.#shared, instance, "resume", { checkpoint_id: checkpointId });
      const attempts = new Map(this.#attempts);
      for (const key of reply.restored) {
        const next = fromCaptureKey(key);
        attempts.set(next.rollout_id, next.attempt);
      }
      // A restored episode the reply does not list still continues as its next attempt.
      for (const episode of episodes) {
        const next = nextAttempt(episode);
        if ((attempts.get(next.rollout_id) ?? 0) < next.attempt) {
          attempts.set(next.rollout_id, next.attempt);
        }
      }
      return { instance, attempts };
    } catch (error) {
      await instance.server.close();
      throw error;
    }
  }

  #requireCheckpoint(operation: string): string {
    if (this.#checkpointId === null) {
      throw new TestKitError(operation, "needs a prepared checkpoint; call prepare() first");
    }
    return this.#checkpointId;
  }

  #control(operation: Operation, body: object | null, timeoutMs?: number): Promise<unknown> {
    return control(this.#shared, this.#instance, operation, body, timeoutMs);
  }
}

/**
 * One control call over HTTP with the environment's token: `deadline_ts` is the call's bound,
 * and the HTTP wait allows the reply a little longer. Any status but 200 throws.
 */
async function control(
  shared: Shared<TestableServer>,
  instance: Instance<TestableServer>,
  operation: Operation,
  body: object | null,
  timeoutMs = shared.timeoutMs,
): Promise<unknown> {
  const init: RequestInit =
    body === null
      ? { method: "GET", headers: { authorization: `Bearer ${shared.env.token}` } }
      : {
          method: "POST",
          headers: {
            authorization: `Bearer ${shared.env.token}`,
            "content-type": "application/json",
          },
          body: JSON.stringify({ deadline_ts: nowTs() + timeoutMs / 1000, ...body }),
        };
  const mark = instance.log?.mark() ?? 0;
  const reply = await boundedFetch(
    operation,
    `${instance.url}${CONTROL_PREFIX}/${operation}`,
    init,
    timeoutMs + REPLY_GRACE_MS,
  );
  if (reply.status === 200) return reply.body;
  const logged = instance.log?.since(mark) ?? [];
  const problem =
    logged.length === 0 ? "was refused" : `was refused; the server logged: ${logged.join(" | ")};`;
  throw new TestKitError(operation, problem, reply);
}

/** The episode a `/run` body names, or null (the server will refuse the body). */
function runEpisodeOf(body: unknown): EpisodeId | null {
  if (typeof body !== "object" || body === null) return null;
  const fields = body as RunRolloutFields & { episode_id?: unknown };
  try {
    return fields.episode_id === undefined
      ? episodeFromRunBody(fields)
      : parseEpisodeId(fields.episode_id);
  } catch {
    return null;
  }
}

/**
 * The `/run` body of the replacement attempt `next`, as a controller sends it: `episode_id`
 * moved on, or else the row fields (`_ng_rollout_id` with its `-aN` suffix, or
 * `_ng_attempt_index`).
 */
export function replacementRunBody(body: unknown, next: EpisodeId): unknown {
  const fields = body as Record<string, unknown>;
  if (fields.episode_id !== undefined) return { ...fields, episode_id: episodeIdToWire(next) };
  if (typeof fields._ng_rollout_id === "string") {
    const { _ng_attempt_index: _dropped, ...rest } = fields;
    return { ...rest, _ng_rollout_id: captureKey(next) };
  }
  return { ...fields, _ng_attempt_index: next.attempt };
}

/** JSON with object keys sorted, so equal values compare equal as text. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, inner: unknown) =>
    inner !== null && typeof inner === "object" && !Array.isArray(inner)
      ? Object.fromEntries(Object.entries(inner).sort(([a], [b]) => (a < b ? -1 : 1)))
      : inner,
  );
}
