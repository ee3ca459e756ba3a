/**
 * The Simple Agent's legacy `/run`: seed → loop → verify → return against the
 * reference counter and weather servers and a scriptable fake resources server, checkpointed
 * through the real control routes. A proxy in front of the agent's own URL holds the
 * self-dispatched turn loop's reply, so a checkpoint can open after the loop replied but before
 * `/run` records its next boundary.
 */
import { sessionParticipantOf } from "../../support/agent-participants.js";
import request from "supertest";
import { afterEach, describe, expect, it, vi } from "vitest";
import { weatherOf } from "../../../reference-servers/weather/src/index.js";
import { functionCall, message } from "../../support/fake-model-server.js";
import {
  POLL,
  RecordingCounter,
  RecordingWeather,
  Stack,
  agentRecords,
  checkpoint,
  cleanup,
  commit,
  control,
  ep,
  fakeResources,
  holdingProxy,
  prepare,
  restoreAndResume,
  track,
} from "../../support/simple-agent-harness.js";

afterEach(cleanup);

const RESOURCES = { resources_server: "resources" };

function runBody(extra: Record<string, unknown> = {}) {
  return { responses_create_params: { input: "count to one" }, ...extra };
}

interface RunResult {
  reward: number;
  response: Record<string, unknown>;
  ng_trajectory?: {
    task_id: string;
    rollout_id: string;
    turns: Record<string, unknown>[];
    gaps: { kind: string }[];
  };
  [field: string]: unknown;
}

describe("legacy /run end to end", () => {
  it("checkpointing off: seed, loop with a tool call, verify; the trajectory rides along", async () => {
    const stack = new Stack({ checkpoint: false });
    const model = await stack.model();
    const counter = await stack.resources(RecordingCounter);
    const { url, agent } = await stack.agent(RESOURCES);
    expect(sessionParticipantOf(agent)).toBeNull();
    model.script("3-0", [functionCall("increment_counter", { count: 1 }), message("one")]);

    const res = await request(url)
      .post("/run")
      .send(runBody({ _ng_task_index: 3, _ng_rollout_index: 0, target: 1 }));
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const result = res.body as RunResult;
    expect(result.reward).toBe(1);
    expect(counter.server.requests.map((r) => r.path)).toEqual([
      "/ng-rollout/3-0/seed_session",
      "/ng-rollout/3-0/increment_counter",
      "/ng-rollout/3-0/verify",
    ]);
    // /verify saw the reply without its trajectory; the result carries it instead.
    expect(result.response).not.toHaveProperty("_ng_trajectory");
    expect(result.ng_trajectory).toMatchObject({ task_id: "3", rollout_id: "3-0" });
    expect(result.ng_trajectory?.turns).toHaveLength(2);
    expect(result.ng_trajectory?.gaps.map((g) => g.kind)).toContain("resolution_unavailable");
  });

  it("checkpointing off, no rollout fields: unprefixed calls and no trajectory", async () => {
    const stack = new Stack({ checkpoint: false });
    const model = await stack.model();
    const counter = await stack.resources(RecordingCounter);
    const { url } = await stack.agent(RESOURCES);
    model.script(null, [functionCall("increment_counter", { count: 1 }), message("one")]);
    const res = await request(url)
      .post("/run")
      .send(runBody({ target: 1 }))
      .expect(200);
    expect(res.body.reward).toBe(1);
    expect(res.body).not.toHaveProperty("ng_trajectory");
    expect(counter.server.requests.map((r) => r.path)).toEqual([
      "/seed_session",
      "/increment_counter",
      "/verify",
    ]);
  });

  it("checkpointing on: every call carries the run's prefix; the run's session is gone after", async () => {
    const stack = new Stack({ checkpoint: true });
    const model = await stack.model();
    const counter = await stack.resources(RecordingCounter);
    const { url, agent } = await stack.agent(RESOURCES);
    model.script("3-0", [functionCall("increment_counter", { count: 1 }), message("one")]);

    const res = await request(url)
      .post("/run")
      .send(runBody({ _ng_task_index: 3, _ng_rollout_index: 0, target: 1 }));
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const result = res.body as RunResult;
    expect(result.reward).toBe(1);
    expect(model.callsFor("3-0")).toHaveLength(2);
    expect(counter.server.requests.map((r) => r.path)).toEqual([
      "/ng-rollout/3-0/seed_session",
      "/ng-rollout/3-0/increment_counter",
      "/ng-rollout/3-0/verify",
    ]);
    expect(sessionParticipantOf(agent)?.size).toBe(0);
    expect(result.ng_trajectory).toMatchObject({ task_id: "3", rollout_id: "3-0" });
  });

  it("refuses without a resources server, and with execute_tools off", async () => {
    const stack = new Stack({ checkpoint: false });
    await stack.model();
    const bare = await stack.agent();
    await request(bare.url).post("/run").send(runBody()).expect(500);
    await fakeResources(stack);
    const noTools = await stack.agent({ ...RESOURCES, execute_tools: false });
    await request(noTools.url).post("/run").send(runBody()).expect(500);
  });
});

