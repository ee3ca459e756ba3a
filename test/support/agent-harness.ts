/**
 * A scriptable agent server for the AgentServer tests, plus the HTTP helpers they share.
 *
 * ## The turn loop
 * Every activation (and session-less call) of a {@link ScriptedAgent} runs
 * {@link ScriptedAgent.steps} policy calls: boundary B0 (or the restored position), then for each
 * step a policy call wrapped in `activation.modelCall` followed by a boundary. Boundaries are lazy:
 * `boundaries` counts the ones recorded, `snapshots` the ones built (only an export builds them).
 * Policy calls go to {@link ScriptedModel}: they reply at once unless the model is held, in which
 * case each call waits until the test answers it (`model.nth(n)` resolves when the n-th call is
 * made), so a test can park an activation inside a model call.
 *
 * ## Hooks
 * Seed (`createSessionState`), close (`closeSessionState`), export, restore and retire hooks log
 * to `events` in order and can each be held once with {@link ScriptedAgent.hold}; a held hook
 * waits until the gate is released (or its signal aborts). `hold("tool")` holds the loop after a
 * policy reply, before its boundary (running work, like a tool round), and `hold("run")` the
 * legacy `/run`'s `wait` step. {@link RestartOnlyAgent} is the same
 * agent without session hooks (a restart-only participant).
 */
import request from "supertest";
import { expect } from "vitest";
import { captureKey, type EpisodeId } from "#sdk/identity/episode-id.js";
import type { RestoredAgentSession } from "#sdk/participants/agent/agent-records.js";
import type { AgentSeedRequest } from "#sdk/wire/agent.js";
import { AgentServer, type AgentSessionsExport } from "#sdk/server/agent-server.js";
import {
  PartialSessionSetupError,
  type AgentCloseResult,
  type LegacyRunInput,
  type RebuiltAgentSession,
  type RespondInput,
  type RespondResult,
} from "#sdk/server/agent/agent-hooks.js";
import type { ServerOptions } from "#sdk/server/server.js";
import { untilSettledOrAborted } from "#sdk/util/abortable.js";
import { deferred, type Deferred } from "#sdk/util/deferred.js";
import type { JsonValue } from "#sdk/json/json-value.js";
import { CONTROL, controlRoutes } from "./control-routes.js";
export { CONTROL } from "./control-routes.js";
import { ACTIVATION_HEADER } from "#sdk/wire/agent.js";

// ------------------------------------------------------------------------------ the model

/** One policy call of the scripted turn loop. */
export interface ModelCall {
  /** The session it was made for (null: a session-less call). */
  readonly sessionKey: string | null;
  /** The 1-based step of the loop. */
  readonly step: number;
  /** The activation's signal. */
  readonly signal: AbortSignal;
  /** Delivers the reply (default: `"reply <key> <step>"`). */
  respond(value?: JsonValue): void;
  /** Fails the call. */
  fail(error: Error): void;
}

/** The policy model of the scripted loop. */
export class ScriptedModel {
  /** Whether calls wait for the test to answer them. @default false: they reply at once */
  hold = false;
  /** Whether a held call stops (throwing its signal's reason) when the activation is cancelled. */
  abortable = true;
  /** Every call, in order. */
  readonly calls: ModelCall[] = [];
  #waiters: { n: number; done: Deferred<ModelCall> }[] = [];

  /** Resolves with the n-th call (1-based) once it has been made. */
  nth(n: number): Promise<ModelCall> {
    const made = this.calls[n - 1];
    if (made !== undefined) return Promise.resolve(made);
    const done = deferred<ModelCall>();
    this.#waiters.push({ n, done });
    return done.promise;
  }

  /** Makes a call (the turn loop's side). */
  call(sessionKey: string | null, step: number, signal: AbortSignal): Promise<JsonValue> {
    const reply = deferred<JsonValue>();
    const fallback = `reply ${sessionKey ?? "-"} ${step}`;
    const call: ModelCall = {
      sessionKey,
      step,
      signal,
      respond: (value) => reply.resolve(value ?? fallback),
      fail: (error) => reply.reject(error),
    };
    this.calls.push(call);
    const n = this.calls.length;
    this.#waiters = this.#waiters.filter((waiter) => {
      if (waiter.n !== n) return true;
      waiter.done.resolve(call);
      return false;
    });
    if (!this.hold) call.respond();
    return this.abortable ? untilSettledOrAborted(reply.promise, [signal]) : reply.promise;
  }
}

