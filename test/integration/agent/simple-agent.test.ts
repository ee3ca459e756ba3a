/**
 * The Simple Agent's sessions over HTTP: direct-grant tool calls against the
 * reference counter, invocation ids across restores, boundary contents, continuing a restored
 * loop, stored replies and the resources jar. Checkpoints go through the real control routes;
 * restores go into fresh server instances.
 */
import { sessionParticipantOf } from "../../support/agent-participants.js";
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import { functionCall, message } from "../../support/fake-model-server.js";
import {
  RecordingCounter,
  Stack,
  activate,
  agentRecords,
  checkpoint,
  cleanup,
  closeSession,
  commit,
  ep,
  fakeResources,
  jarHeader,
  prepare,
  restoreAndResume,
  seed,
  seedCounter,
  track,
  writeAgentRecords,
} from "../../support/simple-agent-harness.js";

afterEach(cleanup);

const USER = (text: string) => ({ role: "user", content: text, type: "message" });

function grant(name: string, baseUrl: string, cookies: Record<string, string> | null = null) {
  return { kind: "direct_http", name, base_url: baseUrl, cookies };
}

function trajectoryOf(body: Record<string, unknown>) {
  return body._ng_trajectory as {
    invocations: { invocation_id: string; status: string; conversation: unknown[] }[];
    turns: Record<string, unknown>[];
    tool_calls: Record<string, unknown>[];
    gaps: unknown[];
  };
}

describe("direct HTTP grants", () => {
  it("a tool call goes through the grant to the counter under the activation's prefix, and /verify rewards it", async () => {
    const stack = new Stack({ checkpoint: true });
    const model = await stack.model();
    const counter = await stack.resources(RecordingCounter);
    const { url } = await stack.agent();
    const jar = await seedCounter(counter.url, "r1", "c1", { target: 1 });
    const cookie = await seed(url, "s1", ep("r1"), {
      tool_accesses: [grant("counter", `${counter.url}/ng-rollout/r1`, jar)],
    });
    const call = functionCall("increment_counter", { count: 1 }, "call_1");
    model.script("r1", [call, message("counted")]);

    const res = await activate(url, cookie, "r1", { input: "count to one" }, 1);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(counter.server.requests.map((r) => r.path)).toContain(
      "/ng-rollout/r1/increment_counter",
    );
    // The tool's reply went back to the model as the call's output.
    expect(model.callsFor("r1")[1]?.body.input).toEqual([
      USER("count to one"),
      call.output[0],
      { type: "function_call_output", call_id: "call_1", output: '{"success":true}' },
    ]);
    // An indexed reply leaves the trajectory to the observation bundle.
    expect(res.body._ng_trajectory).toBeUndefined();
    expect((res.body.output as unknown[]).length).toBe(3);

    const verified = await request(counter.url)
      .post("/ng-rollout/r1/verify")
      .set("Cookie", jarHeader(jar))
      .send({})
      .expect(200);
    expect(verified.body.reward).toBe(1);

    const closed = await closeSession(url, "s1", ep("r1")).expect(200);
    expect(closed.body.resources_cookies).toEqual(jar);
    expect(closed.body.agent_observations).toMatchObject({
      source: "simple_agent",
      records: [{ invocation_id: "root", status: "completed" }],
    });
  });

  it("after a restore, the continued session's tool call reaches the restored counter under the replacement's prefix", async () => {
    const stack = new Stack({ checkpoint: true });
    const model = await stack.model();
    const counter = await stack.resources(RecordingCounter);
    const first = await stack.agent();
    const jar = await seedCounter(counter.url, "r", "c", { target: 2 });
    const cookie = await seed(first.url, "s", ep("r"), {
      // With checkpointing on, a grant names the seeding attempt.
      tool_accesses: [grant("counter", `${counter.url}/ng-rollout/r`, jar)],
    });
    model.script("r", [functionCall("increment_counter", { count: 1 })]);
    const held = model.hold((call) => call.captureKey === "r" && model.callsFor("r").length >= 2);
    track(activate(first.url, cookie, "r", { input: "count to two" }, 1));
    await held.arrived();
    const dir = await checkpoint([first.url, counter.url], "c1", [ep("r")]);

    // A crash: both come back from the checkpoint, the counter where it was.
    const port = Number(new URL(counter.url).port);
    await counter.server.close();
    const counter2 = await stack.resources(RecordingCounter, { port });
    await restoreAndResume(counter2.url, "c2", dir, [ep("r")]);
    const second = await stack.agent();
    await restoreAndResume(second.url, "c2", dir, [ep("r")]);

    model.script("r-a1", [functionCall("increment_counter", { count: 1 }), message("two")]);
    const res = await activate(second.url, cookie, "r-a1", { input: "count to two" }, 1);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(counter2.server.requests.map((r) => r.path)).toContain(
      "/ng-rollout/r-a1/increment_counter",
    );
    const verified = await request(counter2.url)
      .post("/ng-rollout/r-a1/verify")
      .set("Cookie", jarHeader(jar))
      .send({})
      .expect(200);
    expect(verified.body.reward).toBe(1); // the restored count 1, plus this call
    held.release();
  });
});