describe("legacy /run across a checkpoint", () => {
  /** An agent whose self-dispatch goes through a proxy that can hold the loop's reply. */
  async function proxied(stack: Stack, config: Record<string, unknown> = {}) {
    let proxy: Awaited<ReturnType<typeof holdingProxy>> | null = null;
    const started = await stack.agent(
      { ...RESOURCES, ...config },
      {
        selfUrl: async (url) => {
          proxy = await holdingProxy(url);
          return proxy.url;
        },
      },
    );
    return { ...started, proxy: proxy as unknown as Awaited<ReturnType<typeof holdingProxy>> };
  }

  it("a restore after the loop replied returns that reply without running the loop again", async () => {
    const stack = new Stack({ checkpoint: true });
    const model = await stack.model();
    const resources = await fakeResources(stack);
    const first = await proxied(stack);
    model.script("k", [message("answer")]);
    const held = first.proxy.hold(/\/v1\/responses$/);
    track(
      request(first.url)
        .post("/run")
        .send(runBody({ _ng_rollout_id: "k" })),
    );
    await held.arrived;
    const dir = await checkpoint([first.url], "c1", [ep("k")]);
    const [record] = await agentRecords(dir);
    expect(record?.session_key).toBe("run:k");
    expect(record?.episode).toMatchObject({ next: "loop" });
    expect(record?.session.completed_activation).toBe(1);
    expect(record?.session.completed_reply).toMatchObject({ response: { object: "response" } });

    const second = await stack.agent(RESOURCES);
    await restoreAndResume(second.url, "c2", dir, [ep("k")]);
    const res = await request(second.url)
      .post("/run")
      .send(runBody({ _ng_rollout_id: "k", _ng_attempt_index: 1 }));
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(model.callsFor("k-a1")).toHaveLength(0);
    expect(resources.callsOf("/seed_session", "k-a1")).toHaveLength(0);
    expect(resources.callsOf("/verify", "k-a1")).toHaveLength(1);
    expect((res.body as RunResult).response.output).toEqual([
      expect.objectContaining({ type: "message" }),
    ]);
    held.release();
  });

  it("a run restored at verify verifies again, runs nothing before it, and still reports its trajectory", async () => {
    const stack = new Stack({ checkpoint: true });
    const model = await stack.model();
    const resources = await fakeResources(stack);
    const first = await proxied(stack);
    model.script("k", [message("answer")]);
    const held = first.proxy.hold(/\/v1\/responses$/);
    track(
      request(first.url)
        .post("/run")
        .send(runBody({ _ng_rollout_id: "k", task_id: "t9" })),
    );
    await held.arrived;
    await prepare([first.url], "c1");
    held.release();
    const steps = sessionParticipantOf(first.agent)?.steps;
    await vi.waitFor(() => expect(steps?.stateOf("k")).toBe("parked"), POLL);
    const dir = await commit([first.url], "c1", [ep("k")]);
    const [record] = await agentRecords(dir);
    expect(record?.episode).toMatchObject({ next: "verify", verify_mode: "wait" });
    // The verify boundary holds the reply; the kept copy went in the same step.
    expect(record?.session.completed_reply).toBeNull();
    expect(resources.callsOf("/verify")).toHaveLength(0);

    const second = await stack.agent(RESOURCES);
    await restoreAndResume(second.url, "c2", dir, [ep("k")]);
    const res = await request(second.url)
      .post("/run")
      .send(runBody({ _ng_rollout_id: "k", _ng_attempt_index: 1, task_id: "t9" }));
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(model.callsFor("k-a1")).toHaveLength(0);
    expect(resources.callsOf("/seed_session", "k-a1")).toHaveLength(0);
    const verified = resources.callsOf("/verify", "k-a1");
    expect(verified).toHaveLength(1);
    expect(verified[0]?.body.response).not.toHaveProperty("_ng_trajectory");
    const result = res.body as RunResult;
    expect(result.reward).toBe(1);
    expect(result.ng_trajectory).toMatchObject({ task_id: "t9", rollout_id: "k-a1" });
    expect(result.ng_trajectory?.turns).toHaveLength(1);
  });

  it("a run restored at return returns its recorded verdict without calling /verify, with its trajectory", async () => {
    const stack = new Stack({ checkpoint: true });
    const model = await stack.model();
    const resources = await fakeResources(stack);
    resources.reward = 0.75;
    const first = await stack.agent(RESOURCES);
    model.script("k", [message("answer")]);
    const gate = resources.gate("/verify");
    track(
      request(first.url)
        .post("/run")
        .send(runBody({ _ng_rollout_id: "k" })),
    );
    await gate.arrived;
    // A wait-mode verify: prepare waits for it, and the run parks at its return boundary.
    const prepared = track(control(first.url, "prepare", { checkpoint_id: "c1" }));
    await vi.waitFor(() => expect(sessionParticipantOf(first.agent)?.accepting).toBe(false), POLL);
    gate.release();
    expect((await prepared.value).body.phase).toBe("prepared");
    const dir = await commit([first.url], "c1", [ep("k")]);
    const [record] = await agentRecords(dir);
    expect(record?.episode).toMatchObject({ next: "return", result: { reward: 0.75 } });

    resources.reward = 0;
    const second = await stack.agent(RESOURCES);
    await restoreAndResume(second.url, "c2", dir, [ep("k")]);
    const res = await request(second.url)
      .post("/run")
      .send(runBody({ _ng_rollout_id: "k", _ng_attempt_index: 1 }));
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const result = res.body as RunResult;
    expect(result.reward).toBe(0.75);
    expect(resources.callsOf("/verify")).toHaveLength(1); // the original one only
    expect(model.callsFor("k-a1")).toHaveLength(0);
    expect(result.ng_trajectory).toMatchObject({ rollout_id: "k-a1" });
  });

  it("skip_verification records its return boundary: a checkpoint parks the run there until resume", async () => {
    const stack = new Stack({ checkpoint: true });
    const model = await stack.model();
    const resources = await fakeResources(stack);
    const first = await proxied(stack, {
      skip_verification: true,
      skip_verification_reward: 0.25,
    });
    model.script("k", [message("answer")]);
    const held = first.proxy.hold(/\/v1\/responses$/);
    const run = track(
      request(first.url)
        .post("/run")
        .send(runBody({ _ng_rollout_id: "k" })),
    );
    await held.arrived;
    await prepare([first.url], "c1");
    held.release();
    const steps = sessionParticipantOf(first.agent)?.steps;
    await vi.waitFor(() => expect(steps?.stateOf("k")).toBe("parked"), POLL);
    expect(run.done()).toBe(false);
    const dir = await commit([first.url], "c1", [ep("k")]);
    const [record] = await agentRecords(dir);
    expect(record?.episode).toMatchObject({
      next: "return",
      result: { reward: 0.25, verification_skipped: true },
    });
    expect(record?.session.completed_reply).toBeNull();
    expect(run.done()).toBe(false);

    await control(first.url, "resume", { checkpoint_id: "c1" }).expect(200);
    const res = await run.value;
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body).toMatchObject({ reward: 0.25, verification_skipped: true });
    expect(resources.callsOf("/verify")).toHaveLength(0);
  });

  it("a seed reply marking a restart makes the run a restart: reported, never parked", async () => {
    const stack = new Stack({ checkpoint: true });
    const model = await stack.model();
    const resources = await fakeResources(stack);
    resources.restart = true;
    const first = await proxied(stack);
    model.script("k", [message("answer")]);
    const held = first.proxy.hold(/\/v1\/responses$/);
    const run = track(
      request(first.url)
        .post("/run")
        .send(runBody({ _ng_rollout_id: "k" })),
    );
    await held.arrived;
    const prepared = await control(first.url, "prepare", { checkpoint_id: "c1" }).expect(200);
    expect(prepared.body.report.restarts).toEqual(["k"]);
    held.release();
    // A restart does not park: the run finishes inside the checkpoint.
    const res = await run.value;
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.reward).toBe(1);
  });
});