// ------------------------------------------------------------------------------ gates

/** A hold on the next call of one hook. */
export interface Gate {
  /** Resolves once the held call has entered. */
  readonly entered: Promise<void>;
  /** Lets the held call continue. */
  release(): void;
  /** Makes the held call throw. */
  fail(error: Error): void;
}

/** Hooks a test can hold. */
export type HeldHook = "seed" | "close" | "export" | "restore" | "retire" | "run" | "tool";

class Gates {
  readonly #pending = new Map<
    HeldHook,
    { gate: Gate; open: Deferred<void>; in: Deferred<void> }[]
  >();

  hold(hook: HeldHook): Gate {
    const open = deferred<void>();
    const entered = deferred<void>();
    const gate: Gate = {
      entered: entered.promise,
      release: () => open.resolve(),
      fail: (error) => open.reject(error),
    };
    const list = this.#pending.get(hook) ?? [];
    list.push({ gate, open, in: entered });
    this.#pending.set(hook, list);
    return gate;
  }

  async pass(hook: HeldHook, signal?: AbortSignal): Promise<void> {
    const held = this.#pending.get(hook)?.shift();
    if (held === undefined) return;
    held.in.resolve();
    await untilSettledOrAborted(held.open.promise, [signal]);
  }
}

// ------------------------------------------------------------------------------ the agents

/** A seeded session's state. */
export interface ScriptedState {
  /** The capture key of the attempt that built it (seed or restore). */
  readonly builtFor: string;
  /** The seed's task ID. */
  readonly task: string;
}

/** The boundary the scripted loop records. */
export interface LoopBoundary {
  readonly step: number;
  readonly outputs: JsonValue[];
}

/** One run of the turn loop. */
export interface LoopRun {
  readonly sessionKey: string | null;
  readonly invocationId: string;
  readonly continuation: JsonValue | null;
  readonly tracked: boolean;
  readonly rollout: string | null;
  readonly signal: AbortSignal;
  ended: boolean;
}

/** The shared scripted behaviour; see the module documentation. */
abstract class ScriptedBase extends AgentServer<ScriptedState> {
  readonly model = new ScriptedModel();
  /** Hook calls in order: `seed:<key>`, `close:<key>`, `export:<k1,k2>`, `restore:<keys>`, `retire:<key>`, `run:<capture key>`. */
  readonly events: string[] = [];
  /** Every run of the turn loop. */
  readonly loops: LoopRun[] = [];
  /** Policy calls per activation. */
  steps = 1;
  /** When set, the next seed fails part way with this error (its partial state is kept). */
  partialSetupFailure: Error | null = null;
  /** Boundaries recorded, and boundary snapshots built. */
  boundaries = 0;
  snapshots = 0;
  readonly #gates = new Gates();

  constructor(options: ServerOptions) {
    super({ logLevel: "silent", shutdownGraceMs: 200, ...options });
  }

  /** Holds the next call of `hook` until the gate is released. */
  hold(hook: HeldHook): Gate {
    return this.#gates.hold(hook);
  }

  /** How many logged events start with `prefix`. */
  count(prefix: string): number {
    return this.events.filter((event) => event.startsWith(prefix)).length;
  }

  protected pass(hook: HeldHook, signal?: AbortSignal): Promise<void> {
    return this.#gates.pass(hook, signal);
  }

