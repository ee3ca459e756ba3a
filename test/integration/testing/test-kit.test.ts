/**
 * The test kit (`gym-participant-sdk/testing`) against the reference counter: a checkpoint
 * restored into a fresh instance, retire and forget, the every-request mode catching a counter
 * whose export loses its state, and bounded calls.
 */
import type { Express } from "express";
import { afterEach, describe, expect, it } from "vitest";
import CounterServer from "../../../reference-servers/counter/src/index.js";
import {
  TestKitError,
  startTestServer,
  type TestServer,
  type TestServerOptions,
} from "#sdk/testing/index.js";
import { deferred } from "#sdk/util/deferred.js";
import type { ExportSessionStatesInput } from "#sdk/server/resources-server.js";

const SEED = { resources_session_id: "s1", task_data: { target: 2 } };
const VERIFY = { responses_create_params: { input: [] }, response: { output: [] } };
const ep1 = { rollout: "ep1" };

/** Exports each counter without its count: the restore of the reference counter refuses it. */
class CountDroppingCounter extends CounterServer {
  protected override async exportSessionStates(input: ExportSessionStatesInput) {
    const states = await super.exportSessionStates(input);
    // Not a counter state: the type says what the hook may export, and this one breaks it.
    const broken = (state: typeof states extends ReadonlyMap<string, infer S> ? S : never) =>
      ({ target: state.target }) as unknown as typeof state;
    return new Map([...states].map(([id, state]) => [id, broken(state)]));
  }
}

/** Exports every count as 0: restores fine, and forgets the episode's progress. */
class ForgetfulCounter extends CounterServer {
  protected override async exportSessionStates(input: ExportSessionStatesInput) {
    const states = await super.exportSessionStates(input);
    return new Map([...states].map(([id, state]) => [id, { ...state, count: 0 }]));
  }
}

/** A counter with a route that parks until the test releases it: a prepare cannot get ready. */
class HangingCounter extends CounterServer {
  readonly entered = deferred<void>();
  readonly gate = deferred<void>();
  protected override configureApp(app: Express): void {
    super.configureApp(app);
    app.post("/hang", async (_req, res) => {
      this.entered.resolve();
      await this.gate.promise;
      res.json({ released: true });
    });
  }
}

const handles: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const handle of handles.splice(0).reverse()) await handle.close();
});

async function start<S extends CounterServer>(
  ServerClass: new (options: ConstructorParameters<typeof CounterServer>[0]) => S,
  options: TestServerOptions = {},
): Promise<TestServer<S>> {
  const handle = await startTestServer(ServerClass, options);
  handles.push(handle);
  return handle;
}

/** A whole episode that needs the count to survive: seed (target 2), +1, +1, verify. */
async function episode(handle: TestServer<CounterServer>): Promise<number> {
  expect((await handle.request("/seed_session", SEED, ep1)).status).toBe(200);
  for (let i = 0; i < 2; i += 1) {
    const incremented = await handle.request("/increment_counter", { count: 1 }, ep1);
    expect(incremented.body).toEqual({ success: true });
  }
  const verified = await handle.request("/verify", VERIFY, ep1);
  expect(verified.status).toBe(200);
  return (verified.body as { reward: number }).reward;
}

