/**
 * The restart-only agent's tracking middleware over HTTP: a small `Server` whose `configureApp`
 * installs it (after the base server strips the rollout prefix) in front of `/run` and
 * `/v1/responses` routes whose handlers wait until the test releases them or a retire aborts
 * their signal.
 */
import type { Express } from "express";
import express from "express";
import request from "supertest";
import { describe, expect, it, vi } from "vitest";
import { GymError } from "#sdk/errors.js";
import { episodeId } from "#sdk/identity/episode-id.js";
import { RestartOnlyAgentParticipant } from "#sdk/participants/agent/restart-only-participant.js";
import { installRestartTracking } from "#sdk/server/agent/restart-tracking.js";
import { dataRoute, type DataRoute } from "#sdk/server/data-route.js";
import { Server } from "#sdk/server/server.js";
import { deferred, type Deferred } from "#sdk/util/deferred.js";
import { flush } from "../../support/test-participant.js";

/** One handler invocation, held until the test releases it. */
interface Run {
  readonly path: string;
  readonly body: unknown;
  readonly signal: AbortSignal;
  /** Resolve to let the handler reply 200. */
  readonly release: Deferred<void>;
  /** Resolve to let an aborted handler throw its signal's reason. */
  readonly afterAbort: Deferred<void>;
  /** Set once the handler has settled. */
  settled: boolean;
}

class TrackedAgent extends Server {
  readonly restartOnly = new RestartOnlyAgentParticipant({ freeSession: () => Promise.resolve() });
  readonly installs: boolean[] = [];
  readonly runs: Run[] = [];
  #entered = deferred<Run>();

  /** The next handler invocation (take it before sending the request). */
  nextRun(): Promise<Run> {
    return this.#entered.promise;
  }

  protected override configureApp(app: Express): void {
    // Installed twice on purpose: the second call must be a no-op.
    this.installs.push(installRestartTracking(app, this.restartOnly));
    this.installs.push(installRestartTracking(app, this.restartOnly));
  }

  protected override routes(): readonly DataRoute[] {
    const held = (path: string): DataRoute =>
      dataRoute({
        method: "post",
        path,
        summary: `Held ${path}`,
        rolloutPrefixed: true,
        handler: async ({ req, signal }) => {
          const run: Run = {
            path,
            body: req.body as unknown,
            signal,
            release: deferred<void>(),
            afterAbort: deferred<void>(),
            settled: false,
          };
          this.runs.push(run);
          const entered = this.#entered;
          this.#entered = deferred<Run>();
          entered.resolve(run);
          try {
            await new Promise<void>((resolve, reject) => {
              void run.release.promise.then(resolve);
              signal.addEventListener(
                "abort",
                () => void run.afterAbort.promise.then(() => reject(signal.reason)),
                { once: true },
              );
            });
            return { path };
          } finally {
            run.settled = true;
          }
        },
      });
    return [
      held("/run"),
      held("/v1/responses"),
      held("/agent/v1/responses"),
      dataRoute({ method: "get", path: "/v1/responses", summary: "Read", handler: () => ({}) }),
      dataRoute({ method: "post", path: "/other", summary: "Other", handler: () => ({}) }),
    ];
  }
}

function make() {
  const server = new TrackedAgent({ name: "agent", logLevel: "silent" });
  const app = server.app();
  const track = vi.spyOn(server.restartOnly, "track");
  return { server, app, p: server.restartOnly, track };
}

/** The handler invocation, or a failure as soon as the request is answered without one. */
async function runOf(entered: Promise<Run>, reply: PromiseLike<{ status: number }>): Promise<Run> {
  const answered = Promise.resolve(reply).then((r): never => {
    throw new Error(`answered ${r.status} without running the handler`);
  });
  return await Promise.race([entered, answered]);
}