describe("invocation ids", () => {
  it("the first activation is root and the next activation-2, in replies and in the observations", async () => {
    const stack = new Stack({ checkpoint: true });
    await stack.model();
    const { url } = await stack.agent();
    const cookie = await seed(url, "s", ep("r"));
    const one = await activate(url, cookie, "r", { input: "a" }).expect(200);
    const two = await activate(url, cookie, "r", { input: "b" }).expect(200);
    expect(trajectoryOf(one.body).invocations[0]?.invocation_id).toBe("root");
    expect(trajectoryOf(two.body).invocations[0]?.invocation_id).toBe("activation-2");
    const closed = await closeSession(url, "s", ep("r")).expect(200);
    const records = (closed.body.agent_observations as { records: { invocation_id: string }[] })
      .records;
    expect(records.map((r) => r.invocation_id)).toEqual(["root", "activation-2"]);
  });

  it("a restored session's next activation takes the next id; its observations carry over", async () => {
    const stack = new Stack({ checkpoint: true });
    await stack.model();
    const first = await stack.agent();
    const cookie = await seed(first.url, "s", ep("r"));
    await activate(first.url, cookie, "r", { input: "a" }, 1).expect(200);
    const dir = await checkpoint([first.url], "c1", [ep("r")]);

    const second = await stack.agent();
    await restoreAndResume(second.url, "c2", dir, [ep("r")]);
    const next = await activate(second.url, cookie, "r-a1", { input: "b" }).expect(200);
    expect(trajectoryOf(next.body).invocations[0]?.invocation_id).toBe("activation-2");
    const closed = await closeSession(second.url, "s", ep("r", 1)).expect(200);
    const records = (closed.body.agent_observations as { records: { invocation_id: string }[] })
      .records;
    expect(records.map((r) => r.invocation_id)).toEqual(["root", "activation-2"]);
  });

  it("an activation continued from its restored boundary keeps its id; the one after takes the next", async () => {
    const stack = new Stack({ checkpoint: true });
    const model = await stack.model();
    const first = await stack.agent();
    const cookie = await seed(first.url, "s", ep("r"));
    await activate(first.url, cookie, "r", { input: "a" }).expect(200);
    const held = model.hold((call) => call.captureKey === "r");
    track(activate(first.url, cookie, "r", { input: "b" }));
    await held.arrived();
    const dir = await checkpoint([first.url], "c1", [ep("r")]);
    const [record] = await agentRecords(dir);
    expect(record?.session.activations).toBe(2);
    expect(record?.boundary).toMatchObject({ step: 0, pending_tools: false });

    const second = await stack.agent();
    await restoreAndResume(second.url, "c2", dir, [ep("r")]);
    const continued = await activate(second.url, cookie, "r-a1", { input: "b" }).expect(200);
    expect(trajectoryOf(continued.body).invocations[0]?.invocation_id).toBe("activation-2");
    const after = await activate(second.url, cookie, "r-a1", { input: "c" }).expect(200);
    expect(trajectoryOf(after.body).invocations[0]?.invocation_id).toBe("activation-3");
    held.release();
  });
});