  #snapshot(step: number, outputs: JsonValue[]): () => JsonValue {
    this.boundaries += 1;
    const length = outputs.length; // outputs only grow: pin by length
    return () => {
      this.snapshots += 1;
      return { step, outputs: outputs.slice(0, length) };
    };
  }

  protected override async respond(input: RespondInput<ScriptedState>): Promise<RespondResult> {
    const { activation, session } = input;
    const key = session?.key ?? null;
    const run: LoopRun = {
      sessionKey: key,
      invocationId: input.invocationId,
      continuation: activation.continuation,
      tracked: activation.tracked,
      rollout: input.rollout?.captureKey ?? null,
      signal: activation.signal,
      ended: false,
    };
    this.loops.push(run);
    const loopNo = this.loops.length;
    try {
      const restored = activation.continuation as LoopBoundary | null;
      let step = restored?.step ?? 0;
      const outputs: JsonValue[] = [...(restored?.outputs ?? [])];
      await activation.boundary(this.#snapshot(step, outputs));
      while (step < this.steps) {
        const at = step + 1;
        const reply = await activation.modelCall((signal) => this.model.call(key, at, signal));
        step = at;
        outputs.push(reply);
        await this.pass("tool", activation.signal); // a tool round: running between boundaries
        await activation.boundary(this.#snapshot(step, outputs));
      }
      return {
        response: {
          id: `resp-${loopNo}`,
          output: outputs,
          invocation_id: input.invocationId,
          session: key,
          rollout: run.rollout,
          _ng_trajectory: { invocation_id: input.invocationId, loop: loopNo },
        },
        cookies: { model_cookie: `loop-${loopNo}` },
      };
    } finally {
      run.ended = true;
    }
  }

  protected override async createSessionState(input: {
    readonly request: AgentSeedRequest;
    readonly signal: AbortSignal;
  }): Promise<ScriptedState> {
    this.events.push(`seed:${input.request.agent_session_id}`);
    await this.pass("seed", input.signal);
    const state: ScriptedState = {
      builtFor: captureKey(input.request.episode_id as EpisodeId),
      task: input.request.task_id.task_id,
    };
    const failure = this.partialSetupFailure;
    if (failure !== null) {
      this.partialSetupFailure = null;
      throw new PartialSessionSetupError(state, failure);
    }
    return state;
  }

  protected override async closeSessionState(input: {
    readonly sessionKey: string;
    readonly state: ScriptedState | undefined;
    readonly signal: AbortSignal;
  }): Promise<AgentCloseResult> {
    this.events.push(`close:${input.sessionKey}`);
    await this.pass("close", input.signal);
    return {
      agent_observations: { closed: input.sessionKey, builtFor: input.state?.builtFor ?? null },
      resources_cookies: { jar: input.sessionKey },
    };
  }

  /** A legacy `/run`: boundary `work`, a `wait` step held by the `run` gate, boundary `return`. */
  protected override async legacyRun(input: LegacyRunInput): Promise<unknown> {
    const { steps } = input;
    const key = input.episode === null ? "-" : captureKey(input.episode);
    this.events.push(`run:${key}`);
    const restored = steps.continuation() as { next: string; result?: JsonValue } | null;
    if (restored?.next === "return") return restored.result;
    await steps.boundary({ next: "work" });
    const result = await steps.step("wait", async (signal) => {
      await this.pass("run", signal);
      return { reward: 1, rollout: key } as JsonValue;
    });
    await steps.boundary({ next: "return", result });
    return result;
  }
}

/** The scripted agent with session hooks: its sessions are exported and restored. */
export class ScriptedAgent extends ScriptedBase {
  static override checkpointSessionsSupported = true;
  /** Keys the export hook leaves out of its answer. */
  readonly omitFromExport = new Set<string>();
  /** What the export hook returns: a plain object assigned into, or a Map. */
  exportAs: "object" | "map" = "object";
  /** Keys the restore hook leaves out of its answer. */
  readonly omitFromRestore = new Set<string>();
  /** What each restore hook call received. */
  readonly restoredSessions: RestoredAgentSession[][] = [];

  protected override async exportAgentSessions(input: {
    readonly sessionKeys: readonly string[];
    readonly signal: AbortSignal;
  }): Promise<AgentSessionsExport> {
    this.events.push(`export:${input.sessionKeys.join(",")}`);
    await this.pass("export", input.signal);
    // A plain object assigned into, as an author may write it (the SDK guards a key such as
    // `__proto__`), or a Map.
    const out: Record<string, Record<string, JsonValue>> = {};
    const map = new Map<string, Record<string, JsonValue>>();
    for (const key of input.sessionKeys) {
      const session = this.sessionView(key);
      if (session === undefined || this.omitFromExport.has(key)) continue;
      const exported = {
        request: session.request as unknown as JsonValue,
        state: (session.state ?? null) as unknown as JsonValue,
      };
      if (this.exportAs === "map") map.set(key, exported);
      else out[key] = exported;
    }
    return this.exportAs === "map" ? map : out;
  }

  protected override async restoreAgentSessions(input: {
    readonly sessions: readonly RestoredAgentSession[];
    readonly signal: AbortSignal;
  }): Promise<Map<string, RebuiltAgentSession<ScriptedState>>> {
    this.events.push(`restore:${input.sessions.map((s) => s.sessionKey).join(",")}`);
    this.restoredSessions.push([...input.sessions]);
    await this.pass("restore", input.signal);
    const out = new Map<string, RebuiltAgentSession<ScriptedState>>();
    for (const s of input.sessions) {
      if (this.omitFromRestore.has(s.sessionKey)) continue;
      const stored = s.session as unknown as { request: unknown; state: ScriptedState };
      out.set(s.sessionKey, {
        request: stored.request,
        state: { ...stored.state, builtFor: captureKey(s.episodeId) },
      });
    }
    return out;
  }

  protected override async retireAgentSession(input: {
    readonly sessionKey: string;
    readonly signal: AbortSignal;
  }): Promise<void> {
    this.events.push(`retire:${input.sessionKey}`);
    await this.pass("retire", input.signal);
  }
}

/** The scripted agent without session hooks: a restart-only participant. */
export class RestartOnlyAgent extends ScriptedBase {}

// ------------------------------------------------------------------------------ HTTP helpers

export const TOKEN = "agent-token";
export const CHECKPOINT_ON = { enabled: true, control_auth_token: TOKEN } as const;
export const SEED = "/v1/agent_sessions";
export const CLOSE = "/v1/agent_sessions/close";
export const ACTIVATION = ACTIVATION_HEADER;

/** An absolute deadline `seconds` from now. */
export function deadline(seconds = 10): number {
  return Date.now() / 1000 + seconds;
}

/** The wire EpisodeId of `rollout` at `attempt`. */
export function ep(rollout: string, attempt = 0): { rollout_id: string; attempt: number } {
  return { rollout_id: rollout, attempt };
}

/** A seed body. */
export function seedBody(
  id: string,
  episode = ep("r"),
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    agent_session_id: id,
    episode_id: episode,
    task_id: { taskset: "t", task_id: id },
    ...extra,
  };
}

