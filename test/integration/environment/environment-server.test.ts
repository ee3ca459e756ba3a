/**
 * The environment server over HTTP with the real control routes: `/run` shapes and rollout
 * decoding, parking at boundaries, commit and restore into a fresh server, retire fences and
 * duplicate runs.
 */
import express from "express";
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import { ConfigError, InvalidRequestError } from "#sdk/errors.js";
import {
  EnvironmentConfigSchema,
  EnvironmentServer,
  type EpisodeOutcome,
  type RunEpisodeInput,
} from "#sdk/server/environment-server.js";
import { deferred, type Deferred } from "#sdk/util/deferred.js";
import type { JsonValue } from "#sdk/json/json-value.js";
import { makeTempDir, removeTempDir } from "../../support/test-participant.js";
import { CONTROL, controlRoutes } from "../../support/control-routes.js";

const TOKEN = "environment-token";
const AUTH = `Bearer ${TOKEN}`;
const on = { enabled: true, control_auth_token: TOKEN };
const silent = { logLevel: "silent", config: { cleanup_timeout_seconds: 30 } };
const poll = { timeout: 5000, interval: 5 };
const TASK = { task_id: { taskset: "t", task_id: "1" }, task_input: { n: 1 } };

const started: EnvironmentServer[] = [];
const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map((s) => s.close()));
  await Promise.all(dirs.splice(0).map((d) => removeTempDir(d)));
});

interface Boundary {
  readonly next: "seed" | "verify";
  readonly seed?: string;
}

/** Two stages, `seed` (replay) then `verify` (wait); either can be held on a gate. */
class Staged extends EnvironmentServer {
  static override checkpointBoundaries = true;
  readonly calls: string[] = [];
  readonly holds = new Map<string, Deferred<void>>();
  readonly cleaned: string[] = [];
  built = 0;

  hold(stage: string): () => void {
    const gate = deferred<void>();
    this.holds.set(stage, gate);
    return () => gate.resolve();
  }

