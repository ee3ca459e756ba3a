/**
 * The Simple Agent's turn loop in detail: tool-call edge cases,
 * how a loop stops, usage, cookies, the model path, and metrics. Mostly checkpointing off and
 * session-less calls, which run the same loop without a participant.
 */
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import { grantUrl } from "../../../reference-servers/simple-agent/src/index.js";
// By package name, as the agent sees it (the SDK source under vitest, its build under tsc).
import { fromCaptureKey } from "gym-participant-sdk";
import {
  functionCall,
  functionCallItem,
  incomplete,
  message,
  response,
  type ResponsesJson,
} from "../../support/fake-model-server.js";
import {
  RecordingCounter,
  Stack,
  activate,
  cleanup,
  closeSession,
  cookieOf,
  ep,
  fakeResources,
  holdingProxy,
  seed,
} from "../../support/simple-agent-harness.js";

afterEach(cleanup);

const RESOURCES = { resources_server: "resources" };

async function direct(config: Record<string, unknown> = {}, checkpoint = false) {
  const stack = new Stack({ checkpoint });
  const model = await stack.model();
  const tools = await fakeResources(stack);
  const { url } = await stack.agent({ ...RESOURCES, ...config });
  return { stack, model, tools, url };
}

function lastInput(call: { body: Readonly<Record<string, unknown>> } | undefined) {
  return (call?.body.input as Record<string, unknown>[]).at(-1);
}

interface Reply {
  status?: string;
  output: Record<string, unknown>[];
  usage: Record<string, number>;
  metadata?: Record<string, string>;
  _ng_trajectory: {
    invocations: { invocation_id: string; status: string }[];
    turns: { reasoning: string[]; tool_call_count: number; model_call: string | null }[];
    tool_calls: { status: string; error_type: string | null; name: string }[];
    gaps: { kind: string; detail: string }[];
  };
}