describe("checkpoint and restore into a fresh instance", () => {
  it("continues the episode on the restored count, with the records readable", async () => {
    const counter = await start(CounterServer);
    expect((await counter.request("/seed_session", SEED, ep1)).status).toBe(200);
    expect((await counter.request("/increment_counter", { count: 1 }, ep1)).body).toEqual({
      success: true,
    });

    const { records, reply } = await counter.checkpoint();
    expect(reply.episode_ids).toEqual(["ep1"]);
    expect(records).toEqual([
      expect.objectContaining({ session_id: "s1", state: { count: 1, target: 2 } }),
    ]);
    expect((await counter.status()).phase).toBe("idle");

    const restored = await counter.restoreInto();
    handles.push(restored);
    expect(restored.server).not.toBe(counter.server);
    expect(restored.attemptOf("ep1")).toBe(1);
    // The carried cookie names session s1; the request goes out as ep1-a1.
    expect((await restored.request("/increment_counter", { count: 1 }, ep1)).body).toEqual({
      success: true,
    });
    const verified = await restored.request("/verify", VERIFY, ep1);
    expect(verified.body).toMatchObject({ reward: 1 });
  });

  it("refuses a commit with no prepared checkpoint, naming commit", async () => {
    const counter = await start(CounterServer);
    await expect(counter.commit()).rejects.toThrow(/^commit needs a prepared checkpoint/);
  });

  it("drives the real control routes with the environment's own token", async () => {
    const counter = await start(CounterServer);
    const anonymous = await fetch(`${counter.url}/ng-control/v1/checkpoint/status`);
    expect(anonymous.status).toBe(401);
    expect(await counter.status()).toMatchObject({ kind: "resources", instance: "test" });
  });
});

describe("retire and forget", () => {
  it("fences the retired attempt with stale_attempt until forget clears the mark", async () => {
    const counter = await start(CounterServer);
    expect((await counter.request("/seed_session", SEED, ep1)).status).toBe(200);
    await counter.retire(["ep1"]);
    const stale = await counter.request("/increment_counter", { count: 1 }, ep1);
    expect(stale.status).toBe(409);
    expect((stale.body as { error: { code: string } }).error.code).toBe("stale_attempt");
    expect((await counter.status()).retired_rollouts).toBe(1);
    await counter.forget(["ep1"]);
    expect((await counter.status()).retired_rollouts).toBe(0);
  });
});

describe("checkpointEvery: request", () => {
  it("runs the counter's whole episode across a restore at every boundary", async () => {
    const counter = await start(CounterServer, { checkpointEvery: "request" });
    const first = counter.server;
    expect(await episode(counter)).toBe(1);
    expect(counter.server).not.toBe(first);
    // The seed and both increments were each followed by a restore: the verify ran as ep1-a3.
    expect(counter.attemptOf("ep1")).toBe(3);
  });

  it("detects a counter that forgets its count: the episode loses its reward", async () => {
    expect(await episode(await start(ForgetfulCounter))).toBe(1);
    expect(await episode(await start(ForgetfulCounter, { checkpointEvery: "request" }))).toBe(0);
  });

  it("detects a counter whose export drops the count: restore fails, naming restore", async () => {
    expect(await episode(await start(CountDroppingCounter))).toBe(1);
    const broken = await start(CountDroppingCounter, { checkpointEvery: "request" });
    const failed = await broken
      .request("/seed_session", SEED, ep1)
      .catch((error: unknown) => error);
    expect(failed).toBeInstanceOf(TestKitError);
    expect((failed as TestKitError).operation).toBe("restore");
    expect((failed as TestKitError).message).toMatch(
      /^restore was refused \(HTTP 422: .*invalid_checkpoint_state.*episode 'ep1' \(session 's1'\).*state\.count/,
    );
  });
});

describe("bounded calls", () => {
  it("fails a prepare that cannot become ready, naming prepare with its report, then resumes", async () => {
    const counter = await start(HangingCounter);
    expect((await counter.request("/seed_session", SEED, ep1)).status).toBe(200);
    const hanging = counter.request("/hang", {}, ep1);
    await counter.server.entered.promise;

    const failed = await counter.prepare({ timeoutMs: 200 }).catch((error: unknown) => error);
    expect(failed).toBeInstanceOf(TestKitError);
    expect((failed as TestKitError).operation).toBe("prepare");
    expect((failed as TestKitError).message).toMatch(/^prepare did not become ready/);
    expect((failed as TestKitError).reply).toMatchObject({
      phase: "preparing",
      report: { ready: false },
    });
    expect((await counter.status()).phase).toBe("idle");

    counter.server.gate.resolve();
    expect((await hanging).body).toEqual({ released: true });
    await counter.prepare();
    await counter.resume();
  });
});