  async #gate(stage: string, key: string, signal: AbortSignal): Promise<string> {
    this.calls.push(`${stage}:${key}`);
    const gate = this.holds.get(stage);
    if (gate !== undefined) {
      await new Promise<void>((resolve, reject) => {
        signal.addEventListener("abort", () => reject(signal.reason as Error), { once: true });
        gate.promise.then(resolve, reject);
      });
    }
    return `${stage}-${key}`;
  }

  protected override async runEpisode({
    steps,
    onCleanup,
  }: RunEpisodeInput): Promise<EpisodeOutcome> {
    const key = steps.captureKey;
    onCleanup(() => void this.cleaned.push(key));
    const restored = steps.continuation() as Boundary | null;
    let seed = restored?.seed ?? null;
    if ((restored?.next ?? "seed") === "seed") {
      await steps.boundary({ next: "seed" });
      seed = await steps.step("replay", (signal) => this.#gate("seed", key, signal));
    }
    await steps.boundary(() => {
      this.built += 1;
      return { next: "verify", seed };
    });
    const verdict = await steps.step("wait", (signal) => this.#gate("verify", key, signal));
    return { result: { seed, verdict } as JsonValue };
  }
}

async function serve(checkpoint: object | null = on) {
  const server = new Staged({
    name: "env",
    ...(checkpoint === null ? {} : { checkpoint }),
    ...silent,
  });
  started.push(server);
  const { url } = await server.listen({ port: 0 });
  return { server, url };
}

function run(url: string, body: Record<string, unknown>) {
  return request(url)
    .post("/run")
    .send({ task: TASK, ...body });
}

const { control } = controlRoutes(TOKEN);

async function status(url: string) {
  const res = await request(url).get(`${CONTROL}/status`).set("Authorization", AUTH).expect(200);
  return res.body as {
    kind: string;
    restored_pending: string[];
    report: { ready: boolean; blockers: string[]; restarts: string[] };
  };
}

/** Settles with the outcome of `work` and lets a test check whether it has settled yet. */
function track<T>(work: PromiseLike<T>): { done: () => boolean; value: Promise<T> } {
  let settled = false;
  const value = Promise.resolve(work).finally(() => {
    settled = true;
  });
  value.catch(() => undefined);
  return { done: () => settled, value };
}

/** Runs `r` into a checkpoint parked at `next: verify`, commits it, resumes; returns the dir. */
async function checkpointAtVerify() {
  const { server, url } = await serve();
  const releaseSeed = server.hold("seed");
  const first = track(run(url, { episode_id: { rollout_id: "r" } }));
  await expect.poll(() => server.calls, poll).toEqual(["seed:r"]);
  await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
  releaseSeed();
  await expect.poll(() => server.participant?.steps.stateOf("r"), poll).toBe("parked");
  expect(server.calls).toEqual(["seed:r"]); // parked before verifying
  expect((await status(url)).report.ready).toBe(true);
  const dir = await makeTempDir();
  dirs.push(dir);
  const committed = await control(url, "commit", {
    checkpoint_id: "c1",
    checkpoint_dir: dir,
    episode_ids: null,
  }).expect(200);
  expect(committed.body.episode_ids).toEqual(["r"]);
  await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
  const reply = await first.value;
  expect(reply.status).toBe(200);
  return { dir, source: server };
}

describe("/run", () => {
  it("echoes the episode and task, and decodes derived rollout ids", async () => {
    const { url } = await serve();
    const res = await run(url, { _ng_task_index: 3, _ng_rollout_index: 1, _ng_attempt_index: 2 });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toEqual({
      episode_id: { rollout_id: "3-1", attempt: 2 },
      task_id: TASK.task_id,
      result: { seed: "seed-3-1-a2", verdict: "verify-3-1-a2" },
      failure: null,
    });
  });

  it("runs an explicit <id>-aN as attempt N and refuses a suffix plus an attempt index", async () => {
    const { url } = await serve();
    const res = await run(url, { _ng_rollout_id: "job-a2" }).expect(200);
    expect(res.body.episode_id).toEqual({ rollout_id: "job", attempt: 2 });
    const refused = await run(url, { _ng_rollout_id: "job-a2", _ng_attempt_index: 1 });
    expect(refused.status).toBe(422);
    expect(refused.body.error.code).toBe("invalid_request");
    expect(refused.body.error.issues[0].path).toEqual(["_ng_attempt_index"]);
  });

  it.each([
    ["no episode at all", {}, "episode_id"],
    ["a malformed explicit id", { _ng_rollout_id: "bad id" }, "_ng_rollout_id"],
    ["a negative index", { _ng_task_index: -1, _ng_rollout_index: 0 }, "_ng_task_index"],
    [
      "episode_id disagreeing with the row",
      { episode_id: { rollout_id: "x", attempt: 0 }, _ng_rollout_id: "y" },
      "episode_id",
    ],
  ])("answers %s with 422 invalid_request naming the field", async (_what, fields, field) => {
    const { url } = await serve();
    const res = await run(url, fields);
    expect(res.status, JSON.stringify(res.body)).toBe(422);
    expect(res.body.error.code).toBe("invalid_request");
    expect(res.body.error.issues.map((i: { path: string[] }) => i.path)).toEqual([[field]]);
  });

  it("refuses a reserved suffix in episode_id and unknown keys with 422", async () => {
    const { url } = await serve();
    expect((await run(url, { episode_id: { rollout_id: "r-a1" } })).status).toBe(422);
    expect((await run(url, { episode_id: { rollout_id: "r" }, extra: 1 })).status).toBe(422);
  });

  it("maps an unhandled error to a terminal failure after final cleanup", async () => {
    class Broken extends EnvironmentServer {
      protected override runEpisode({ onCleanup }: RunEpisodeInput): Promise<EpisodeOutcome> {
        onCleanup(() => undefined);
        return Promise.reject(new TypeError("boom"));
      }
    }
    const server = new Broken({ name: "broken", checkpoint: on, ...silent });
    started.push(server);
    const res = await request(server.app())
      .post("/run")
      .send({ task: TASK, episode_id: { rollout_id: "r" } });
    expect(res.body.failure).toEqual({
      failure_reason: "Unhandled environment server error: TypeError: boom",
      terminal: true,
    });
    expect(res.body.result).toBeNull();
  });
  it("reports a typed non-control error raised inside the episode as a failure, not as an HTTP error", async () => {
    class Strict extends EnvironmentServer {
      protected override runEpisode(): Promise<EpisodeOutcome> {
        return Promise.reject(
          new InvalidRequestError("invalid seed reply: resources_session_id missing"),
        );
      }
    }
    const server = new Strict({ name: "strict", checkpoint: on, ...silent });
    started.push(server);
    const res = await request(server.app())
      .post("/run")
      .send({ task: TASK, episode_id: { rollout_id: "r" } });
    expect(res.status).toBe(200);
    expect(res.body.failure.failure_reason).toContain("InvalidRequestError");
    expect(res.body.failure.terminal).toBe(true);
  });

  it.each([
    ["nothing", undefined],
    ["a result of undefined", { result: undefined }],
    [
      "both a result and a failure",
      { result: 1, failure: { failure_reason: "x", terminal: false } },
    ],
  ])("turns an outcome of %s into a terminal failure, not a 500", async (_what, outcome) => {
    class Sloppy extends EnvironmentServer {
      protected override runEpisode(): Promise<EpisodeOutcome> {
        return Promise.resolve(outcome as unknown as EpisodeOutcome);
      }
    }
    const server = new Sloppy({ name: "sloppy", checkpoint: on, ...silent });
    started.push(server);
    const res = await request(server.app())
      .post("/run")
      .send({ task: TASK, episode_id: { rollout_id: "r" } });
    expect(res.status).toBe(200);
    expect(res.body.result).toBeNull();
    expect(res.body.failure.failure_reason).toContain("runEpisode must return exactly one");
  });
});

describe("checkpoints", () => {
  it("prepare parks a running episode at its next boundary; a commit exports that boundary", async () => {
    const { source } = await checkpointAtVerify();
    expect(source.calls).toEqual(["seed:r", "verify:r"]);
    expect(source.cleaned).toEqual(["r"]);
  });

  it("a restore into a fresh server continues the replacement from the boundary", async () => {
    const { dir } = await checkpointAtVerify();
    const { server, url } = await serve();
    const restored = await control(url, "restore", {
      checkpoint_id: "c2",
      checkpoint_dir: dir,
      episode_ids: [{ rollout_id: "r", attempt: 0 }],
    }).expect(200);
    expect(restored.body.restored).toEqual(["r-a1"]);
    expect((await status(url)).restored_pending).toEqual(["r-a1"]);
    const early = await run(url, { _ng_rollout_id: "r-a1" });
    expect(early.status).toBe(409);
    expect(early.body.error.code).toBe("admission_closed");
    await control(url, "resume", { checkpoint_id: "c2" }).expect(200);
    const other = await request(url)
      .post("/run")
      .send({ task: { ...TASK, task_input: { n: 2 } }, _ng_rollout_id: "r-a1" });
    expect(other.status).toBe(409);
    expect(other.body.error.code).toBe("checkpoint_error");
    const res = await run(url, { _ng_rollout_id: "r-a1" }).expect(200);
    expect(res.body).toMatchObject({
      episode_id: { rollout_id: "r", attempt: 1 },
      result: { seed: "seed-r", verdict: "verify-r-a1" },
    });
    expect(server.calls).toEqual(["verify:r-a1"]); // the seed is not run again
    expect((await status(url)).restored_pending).toEqual([]);
  });

  it("a boundary that is not JSON fails the commit with 422 naming the episode and the path", async () => {
    const release = deferred<void>();
    class Dated extends EnvironmentServer {
      static override checkpointBoundaries = true;
      protected override async runEpisode({ steps }: RunEpisodeInput): Promise<EpisodeOutcome> {
        await steps.boundary({ next: "seed", at: new Date(0) } as unknown as JsonValue);
        await steps.step("replay", () => release.promise);
        return { result: null };
      }
    }
    const server = new Dated({ name: "env", checkpoint: on, ...silent });
    started.push(server);
    const { url } = await server.listen({ port: 0 });
    const reply = track(run(url, { episode_id: { rollout_id: "r" } }));
    await expect.poll(() => server.participant?.steps.stateOf("r"), poll).toBe("replay_step");
    const prepared = await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    expect(prepared.body.report.ready).toBe(true);
    const dir = await makeTempDir();
    dirs.push(dir);
    const refused = await control(url, "commit", {
      checkpoint_id: "c1",
      checkpoint_dir: dir,
      episode_ids: null,
    }).expect(422);
    expect(refused.body.error.code).toBe("invalid_checkpoint_state");
    expect(refused.body.error.detail).toMatch(
      /episode 'r' is not JSON: \$\.boundary\.at: a Date is not JSON/,
    );
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    release.resolve();
    expect((await reply.value).status).toBe(200);
  });

  it("a retired attempt's late /run is refused with stale_attempt until forget", async () => {
    const { server, url } = await serve();
    server.hold("verify");
    const first = track(run(url, { episode_id: { rollout_id: "r" } }));
    await expect.poll(() => server.calls, poll).toEqual(["seed:r", "verify:r"]);
    await control(url, "retire", {
      checkpoint_id: "x1",
      episode_ids: [{ rollout_id: "r", attempt: 0 }],
    }).expect(200);
    await expect(first.value).rejects.toThrow(); // no normal reply
    expect(server.cleaned).toEqual(["r"]); // final cleanup ran before the retire replied
    const late = await run(url, { episode_id: { rollout_id: "r" } });
    expect(late.status).toBe(409);
    expect(late.body.error.code).toBe("stale_attempt");
    await control(url, "forget", { checkpoint_id: "x2", rollout_ids: ["r"] }).expect(200);
    server.holds.clear();
    await run(url, { episode_id: { rollout_id: "r" } }).expect(200);
  });

  it("a duplicate /run of a running attempt is refused without touching the live episode", async () => {
    const { server, url } = await serve();
    const release = server.hold("seed");
    const first = track(run(url, { episode_id: { rollout_id: "r" } }));
    await expect.poll(() => server.calls, poll).toEqual(["seed:r"]);
    const dup = await run(url, { episode_id: { rollout_id: "r" } });
    expect(dup.status).toBe(409);
    expect(dup.body.error.code).toBe("checkpoint_error");
    expect(server.cleaned).toEqual([]);
    expect(server.participant?.steps.has("r")).toBe(true);
    release();
    const reply = await first.value;
    expect(reply.status).toBe(200);
    expect(server.cleaned).toEqual(["r"]);
  });

  it("every episode is a restart when the server records no boundaries", async () => {
    class Plain extends EnvironmentServer {
      readonly gate = deferred<void>();
      protected override async runEpisode({ steps }: RunEpisodeInput): Promise<EpisodeOutcome> {
        await steps.boundary({ next: "only" });
        await this.gate.promise;
        return { result: null };
      }
    }
    const server = new Plain({ name: "plain", checkpoint: on, ...silent });
    started.push(server);
    const { url } = await server.listen({ port: 0 });
    const pending = track(run(url, { episode_id: { rollout_id: "p" } }));
    await expect.poll(() => server.participant?.steps.has("p"), poll).toBe(true);
    const prepared = await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    expect(prepared.body.report).toMatchObject({ ready: true, restarts: ["p"] });
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    server.gate.resolve();
    expect((await pending.value).status).toBe(200);
  });
});

describe("startup and checkpointing off", () => {
  it("builds with num_workers > 1 and checkpointing on (each worker is part of one participant)", () => {
    const deployment = {
      checkpoint: null,
      servers: {
        env: {
          kind: "environment",
          url: "http://127.0.0.1:1",
          host: "127.0.0.1",
          port: 1,
          num_workers: 2,
          config: {},
        },
      },
    } as never;
    const env = new Staged({ name: "env", checkpoint: on, deployment, ...silent });
    expect(env.participant).not.toBeNull();
    expect(() => new Staged({ name: "env", deployment, ...silent })).not.toThrow();
  });

  it("mounts no control routes and never builds boundary payloads", async () => {
    const { server, url } = await serve(null);
    expect(server.participant).toBeNull();
    const res = await run(url, { episode_id: { rollout_id: "r" } }).expect(200);
    expect(res.body.result).toEqual({ seed: "seed-r", verdict: "verify-r" });
    expect(server.built).toBe(0);
    await request(url).get(`${CONTROL}/status`).set("Authorization", AUTH).expect(404);
  });
});

describe("a replay step failing inside a checkpoint", () => {
  /** Seeds in a replay step that fails once its gate opens; records its cleanups. */
  class FailingSeed extends EnvironmentServer {
    static override checkpointBoundaries = true;
    readonly fail = deferred<void>();
    readonly cleaned: string[] = [];
    seeding = false;
    protected override async runEpisode({
      steps,
      onCleanup,
    }: RunEpisodeInput): Promise<EpisodeOutcome> {
      onCleanup(() => void this.cleaned.push(steps.captureKey));
      await steps.boundary({ next: "seed" });
      await steps.step("replay", async () => {
        this.seeding = true;
        await this.fail.promise;
        throw new Error("seed failed");
      });
      return { result: null };
    }
  }

  it("clears the boundary instead of blocking; cleanup, end and the reply wait for resume", async () => {
    const server = new FailingSeed({ name: "env", checkpoint: on, ...silent });
    started.push(server);
    const { url } = await server.listen({ port: 0 });
    const reply = track(run(url, { episode_id: { rollout_id: "r" } }));
    await expect.poll(() => server.seeding, poll).toBe(true);
    const prepared = await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    expect(prepared.body.report.ready).toBe(true);
    expect(server.participant?.steps.exported()).toEqual(new Map([["r", { next: "seed" }]]));
    server.fail.resolve();
    await expect.poll(() => server.participant?.steps.stateOf("r"), poll).toBe("parked");
    // The failure cleared the boundary: still ready, exported to start over from its input.
    expect((await status(url)).report).toMatchObject({ ready: true, blockers: [] });
    expect(server.participant?.steps.exported()).toEqual(new Map([["r", null]]));
    const dir = await makeTempDir();
    dirs.push(dir);
    const committed = await control(url, "commit", {
      checkpoint_id: "c1",
      checkpoint_dir: dir,
      episode_ids: null,
    }).expect(200);
    expect(committed.body.episode_ids).toEqual(["r"]);
    expect(await server.participant?.export(null, new AbortController().signal)).toEqual([
      expect.objectContaining({ episode_id: { rollout_id: "r", attempt: 0 }, boundary: null }),
    ]);
    // Cleanup, end and the reply wait for resume.
    expect(server.cleaned).toEqual([]);
    expect(server.participant?.steps.has("r")).toBe(true);
    expect(reply.done()).toBe(false);
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    const res = await reply.value;
    expect(res.status).toBe(200);
    expect(res.body.failure).toEqual({
      failure_reason: "Unhandled environment server error: Error: seed failed",
      terminal: true,
    });
    expect(server.cleaned).toEqual(["r"]);
    expect(server.participant?.steps.has("r")).toBe(false);
  });

  it("with no checkpoint open, fails at once with the episode's cleanup", async () => {
    const server = new FailingSeed({ name: "env", checkpoint: on, ...silent });
    started.push(server);
    server.fail.resolve();
    const res = await request(server.app())
      .post("/run")
      .send({ task: TASK, episode_id: { rollout_id: "r" } })
      .expect(200);
    expect(res.body.failure.failure_reason).toContain("seed failed");
    expect(server.cleaned).toEqual(["r"]);
  });
});

describe("restarts from a seed reply", () => {
  /** A fake resources server: `/seed_session` replies with the restart header when asked. */
  async function fakeResources(restart: string | null) {
    const app = express();
    app.post("/seed_session", (_req, res) => {
      if (restart !== null) res.setHeader("X-NG-Checkpoint-Restart", restart);
      res.json({ ok: true });
    });
    const listener = await new Promise<import("node:http").Server>((resolve) => {
      const s = app.listen(0, "127.0.0.1", () => resolve(s));
    });
    closers.push(() => new Promise<void>((resolve) => listener.close(() => resolve())));
    const address = listener.address() as import("node:net").AddressInfo;
    return `http://127.0.0.1:${address.port}`;
  }
  const closers: (() => Promise<void>)[] = [];
  afterEach(async () => {
    await Promise.all(closers.splice(0).map((c) => c()));
  });

  /** Seeds over HTTP (replay), marks a restart from the reply, then waits on a gated step. */
  class Seeding extends EnvironmentServer {
    static override checkpointBoundaries = true;
    resources = "";
    readonly seedGate = deferred<void>();
    readonly workGate = deferred<void>();
    readonly marked: boolean[] = [];
    working = false;
    seeding = false;
    seeded = false;
    protected override async runEpisode({ steps }: RunEpisodeInput): Promise<EpisodeOutcome> {
      await steps.boundary({ next: "seed" });
      const headers = await steps.step("replay", async (signal) => {
        this.seeding = true;
        await this.seedGate.promise;
        const reply = await fetch(`${this.resources}/seed_session`, { method: "POST", signal });
        this.seeded = true;
        return reply.headers;
      });
      this.marked.push(await steps.markRestartFrom(headers));
      await steps.boundary({ next: "work" });
      await steps.step("wait", async () => {
        this.working = true;
        await this.workGate.promise;
      });
      return { result: null };
    }
  }

  async function serveSeeding(restart: string | null) {
    const server = new Seeding({ name: "env", checkpoint: on, ...silent });
    server.resources = await fakeResources(restart);
    started.push(server);
    const { url } = await server.listen({ port: 0 });
    return { server, url };
  }

  it("x-ng-checkpoint-restart: 1 makes the episode a restart: reported, never blocking, not exported", async () => {
    const { server, url } = await serveSeeding("1");
    server.seedGate.resolve();
    const reply = track(run(url, { episode_id: { rollout_id: "r" } }));
    await expect.poll(() => server.working, poll).toBe(true);
    expect(server.marked).toEqual([true]);
    const prepared = await control(url, "prepare", {
      checkpoint_id: "c1",
      deadline_ts: Date.now() / 1000 + 2,
    }).expect(200);
    expect(prepared.body.report).toMatchObject({ ready: true, blockers: [], restarts: ["r"] });
    const dir = await makeTempDir();
    dirs.push(dir);
    const committed = await control(url, "commit", {
      checkpoint_id: "c1",
      checkpoint_dir: dir,
      episode_ids: null,
    }).expect(200);
    expect(committed.body.episode_ids).toEqual([]);
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    server.workGate.resolve();
    expect((await reply.value).status).toBe(200);
  });

  it("any other value leaves the episode continuable", async () => {
    const { server, url } = await serveSeeding("true");
    server.seedGate.resolve();
    server.workGate.resolve();
    await run(url, { episode_id: { rollout_id: "r" } }).expect(200);
    expect(server.marked).toEqual([false]);
  });

  it("a restart reply during a checkpoint changes nothing the checkpoint reported until resume", async () => {
    const { server, url } = await serveSeeding("1");
    const reply = track(run(url, { episode_id: { rollout_id: "r" } }));
    await expect.poll(() => server.seeding, poll).toBe(true);
    const prepared = await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    expect(prepared.body.report).toMatchObject({ ready: true, restarts: [] });
    server.seedGate.resolve(); // the seed reply arrives while the checkpoint is open
    await expect.poll(() => server.seeded, poll).toBe(true);
    expect((await status(url)).report).toMatchObject({ ready: true, restarts: [] });
    expect(server.marked).toEqual([]); // waits for resume, without blocking
    expect(server.participant?.steps.stateOf("r")).toBe("replay_step");
    const dir = await makeTempDir();
    dirs.push(dir);
    const committed = await control(url, "commit", {
      checkpoint_id: "c1",
      checkpoint_dir: dir,
      episode_ids: null,
    }).expect(200);
    expect(committed.body.episode_ids).toEqual(["r"]); // as prepare reported it
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    await expect.poll(() => server.working, poll).toBe(true);
    expect(server.marked).toEqual([true]);
    expect((await status(url)).report.restarts).toEqual(["r"]);
    server.workGate.resolve();
    expect((await reply.value).status).toBe(200);
  });
});

describe("a retire cut short", () => {
  /** Its verify step ignores the episode's signal until its gate opens. */
  class Stubborn extends EnvironmentServer {
    static override checkpointBoundaries = true;
    readonly gate = deferred<void>();
    readonly cleaned: string[] = [];
    verifying = false;
    protected override async runEpisode({
      steps,
      onCleanup,
    }: RunEpisodeInput): Promise<EpisodeOutcome> {
      onCleanup(() => void this.cleaned.push(steps.captureKey));
      await steps.boundary({ next: "verify" });
      await steps.step("wait", async () => {
        this.verifying = true;
        await this.gate.promise; // ignores the signal
      });
      await steps.boundary({ next: "return" });
      return { result: null };
    }
  }

  it("keeps the episode tracked, blocking the next prepare; a retried retire finishes it", async () => {
    const server = new Stubborn({ name: "env", checkpoint: on, ...silent });
    started.push(server);
    const { url } = await server.listen({ port: 0 });
    const reply = track(run(url, { episode_id: { rollout_id: "r" } }));
    await expect.poll(() => server.verifying, poll).toBe(true);
    const soon = (): number => Date.now() / 1000 + 0.2;
    const ids = [{ rollout_id: "r", attempt: 0 }];
    const cut = await control(url, "retire", {
      checkpoint_id: "x1",
      episode_ids: ids,
      deadline_ts: soon(),
    });
    expect(cut.status).toBe(409);
    expect(cut.body.error.code).toBe("deadline_exceeded");
    expect(server.participant?.steps.has("r")).toBe(true);
    expect(server.cleaned).toEqual([]);
    // The next prepare reports it as a blocker instead of exporting it.
    const prepared = await control(url, "prepare", {
      checkpoint_id: "c1",
      deadline_ts: soon(),
    }).expect(200);
    expect(prepared.body.report).toMatchObject({ ready: false, blockers: ["r"] });
    expect(await server.participant?.export(null, new AbortController().signal)).toEqual([]);
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    // A retried retire waits for the episode to end, then frees it.
    const retried = track(control(url, "retire", { checkpoint_id: "x2", episode_ids: ids }));
    expect((await status(url)).report.blockers).toEqual(["r"]);
    expect(retried.done()).toBe(false);
    server.gate.resolve();
    expect((await retried.value).status).toBe(200);
    expect(server.cleaned).toEqual(["r"]);
    expect(server.participant?.steps.has("r")).toBe(false);
    await expect(reply.value).rejects.toThrow(); // retired: no normal reply
    expect((await status(url)).report).toMatchObject({ ready: true, blockers: [] });
  });
});

describe("config", () => {
  /** Its verify step waits on a gate, or until the episode's signal fires. */
  class Bounded extends EnvironmentServer {
    static override checkpointBoundaries = true;
    readonly gate = deferred<void>();
    readonly cleaned: string[] = [];
    readonly cleanupGate = deferred<void>();
    stuckCleanup = false;
    protected override async runEpisode({
      steps,
      onCleanup,
    }: RunEpisodeInput): Promise<EpisodeOutcome> {
      onCleanup(() => void this.cleaned.push("first-registered"));
      onCleanup(async () => {
        if (this.stuckCleanup) await this.cleanupGate.promise; // never settles by itself
        this.cleaned.push("last-registered");
      });
      await steps.boundary({ next: "verify" });
      await steps.step("wait", (signal) => {
        signal.throwIfAborted();
        return new Promise<void>((resolve, reject) => {
          signal.addEventListener("abort", () => reject(signal.reason as Error), { once: true });
          this.gate.promise.then(resolve, reject);
        });
      });
      return { result: "done" };
    }
  }

  function bounded(config: object, checkpoint: object | null = on) {
    const server = new Bounded({
      name: "env",
      logLevel: "silent",
      config,
      ...(checkpoint === null ? {} : { checkpoint }),
    });
    started.push(server);
    return server;
  }

  it("validates the settings with configSchema() at startup", () => {
    expect(() => bounded({}).app()).toThrow(/config\.cleanup_timeout_seconds/);
    expect(() => bounded({ cleanup_timeout_seconds: 0 }).app()).toThrow(ConfigError);
    expect(() =>
      bounded({ cleanup_timeout_seconds: 5, default_episode_timeout_seconds: -1 }).app(),
    ).toThrow(/config\.default_episode_timeout_seconds/);
    expect(() => bounded({ cleanup_timeout_seconds: 5, unknown: 1 }).app()).toThrow(ConfigError);
    expect(() =>
      bounded({ cleanup_timeout_seconds: 5, default_episode_timeout_seconds: null }).app(),
    ).not.toThrow();
    expect(EnvironmentConfigSchema.parse({ cleanup_timeout_seconds: 5 })).toEqual({
      cleanup_timeout_seconds: 5,
      default_episode_timeout_seconds: null,
      max_concurrent_episodes: null,
      queue_timeout_seconds: null,
    });
    expect(() => bounded({ cleanup_timeout_seconds: 5, max_concurrent_episodes: 1 }).app()).toThrow(
      /config\.queue_timeout_seconds: queue_timeout_seconds is required/,
    );
    expect(() => bounded({ cleanup_timeout_seconds: 5, max_concurrent_episodes: 0 }).app()).toThrow(
      /config\.max_concurrent_episodes/,
    );
  });

  /** Counts the episodes that entered the protocol; each waits on its own gate. */
  class Counted extends EnvironmentServer {
    readonly entered: string[] = [];
    readonly gates = new Map<string, Deferred<void>>();
    protected override async runEpisode({ steps }: RunEpisodeInput): Promise<EpisodeOutcome> {
      this.entered.push(steps.captureKey);
      const gate = deferred<void>();
      this.gates.set(steps.captureKey, gate);
      await gate.promise;
      return { result: steps.captureKey };
    }
  }

  it("max_concurrent_episodes: a /run waits for a slot, then runs", async () => {
    const server = new Counted({
      name: "env",
      logLevel: "silent",
      config: { cleanup_timeout_seconds: 5, max_concurrent_episodes: 1, queue_timeout_seconds: 30 },
    });
    started.push(server);
    const { url } = await server.listen({ port: 0 });
    const first = track(run(url, { episode_id: { rollout_id: "a" } }));
    await expect.poll(() => server.entered, poll).toEqual(["a"]);
    const second = track(run(url, { episode_id: { rollout_id: "b" } }));
    // The second request is in, waiting for the slot: let the event loop turn many times.
    for (let i = 0; i < 50; i += 1) await new Promise((resolve) => setImmediate(resolve));
    expect(server.entered).toEqual(["a"]);
    server.gates.get("a")?.resolve();
    expect((await first.value).body.result).toBe("a");
    await expect.poll(() => server.entered, poll).toEqual(["a", "b"]);
    server.gates.get("b")?.resolve();
    expect((await second.value).body.result).toBe("b");
  });

  it("queue_timeout_seconds: no slot in time is an admission failure, with no episode begun", async () => {
    const server = new Counted({
      name: "env",
      logLevel: "silent",
      checkpoint: on,
      config: {
        cleanup_timeout_seconds: 5,
        max_concurrent_episodes: 1,
        queue_timeout_seconds: 0.05,
      },
    });
    started.push(server);
    const { url } = await server.listen({ port: 0 });
    const first = track(run(url, { episode_id: { rollout_id: "a" } }));
    await expect.poll(() => server.entered, poll).toEqual(["a"]);
    const timedOut = await run(url, { episode_id: { rollout_id: "b" } }).expect(200);
    expect(timedOut.body).toEqual({
      episode_id: { rollout_id: "b", attempt: 0 },
      task_id: TASK.task_id,
      result: null,
      failure: {
        failure_reason: "Episode admission timed out",
        terminal: false,
        stage: "admission",
      },
    });
    expect(server.entered).toEqual(["a"]);
    expect(server.participant?.steps.has("b")).toBe(false);
    server.gates.get("a")?.resolve();
    await first.value;
  });

  it.each([
    ["on", on],
    ["off", null],
  ])(
    "default_episode_timeout_seconds bounds the episode: Episode timed out (checkpointing %s)",
    async (_what, checkpoint) => {
      const server = bounded(
        { cleanup_timeout_seconds: 5, default_episode_timeout_seconds: 0.05 },
        checkpoint,
      );
      const res = await request(server.app())
        .post("/run")
        .send({ task: TASK, episode_id: { rollout_id: "r" } })
        .expect(200);
      expect(res.body.failure).toEqual({ failure_reason: "Episode timed out", terminal: false });
      expect(res.body.result).toBeNull();
      expect(server.cleaned).toEqual(["last-registered", "first-registered"]);
    },
  );

  it("cleanup_timeout_seconds bounds final cleanup: an overrun stops the unwind and /run replies", async () => {
    const server = bounded({ cleanup_timeout_seconds: 0.05 });
    server.stuckCleanup = true;
    server.gate.resolve();
    const res = await request(server.app())
      .post("/run")
      .send({ task: TASK, episode_id: { rollout_id: "r" } })
      .expect(200);
    expect(res.body.result).toBe("done");
    expect(server.cleaned).toEqual([]); // the stuck callback was cut short, the unwind stopped
    expect(server.participant?.steps.has("r")).toBe(false); // the episode still ended
    server.cleanupGate.resolve();
  });
});