/** A control call with a bearer token; `deadline_ts` defaults to 10 s from now. */
export const { control } = controlRoutes(TOKEN, 10);

/** The control status. */
export async function status(url: string) {
  const res = await request(url)
    .get(`${CONTROL}/status`)
    .set("Authorization", `Bearer ${TOKEN}`)
    .expect(200);
  return res.body as {
    kind: string;
    phase: string;
    accepting: boolean;
    report: {
      ready: boolean;
      blockers: string[];
      restarts: string[];
      counts: Record<string, number>;
    };
  };
}

/** A prepare that does not wait (its deadline has passed): the report as it is now. */
export function prepareNow(url: string, id: string, extra: Record<string, unknown> = {}) {
  return control(url, "prepare", { checkpoint_id: id, deadline_ts: deadline(-1), ...extra });
}

/** The `name=value` pairs of a reply's Set-Cookie headers, as one Cookie header. */
export function cookieOf(res: { headers: Record<string, unknown> }): string {
  const lines = (res.headers["set-cookie"] ?? []) as string[];
  return lines.map((line) => line.split(";")[0]).join("; ");
}

/** Seeds `id` and returns the session cookie. */
export async function seeded(
  url: string,
  id: string,
  episode = ep("r"),
  extra: Record<string, unknown> = {},
): Promise<string> {
  const res = await request(url)
    .post(SEED)
    .send(seedBody(id, episode, extra));
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return cookieOf(res);
}

/** An activation of a session: under `/ng-rollout/<prefix>` unless `prefix` is null. */
export function activate(
  url: string,
  cookie: string | null,
  options: { prefix?: string | null; index?: string | number; input?: string } = {},
) {
  const prefix = options.prefix === undefined ? "r" : options.prefix;
  const path = prefix === null ? "/v1/responses" : `/ng-rollout/${prefix}/v1/responses`;
  let req = request(url).post(path);
  if (cookie !== null) req = req.set("Cookie", cookie);
  if (options.index !== undefined) req = req.set(ACTIVATION, String(options.index));
  return req.send({ input: options.input ?? "hello" });
}

/** A close request. */
export function closeReq(url: string, id: string, episode = ep("r"), cookie: string | null = null) {
  let req = request(url).post(CLOSE);
  if (cookie !== null) req = req.set("Cookie", cookie);
  return req.send({ agent_session_id: id, episode_id: episode });
}

/** Settles with `work`'s outcome and lets a test check whether it has settled yet. */
export function track<T>(work: PromiseLike<T>): { done: () => boolean; value: Promise<T> } {
  let settled = false;
  const value = Promise.resolve(work).finally(() => {
    settled = true;
  });
  value.catch(() => undefined);
  return { done: () => settled, value };
}

/** Bounded polling for the integration tests (timer based, never a fixed sleep). */
export const POLL = { timeout: 5000, interval: 2 } as const;