describe("tool calls", () => {
  it("arguments that are not JSON answer the call with an error and make no request", async () => {
    const { model, tools, url } = await direct();
    model.script("d", [functionCall("lookup", "{not json", "call_x"), message("sorry")]);
    const res = await request(url).post("/ng-rollout/d/v1/responses").send({ input: "go" });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(tools.callsOf("/lookup")).toHaveLength(0);
    const output = lastInput(model.callsFor("d")[1]);
    expect(output).toMatchObject({ type: "function_call_output", call_id: "call_x" });
    expect(JSON.parse(output?.output as string)).toEqual({
      error: expect.stringMatching(/^Invalid tool call arguments: /),
    });
    const tool = (res.body as Reply)._ng_trajectory.tool_calls[0];
    expect(tool).toMatchObject({ status: "failed", error_type: "invalid_arguments" });
  });

  it("any HTTP status is an answer: the body text goes to the model and the record says failed", async () => {
    const stack = new Stack({ checkpoint: false });
    const model = await stack.model();
    await stack.resources(RecordingCounter);
    const { url } = await stack.agent(RESOURCES);
    model.script("d", [functionCall("increment_counter", { count: "x" }), message("hm")]);
    const res = await request(url).post("/ng-rollout/d/v1/responses").send({ input: "go" });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const output = lastInput(model.callsFor("d")[1])?.output as string;
    expect(JSON.parse(output)).toMatchObject({ error: { code: "invalid_request" } });
    expect((res.body as Reply)._ng_trajectory.tool_calls[0]).toMatchObject({
      status: "failed",
      error_type: "http_422",
    });
  });

  it("session-less calls go to the resources server under the inbound prefix, keeping its cookies", async () => {
    const stack = new Stack({ checkpoint: false });
    const model = await stack.model();
    const counter = await stack.resources(RecordingCounter);
    const { url } = await stack.agent(RESOURCES);
    model.script("d", [
      functionCall("increment_counter", { count: 1 }),
      functionCall("increment_counter", { count: 1 }),
      message("two"),
    ]);
    const res = await request(url).post("/ng-rollout/d/v1/responses").send({ input: "go" });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(counter.server.requests.map((r) => r.path)).toEqual([
      "/ng-rollout/d/increment_counter",
      "/ng-rollout/d/increment_counter",
    ]);
    // The first call minted the counter's session; its cookie went with the second call and
    // comes back on the reply with the model's.
    const [firstCall, secondCall] = counter.server.requests;
    expect(firstCall?.headers.cookie).toBeUndefined();
    const minted = /RecordingCounter___resources=[^;]+/.exec(cookieOf(res))?.[0];
    expect(minted).toBeDefined();
    expect(secondCall?.headers.cookie).toBe(minted);
    expect(cookieOf(res)).toContain("model_session=3");
  });

  it("a session reply sets only the model's cookies; the resources jar stays with the session", async () => {
    const stack = new Stack({ checkpoint: false });
    const model = await stack.model();
    const tools = await fakeResources(stack);
    const { url } = await stack.agent();
    const cookie = await seed(url, "s", ep("r"), {
      tool_accesses: [
        { kind: "direct_http", name: "t", base_url: tools.url, cookies: { res_session: "jar" } },
      ],
    });
    model.script("r", [functionCall("lookup", {}), message("ok")]);
    const res = await activate(url, cookie, "r", { input: "go" }).expect(200);
    expect(tools.callsOf("/lookup", "r")[0]?.headers.cookie).toBe("res_session=jar");
    expect(cookieOf(res)).toBe("model_session=2");
    // The model's cookie of the first call went with the second.
    expect(model.callsFor("r")[1]?.cookies).toEqual({ model_session: "1" });
  });

  it("a grant naming a host outside the deployment is called directly", async () => {
    const { model, tools, url } = await direct();
    const outside = await holdingProxy(tools.url); // not a server of the deployment
    const cookie = await seed(url, "s", ep("r"), {
      tool_accesses: [
        {
          kind: "direct_http",
          name: "t",
          base_url: `${outside.url}/ng-rollout/r`,
          cookies: { res_session: "jar" },
          headers: { "x-tool-token": "secret" },
        },
      ],
    });
    model.script("r", [functionCall("lookup", { q: 1 }), message("ok")]);
    await activate(url, cookie, "r", { input: "go" }).expect(200);
    const [call] = tools.callsOf("/lookup", "r");
    expect(call?.body).toEqual({ q: 1 });
    expect(call?.headers.cookie).toBe("res_session=jar");
    expect(call?.headers["x-tool-token"]).toBe("secret");
  });

  it("a session without a direct grant cannot call a tool: the activation fails", async () => {
    const { model, tools, url } = await direct();
    const cookie = await seed(url, "s", ep("r"));
    model.script("r", [functionCall("lookup", {})]);
    await activate(url, cookie, "r", { input: "go" }).expect(500);
    expect(tools.calls).toHaveLength(0);
  });

  it("execute_tools off returns a session's tool calls unexecuted", async () => {
    const { model, tools, url } = await direct({ execute_tools: false });
    const cookie = await seed(url, "s", ep("r"), {
      tool_accesses: [{ kind: "direct_http", name: "t", base_url: tools.url }],
    });
    model.script("r", [functionCall("lookup", {}, "call_1")]);
    const res = await activate(url, cookie, "r", { input: "go" }).expect(200);
    expect((res.body as Reply).output).toEqual([
      expect.objectContaining({ type: "function_call", call_id: "call_1" }),
    ]);
    expect(model.callsFor("r")).toHaveLength(1);
    expect(tools.calls).toHaveLength(0);
    // Session-less calls must execute their tools.
    await request(url).post("/v1/responses").send({ input: "go" }).expect(500);
  });
});