describe("boundaries", () => {
  it("a boundary leaves out the turn questions, and the resumed loop rebuilds them from the outputs", async () => {
    const stack = new Stack({ checkpoint: true });
    const model = await stack.model();
    const tools = await fakeResources(stack);
    const first = await stack.agent();
    const cookie = await seed(first.url, "s", ep("r"), {
      tool_accesses: [grant("tools", `${tools.url}/ng-rollout/r`)],
    });
    const call1 = functionCall("lookup", { q: 1 }, "call_1");
    const call2 = functionCall("lookup", { q: 2 }, "call_2");
    model.script("r", [call1, call2]);
    const held = model.hold((call) => call.captureKey === "r" && model.callsFor("r").length >= 3);
    track(activate(first.url, cookie, "r", { input: "look twice" }));
    await held.arrived();
    const dir = await checkpoint([first.url], "c1", [ep("r")]);

    const [record] = await agentRecords(dir);
    const boundary = record?.boundary as Record<string, unknown>;
    expect(boundary).toMatchObject({ step: 2, pending_tools: false, question_outputs: [0, 2] });
    expect((boundary.new_outputs as unknown[]).length).toBe(4);
    const turns = boundary.turns as Record<string, unknown>[];
    expect(turns.map((t) => t.turn)).toEqual([1, 2]);
    for (const turn of turns) expect(turn).not.toHaveProperty("question");

    const second = await stack.agent();
    await restoreAndResume(second.url, "c2", dir, [ep("r")]);
    model.script("r-a1", [message("found")]);
    const res = await activate(second.url, cookie, "r-a1", { input: "look twice" }).expect(200);
    const output1 = {
      type: "function_call_output",
      call_id: "call_1",
      output: JSON.stringify({ ok: true, route: "/lookup" }),
    };
    const output2 = { ...output1, call_id: "call_2" };
    const asked = [USER("look twice"), call1.output[0], output1, call2.output[0], output2];
    expect(model.callsFor("r-a1").map((c) => c.body.input)).toEqual([asked]);
    const questions = trajectoryOf(res.body).turns.map((t) => t.question);
    expect(questions).toEqual([[USER("look twice")], asked.slice(0, 3), asked]);
    held.release();
  });

  it("a restored boundary with pending tools runs them without a new model call first", async () => {
    const stack = new Stack({ checkpoint: true });
    const model = await stack.model();
    const tools = await fakeResources(stack);
    const first = await stack.agent();
    const cookie = await seed(first.url, "s", ep("p"), {
      tool_accesses: [grant("tools", `${tools.url}/ng-rollout/p`)],
    });
    const call = functionCall("lookup", { q: 1 }, "call_1");
    model.script("p", [call]);
    const held = model.hold((c) => c.captureKey === "p" && model.callsFor("p").length >= 2);
    track(activate(first.url, cookie, "p", { input: "look" }, 1));
    await held.arrived();
    const dir = await checkpoint([first.url], "c1", [ep("p")]);

    // The same activation one boundary earlier (B1: the reply's tool is pending). A live loop
    // parks there only if a checkpoint closes in the instant between reply and boundary.
    const [record] = await agentRecords(dir);
    const b2 = record?.boundary as Record<string, unknown[]>;
    const b1 = {
      ...b2,
      pending_tools: true,
      new_outputs: b2.new_outputs?.slice(0, 1),
      tool_records: [],
    };
    const crafted = await writeAgentRecords([{ ...record!, boundary: b1 }], "c1");

    const second = await stack.agent();
    await restoreAndResume(second.url, "c2", crafted, [ep("p")]);
    model.script("p-a1", [message("found")]);
    await activate(second.url, cookie, "p-a1", { input: "look" }, 1).expect(200);
    expect(tools.callsOf("/lookup", "p-a1")).toHaveLength(1);
    expect(model.callsFor("p-a1").map((c) => c.body.input)).toEqual([
      [
        USER("look"),
        call.output[0],
        {
          type: "function_call_output",
          call_id: "call_1",
          output: JSON.stringify({ ok: true, route: "/lookup" }),
        },
      ],
    ]);
    held.release();
  });
});

describe("stored replies and the resources jar", () => {
  it("an activation that already completed is answered with its stored reply after a restore, with no model call", async () => {
    const stack = new Stack({ checkpoint: true });
    const model = await stack.model();
    const first = await stack.agent();
    const cookie = await seed(first.url, "s", ep("q"));
    model.script("q", [message("hello")]);
    const original = await activate(first.url, cookie, "q", { input: "hi" }, 1).expect(200);
    const dir = await checkpoint([first.url], "c1", [ep("q")]);

    const second = await stack.agent();
    await restoreAndResume(second.url, "c2", dir, [ep("q")]);
    const again = await activate(second.url, cookie, "q-a1", { input: "hi" }, 1).expect(200);
    expect(again.body).toEqual(original.body);
    expect(model.callsFor("q-a1")).toHaveLength(0);
    // No change to the observations either: one activation, recorded once.
    const closed = await closeSession(second.url, "s", ep("q", 1)).expect(200);
    expect((closed.body.agent_observations as { records: unknown[] }).records).toHaveLength(1);
  });

  it("a session without a resources jar restores without one, and one with a jar keeps it", async () => {
    const stack = new Stack({ checkpoint: true });
    await stack.model();
    const tools = await fakeResources(stack);
    const first = await stack.agent();
    const bare = await seed(first.url, "bare", ep("a"));
    const granted = await seed(first.url, "granted", ep("b"), {
      tool_accesses: [grant("tools", `${tools.url}/ng-rollout/b`, { res_session: "s9" })],
    });
    await activate(first.url, bare, "a", { input: "x" }, 1).expect(200);
    await activate(first.url, granted, "b", { input: "x" }, 1).expect(200);
    const dir = await checkpoint([first.url], "c1", [ep("a"), ep("b")]);
    const records = await agentRecords(dir);
    const byKey = Object.fromEntries(records.map((r) => [r.session_key, r]));
    expect(byKey.bare?.session.resources_cookies).toBeNull();
    expect(byKey.granted?.session.resources_cookies).toEqual({ res_session: "s9" });

    const second = await stack.agent();
    await restoreAndResume(second.url, "c2", dir, [ep("a"), ep("b")]);
    const closedBare = await closeSession(second.url, "bare", ep("a", 1)).expect(200);
    expect(closedBare.body.resources_cookies).toBeNull();
    expect(closedBare.body.agent_observations).toMatchObject({ records: [{}] });
    const closedGranted = await closeSession(second.url, "granted", ep("b", 1)).expect(200);
    expect(closedGranted.body.resources_cookies).toEqual({ res_session: "s9" });
  });
});