/** Polls (by event-loop rounds, bounded) until `check` holds. */
async function until(check: () => boolean, what: string): Promise<void> {
  for (let round = 0; round < 1000; round++) {
    if (check()) return;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe("restart tracking middleware", () => {
  it("tracks an unprefixed /run under the key its body names, and hands the body on", async () => {
    const { server, app, p } = make();
    const entered = server.nextRun();
    const body = { _ng_task_index: 3, _ng_rollout_index: 1, _ng_attempt_index: 2, x: "y" };
    const reply = request(app)
      .post("/run")
      .send(body)
      .then((r) => r);
    const run = await runOf(entered, reply);
    expect(run.body).toEqual(body);
    expect(p.readiness().restarts).toEqual(["3-1-a2"]);
    expect(p.readiness().counts).toEqual({ inflight: 1 });
    run.release.resolve();
    expect((await reply).status).toBe(200);
    await until(() => p.readiness().restarts.length === 0, "the run to be untracked");

    const explicit = server.nextRun();
    const second = request(app)
      .post("/run")
      .send({ _ng_rollout_id: "job-a1" })
      .then((r) => r);
    const run2 = await runOf(explicit, second);
    expect(p.readiness().restarts).toEqual(["job-a1"]);
    run2.release.resolve();
    expect((await second).status).toBe(200);
  });

  it("refuses work without a rollout with 400 rollout_id_required, without running it", async () => {
    const { server, app, track } = make();
    const refusals = [
      request(app).post("/run").send({ responses_create_params: {} }),
      request(app).post("/run").send({ _ng_task_index: 1 }),
      request(app).post("/run").send({ _ng_rollout_id: "not valid!" }),
      request(app).post("/run").send({ _ng_rollout_id: "r-a1", _ng_attempt_index: 2 }),
      request(app).post("/run").set("content-type", "application/json").send("{not json"),
      request(app).post("/run"),
      request(app).post("/v1/responses").send({}),
    ];
    for (const refusal of refusals) {
      const reply = await refusal;
      expect(reply.status).toBe(400);
      expect(reply.body.error.code).toBe("rollout_id_required");
    }
    expect(server.runs).toEqual([]);
    expect(track).not.toHaveBeenCalled();
  });

  it("refuses a retired attempt with 409 stale_attempt, without running it", async () => {
    const { server, app, p } = make();
    p.markRetired([episodeId("r", 1)]);
    const refusals = [
      request(app).post("/ng-rollout/r-a1/v1/responses").send({}),
      request(app).post("/ng-rollout/r/v1/responses").send({}),
      request(app).post("/run").send({ _ng_rollout_id: "r" }),
      request(app).post("/ng-rollout/r-a1/run").send({}),
    ];
    for (const refusal of refusals) {
      const reply = await refusal;
      expect(reply.status).toBe(409);
      expect(reply.body.error.code).toBe("stale_attempt");
    }
    expect(server.runs).toEqual([]);
    expect(p.readiness().restarts).toEqual([]);
  });

  it("passes other methods and paths through untracked", async () => {
    const { app, p, track } = make();
    expect((await request(app).get("/v1/responses")).status).toBe(200);
    expect((await request(app).post("/other").send({})).status).toBe(200);
    expect((await request(app).post("/ng-rollout/r/other").send({})).status).toBe(200);
    expect(track).not.toHaveBeenCalled();
    expect(p.readiness().restarts).toEqual([]);
  });

  it("reports prefixed /v1/responses calls as restarts while in flight, and not after", async () => {
    const { server, app, p } = make();
    const start = async (path: string) => {
      const entered = server.nextRun();
      const reply = request(app)
        .post(path)
        .send({})
        .then((r) => r);
      return { run: await runOf(entered, reply), reply };
    };
    const a = await start("/ng-rollout/task-b-a1/v1/responses");
    const b = await start("/ng-rollout/task-a/training-token-capture/v1/responses");
    // Any path ending in /v1/responses, e.g. an agent mounted under its own segment.
    const c = await start("/ng-rollout/task-c/agent/v1/responses");
    const d = await start("/ng-rollout/task-a/v1/responses"); // a second call of one rollout
    expect(p.readiness().restarts).toEqual(["task-a", "task-b-a1", "task-c"]);
    expect(p.readiness().counts).toEqual({ inflight: 3 });
    for (const call of [a, b, c]) call.run.release.resolve();
    for (const call of [a, b, c]) expect((await call.reply).status).toBe(200);
    await until(() => p.readiness().restarts.length === 1, "three calls to be untracked");
    expect(p.readiness().restarts).toEqual(["task-a"]);
    d.run.release.resolve();
    expect((await d.reply).status).toBe(200);
    await until(() => p.readiness().restarts.length === 0, "the last call to be untracked");
  });

  it("installs once per app", async () => {
    const { server, app, track } = make();
    expect(server.installs).toEqual([true, false]);
    const entered = server.nextRun();
    const reply = request(app)
      .post("/ng-rollout/r/v1/responses")
      .send({})
      .then((r) => r);
    (await runOf(entered, reply)).release.resolve();
    expect((await reply).status).toBe(200);
    expect(track).toHaveBeenCalledTimes(1);
    // Another app is another installation.
    expect(installRestartTracking(express(), server.restartOnly)).toBe(true);
  });

  it("a retire aborts the in-flight handler and resolves only after it settled", async () => {
    const { server, app, p } = make();
    const entered = server.nextRun();
    const reply = request(app)
      .post("/ng-rollout/r/v1/responses")
      .send({})
      .then((r) => r);
    const run = await runOf(entered, reply);
    const other = server.nextRun();
    const untouched = request(app)
      .post("/ng-rollout/q/v1/responses")
      .send({})
      .then((r) => r);
    const otherRun = await runOf(other, untouched);
    const retire = episodeId("r", 0);
    p.markRetired([retire]);
    let retired = false;
    const retiring = p.retire(retire, new AbortController().signal).then(() => {
      retired = true;
    });
    await until(() => run.signal.aborted, "the handler's signal to abort");
    expect((run.signal.reason as GymError).code).toBe("stale_attempt");
    expect(otherRun.signal.aborted).toBe(false);
    await flush();
    expect(retired).toBe(false); // the handler has not settled yet
    run.afterAbort.resolve();
    await retiring;
    expect(run.settled).toBe(true); // before the retire returned
    const refused = await reply;
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe("stale_attempt");
    expect(p.readiness().restarts).toEqual(["q"]);
    otherRun.release.resolve();
    expect((await untouched).status).toBe(200);
  });

  it("keeps a call whose client left tracked until its handler settles", async () => {
    const { server, app, p } = make();
    const entered = server.nextRun();
    const call = request(app).post("/ng-rollout/r/v1/responses").send({});
    const reply = call.then(
      (r) => r,
      (error: unknown) => ({ status: 0, error }),
    );
    const run = await runOf(entered, reply);
    call.abort();
    await until(() => run.signal.aborted, "the server to see the client leave");
    await flush();
    expect(p.readiness().restarts).toEqual(["r"]); // the handler still runs
    run.afterAbort.resolve();
    await until(() => p.readiness().restarts.length === 0, "the call to be untracked");
    expect(run.settled).toBe(true);
  });
});