describe("how a loop stops", () => {
  it("a reply with no output is incomplete: empty_output", async () => {
    const { model, url } = await direct();
    model.script("d", [response([])]);
    const res = await request(url).post("/ng-rollout/d/v1/responses").send({ input: "go" });
    const body = res.body as Reply;
    expect(body.status).toBe("incomplete");
    expect(body.metadata?.ng_termination_reason).toBe("empty_output");
    expect(body.metadata?.ng_termination_message).toEqual(expect.any(String));
    expect(body._ng_trajectory.invocations[0]?.status).toBe("incomplete");
  });

  it("reasoning without an answer is incomplete: incomplete_reasoning; the turn keeps the reasoning", async () => {
    const { model, url } = await direct();
    const reasoning: ResponsesJson = {
      object: "response",
      id: "resp_reasoning",
      status: "completed",
      output: [
        { type: "reasoning", id: "rs_1", summary: [{ type: "summary_text", text: "thinking" }] },
      ],
      usage: { input_tokens: 1, output_tokens: 1, total_tokens: 2 },
      incomplete_details: null,
    };
    model.script("d", [reasoning]);
    const res = await request(url).post("/ng-rollout/d/v1/responses").send({ input: "go" });
    const body = res.body as Reply;
    expect(body.status).toBe("incomplete");
    expect(body.metadata?.ng_termination_reason).toBe("incomplete_reasoning");
    expect(body._ng_trajectory.turns[0]?.reasoning).toEqual(["thinking"]);
  });

  it("a reply with incomplete_details stops the loop, pending tool calls and all", async () => {
    const { model, tools, url } = await direct();
    model.script("d", [
      { ...incomplete("partial"), output: [functionCallItem("lookup", {})] } as ResponsesJson,
    ]);
    const res = await request(url).post("/ng-rollout/d/v1/responses").send({ input: "go" });
    expect(res.status).toBe(200);
    expect(model.callsFor("d")).toHaveLength(1);
    expect(tools.calls).toHaveLength(0);
    expect((res.body as Reply)._ng_trajectory.invocations[0]?.status).toBe("incomplete");
  });

  it("max_steps bounds the model calls; the last tool round still runs", async () => {
    const { model, tools, url } = await direct({ max_steps: 1 });
    model.script("d", [functionCall("lookup", {}), message("never")]);
    const res = await request(url).post("/ng-rollout/d/v1/responses").send({ input: "go" });
    expect(model.callsFor("d")).toHaveLength(1);
    expect(tools.callsOf("/lookup", "d")).toHaveLength(1);
    expect((res.body as Reply)._ng_trajectory.invocations[0]?.status).toBe("incomplete");
    expect((res.body as Reply).output.map((item) => item.type)).toEqual([
      "function_call",
      "function_call_output",
    ]);
  });

  it("max_steps 0 is unbounded", async () => {
    const { model, url } = await direct({ max_steps: 0 });
    model.script("d", [functionCall("lookup", {}), functionCall("lookup", {}), message("ok")]);
    await request(url).post("/ng-rollout/d/v1/responses").send({ input: "go" }).expect(200);
    expect(model.callsFor("d")).toHaveLength(3);
  });

  it("a non-2xx model reply or one that is not a Responses object fails the call: 502 upstream_error", async () => {
    const { model, url } = await direct();
    // A 503 whose body looks like a reply is still a failure.
    model.script("d", [{ status: 503, body: message("looks fine") }]);
    const refused = await request(url).post("/ng-rollout/d/v1/responses").send({ input: "go" });
    expect(refused.status).toBe(502);
    expect(refused.body.error.code).toBe("upstream_error");
    expect(refused.body.error.detail).toMatch(/answered HTTP 503/);
    model.script("e", [{ object: "response", output: "nope" }]);
    const garbled = await request(url).post("/ng-rollout/e/v1/responses").send({ input: "go" });
    expect(garbled.status).toBe(502);
    expect(garbled.body.error.detail).toMatch(/not a Responses object/);
  });
});