describe("seed validation", () => {
  async function agentWith(config: Record<string, unknown> = {}) {
    const stack = new Stack({ checkpoint: false });
    await stack.model();
    return (await stack.agent(config)).url;
  }

  function seedReq(url: string, extra: Record<string, unknown>) {
    return request(url)
      .post("/v1/agent_sessions")
      .send({
        agent_session_id: "s",
        episode_id: ep("r"),
        task_id: { taskset: "t", task_id: "1" },
        ...extra,
      });
  }

  const mcp = (name: string, required: boolean, transport = "http") => ({
    kind: "mcp",
    name,
    required,
    connection: { transport, url: "http://127.0.0.1:1/mcp" },
  });

  it("refuses sandbox access, an MCP grant it cannot speak, and two direct grants with 422 invalid_request", async () => {
    const url = await agentWith({ tool_accesses: [grant("configured", "http://127.0.0.1:1")] });
    for (const body of [
      { sandbox_access: { image: "x" } },
      { tool_accesses: [mcp("m", true, "stdio")] },
      { tool_accesses: [grant("other", "http://127.0.0.1:2")] },
    ]) {
      const res = await seedReq(url, body).expect(422);
      expect(res.body.error.code).toBe("invalid_request");
    }
  });

  it("a seed's grant replaces the configured one of its name; an optional MCP grant it cannot reach is left out", async () => {
    const stack = new Stack({ checkpoint: false });
    const model = await stack.model();
    const tools = await fakeResources(stack);
    const { url } = await stack.agent({
      tool_accesses: [grant("tools", "http://127.0.0.1:1/unused")],
    });
    const res = await seedReq(url, {
      tool_accesses: [grant("tools", `${tools.url}/base`), mcp("m", false)],
    }).expect(200);
    const cookie = (res.headers["set-cookie"] as unknown as string[])[0]?.split(";")[0] ?? "";
    model.script(null, [functionCall("lookup", {}), message("ok")]);
    await request(url).post("/v1/responses").set("Cookie", cookie).send({ input: "x" }).expect(200);
    expect(tools.callsOf("/base/lookup")).toHaveLength(1);
  });
});

describe("a restore validates before it installs", () => {
  it("a session whose stored grant the agent refuses fails the restore and installs nothing", async () => {
    const stack = new Stack({ checkpoint: true });
    await stack.model();
    const first = await stack.agent();
    await seed(first.url, "good", ep("a"));
    await seed(first.url, "bad", ep("b"));
    await prepare([first.url], "c1");
    const dir = await commit([first.url], "c1", null);
    const records = await agentRecords(dir);
    const broken = records.map((r) =>
      r.session_key === "bad"
        ? {
            ...r,
            session: {
              ...r.session,
              request: { ...(r.session.request as object), sandbox_access: { image: "x" } },
            },
          }
        : r,
    );
    const crafted = await writeAgentRecords(broken, "c1");

    const { agent, url } = await stack.agent();
    const refused = await request(url)
      .post("/ng-control/v1/checkpoint/restore")
      .set("Authorization", "Bearer simple-agent-token")
      .send({
        checkpoint_id: "c2",
        deadline_ts: Date.now() / 1000 + 30,
        checkpoint_dir: crafted,
        episode_ids: [ep("a"), ep("b")],
      });
    expect(refused.status).toBeGreaterThanOrEqual(400);
    expect(sessionParticipantOf(agent)?.size).toBe(0);
    await closeSession(url, "good", ep("a", 1))
      .expect(200)
      .expect((res) => expect(res.body.agent_observations).toBeNull());
  });
});