describe("resources close after a replayable verify", () => {
  it("the run sends close-follows on /verify, then closes the weather session", async () => {
    const stack = new Stack({ checkpoint: true });
    const model = await stack.model();
    const weather = await stack.resources(RecordingWeather);
    const { url } = await stack.agent(RESOURCES);
    model.script("w", [message("sunny")]);
    const res = await request(url)
      .post("/run")
      .send(
        runBody({
          _ng_rollout_id: "w",
          city: "Paris",
          temperature_c: weatherOf("Paris").temperature_c,
        }),
      );
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.reward).toBe(1);
    const calls = weather.server.requests;
    expect(calls.map((r) => r.path)).toEqual([
      "/ng-rollout/w/seed_session",
      "/ng-rollout/w/verify",
      "/ng-rollout/w/close_session",
    ]);
    expect(calls[1]?.headers["x-ng-checkpoint-close-follows"]).toBe("1");
    expect(weather.server.participant?.readiness().counts.sessions).toBe(0);
  });

  it("a failed close keeps the verdict", async () => {
    const stack = new Stack({ checkpoint: true });
    const model = await stack.model();
    const resources = await fakeResources(stack);
    resources.verifyMode = "replay";
    resources.closeStatus = 500;
    resources.reward = 0.5;
    const { url } = await stack.agent(RESOURCES);
    model.script("w", [message("sunny")]);
    const res = await request(url)
      .post("/run")
      .send(runBody({ _ng_rollout_id: "w" }));
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.reward).toBe(0.5);
    expect(resources.callsOf("/close_session", "w")).toHaveLength(1);
  });

  it("a wait-mode verify sends no close-follows and no close", async () => {
    const stack = new Stack({ checkpoint: true });
    const model = await stack.model();
    const resources = await fakeResources(stack);
    const { url } = await stack.agent(RESOURCES);
    model.script("w", [message("sunny")]);
    await request(url)
      .post("/run")
      .send(runBody({ _ng_rollout_id: "w" }))
      .expect(200);
    expect(
      resources.callsOf("/verify")[0]?.headers["x-ng-checkpoint-close-follows"],
    ).toBeUndefined();
    expect(resources.callsOf("/close_session")).toHaveLength(0);
  });
});