describe("the reply", () => {
  it("usage adds up over the model calls; each turn references its model call", async () => {
    const { model, url } = await direct();
    const first = functionCall("lookup", {}, undefined, { inputTokens: 10, outputTokens: 3 });
    const second = message("ok", { inputTokens: 20, outputTokens: 4 });
    model.script("d", [first, { ...second, id: "" }]);
    const res = await request(url).post("/ng-rollout/d/v1/responses").send({ input: "go" });
    const body = res.body as Reply;
    expect(body.usage).toEqual({ input_tokens: 30, output_tokens: 7, total_tokens: 37 });
    expect(body._ng_trajectory.turns.map((t) => t.model_call)).toEqual([first.id, null]);
    expect(body._ng_trajectory.turns.map((t) => t.tool_call_count)).toEqual([1, 1]);
    expect(body._ng_trajectory.gaps).toEqual([
      { kind: "model_call_reference_unavailable", detail: "turn:2" },
    ]);
  });

  it("no trajectory without a rollout prefix, or with collection off", async () => {
    const { url } = await direct();
    const bare = await request(url).post("/v1/responses").send({ input: "go" }).expect(200);
    expect(bare.body).not.toHaveProperty("_ng_trajectory");
    const off = await direct({ collect_trajectory: false });
    const res = await request(off.url).post("/ng-rollout/d/v1/responses").send({ input: "go" });
    expect(res.body).not.toHaveProperty("_ng_trajectory");
  });

  it("a string input becomes one user message; the model path keeps the inbound prefix", async () => {
    const { model, url } = await direct();
    await request(url)
      .post("/ng-rollout/d/training-token-capture/v1/responses")
      .send({ input: "hello", model: "policy", temperature: 0.5 })
      .expect(200);
    const [call] = model.calls;
    expect(call?.path).toBe("/ng-rollout/d/training-token-capture/v1/responses");
    expect(call?.body).toEqual({
      input: [{ role: "user", content: "hello", type: "message" }],
      model: "policy",
      temperature: 0.5,
    });
    await request(url).post("/v1/responses").send({ input: "x" }).expect(200);
    expect(model.calls[1]?.path).toBe("/v1/responses");
  });

  it("the observation bundle collects each activation's invocation and gaps", async () => {
    const { model, url } = await direct();
    const cookie = await seed(url, "s", ep("r"));
    model.script("r", [{ ...message("a"), id: "" }, message("b")]);
    await activate(url, cookie, "r", { input: "1" }).expect(200);
    await activate(url, cookie, "r", { input: "2" }).expect(200);
    const closed = await closeSession(url, "s", ep("r")).expect(200);
    expect(closed.body.agent_observations).toMatchObject({
      source: "simple_agent",
      records: [
        { invocation_id: "root", status: "completed", turns: [{ turn: 1 }] },
        { invocation_id: "activation-2", status: "completed" },
      ],
      gaps: [{ kind: "model_call_reference_unavailable", detail: "turn:1" }],
    });
    expect(closed.body.resources_cookies).toBeNull();
  });
});

describe("metrics", () => {
  it("/aggregate_metrics goes to the resources server; without one it answers {}", async () => {
    const { tools, url } = await direct();
    const res = await request(url)
      .post("/aggregate_metrics")
      .send({ rows: [1] })
      .expect(200);
    expect(res.body).toEqual({ aggregated: { rows: [1] } });
    expect(tools.callsOf("/aggregate_metrics")).toHaveLength(1);
    const stack = new Stack({ checkpoint: false });
    await stack.model();
    const bare = await stack.agent();
    await request(bare.url).post("/aggregate_metrics").send({}).expect(200, {});
  });
});

describe("grantUrl", () => {
  const rollout = (key: string) => ({
    captureKey: key,
    episodeId: fromCaptureKey(key),
    tokenCapture: false,
  });

  it("replaces the grant's trailing rollout prefix with the activation's", () => {
    expect(grantUrl("http://h:1/ng-rollout/r", rollout("r-a1"), "t").href).toBe(
      "http://h:1/ng-rollout/r-a1/t",
    );
    expect(grantUrl("http://h:1/base/ng-rollout/r/", rollout("r-a2"), "t").href).toBe(
      "http://h:1/base/ng-rollout/r-a2/t",
    );
  });

  it("adds the activation's prefix to a grant without one, and leaves the grant alone without a rollout", () => {
    expect(grantUrl("http://h:1/base", rollout("r"), "t").href).toBe(
      "http://h:1/base/ng-rollout/r/t",
    );
    expect(grantUrl("http://h:1/ng-rollout/r", null, "t").href).toBe("http://h:1/ng-rollout/r/t");
  });
});
