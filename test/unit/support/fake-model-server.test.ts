/**
 * The fake policy-model server: scripts per capture key, the default reply, path parsing, call
 * records, cookies, builders, error replies, holds and waits. Synchronisation is by events and
 * setImmediate rounds only, never by sleeping.
 */
import { once } from "node:events";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  DEFAULT_INPUT_TOKENS,
  FAKE_MODEL_NAME,
  functionCall,
  functionCalls,
  httpError,
  incomplete,
  message,
  messageItem,
  response,
  startFakeModelServer,
  type FakeModelServer,
  type FakeModelServerOptions,
} from "../../support/fake-model-server.js";
import { flush } from "../../support/test-participant.js";

let model: FakeModelServer;

async function start(options: FakeModelServerOptions = {}): Promise<void> {
  await model.close();
  model = await startFakeModelServer(options);
}

beforeEach(async () => {
  model = await startFakeModelServer();
});

afterEach(async () => {
  await model.close();
});

/** POSTs a JSON body to the fake model at `path`. */
function post(path: string, body: unknown = { input: "hi" }, init: RequestInit = {}) {
  return fetch(`${model.url}${path}`, {
    method: "POST",
    ...init,
    headers: { "content-type": "application/json", ...init.headers },
    body: JSON.stringify(body),
  });
}

/** POSTs and returns the parsed JSON reply. */
async function ask(path: string, body?: unknown): Promise<Record<string, unknown>> {
  const reply = await post(path, body);
  expect(reply.status).toBe(200);
  return (await reply.json()) as Record<string, unknown>;
}

/** The text of the first output item of a response, when it is a message. */
function textOf(reply: Record<string, unknown>): string {
  const output = reply.output as { content: { text: string }[] }[];
  return output[0]?.content[0]?.text ?? "";
}

/** A promise's settlement, observable without awaiting it. */
function track<T>(promise: Promise<T>): {
  readonly settled: boolean;
  readonly promise: Promise<T>;
} {
  const state = { settled: false, promise };
  promise.then(
    () => (state.settled = true),
    () => (state.settled = true),
  );
  return state;
}

const R0 = "/ng-rollout/r-a0/v1/responses";
const R1 = "/ng-rollout/r-a1/v1/responses";

describe("scripts", () => {
  it("returns each key's scripted replies in order, independently of other keys", async () => {
    model.script("r-a0", [message("first"), functionCall("lookup", { q: "x" }, "call_q")]);
    model.script("r-a1", [message("other")]);
    model.script("r-a0", [message("third")]);

    expect(textOf(await ask(R0))).toBe("first");
    expect(textOf(await ask(R1))).toBe("other");
    const second = await ask(R0);
    expect(second.output).toEqual([
      expect.objectContaining({ type: "function_call", name: "lookup", call_id: "call_q" }),
    ]);
    expect(textOf(await ask(R0))).toBe("third");
    expect(model.remaining("r-a0")).toBe(0);
  });

  it("falls back to the default queue, then to the default reply 'done'", async () => {
    model.script("*", [message("shared")]);
    model.script("r-a0", [message("own")]);
    expect(model.remaining(null)).toBe(1);

    expect(textOf(await ask(R0))).toBe("own");
    expect(textOf(await ask(R0))).toBe("shared");
    const done = await ask(R0);
    expect(textOf(done)).toBe("done");
    expect(done.status).toBe("completed");
    expect(textOf(await ask("/v1/responses"))).toBe("done");
  });

  it("takes un-prefixed calls from the default queue (also under null)", async () => {
    model.script(null, [message("a")]);
    model.script("*", [message("b")]);
    expect(textOf(await ask("/v1/responses"))).toBe("a");
    expect(textOf(await ask("/v1/responses"))).toBe("b");
  });

  it("answers options.defaultReply when every queue is empty", async () => {
    await start({ defaultReply: message("bye") });
    expect(textOf(await ask(R0))).toBe("bye");
    expect(textOf(await ask(R0))).toBe("bye");
  });

  it("gives a fresh response id to each default reply", async () => {
    const a = await ask(R0);
    const b = await ask(R0);
    expect(a.id).not.toBe(b.id);
  });

  it("computes a function reply from the call", async () => {
    model.script("r-a0", [(call) => message(`you said ${String(call.body.input)}`)]);
    expect(textOf(await ask(R0, { input: "hello" }))).toBe("you said hello");
  });

  it("answers 500 when a function reply throws, and keeps serving", async () => {
    model.script("*", [
      () => {
        throw new Error("boom");
      },
    ]);
    const reply = await post(R0);
    expect(reply.status).toBe(500);
    expect(await reply.json()).toMatchObject({ error: { type: "server_error" } });
    expect(textOf(await ask(R0))).toBe("done");
  });
});

describe("error replies", () => {
  it("returns the scripted status and body", async () => {
    model.script("r-a0", [{ status: 503, body: { error: { message: "busy" } } }, message("ok")]);
    const reply = await post(R0);
    expect(reply.status).toBe(503);
    expect(await reply.json()).toEqual({ error: { message: "busy" } });
    expect(textOf(await ask(R0))).toBe("ok");
  });

  it("httpError builds an OpenAI-style body; extra headers are sent", async () => {
    model.script("*", [httpError(500), { status: 429, headers: { "retry-after": "1" } }]);
    const first = await post(R0);
    expect(first.status).toBe(500);
    expect(await first.json()).toEqual({
      error: { message: "fake model error 500", type: "server_error", param: null, code: null },
    });
    const second = await post(R0);
    expect(second.status).toBe(429);
    expect(second.headers.get("retry-after")).toBe("1");
    expect(await second.json()).toMatchObject({ error: { type: "server_error" } });
  });
});

describe("builders", () => {
  it("message: one completed assistant message", () => {
    const built = message("two words");
    expect(built).toEqual({
      id: expect.stringMatching(/^resp_\d+$/),
      object: "response",
      created_at: expect.any(Number),
      model: FAKE_MODEL_NAME,
      status: "completed",
      output: [
        {
          type: "message",
          id: expect.stringMatching(/^msg_\d+$/),
          role: "assistant",
          status: "completed",
          content: [{ type: "output_text", text: "two words", annotations: [] }],
        },
      ],
      usage: { input_tokens: DEFAULT_INPUT_TOKENS, output_tokens: 2, total_tokens: 12 },
      incomplete_details: null,
    });
  });

  it("functionCall: arguments are a JSON string; a string is kept; call_id defaults", () => {
    const built = functionCall("get_weather", { city: "Paris" }, "call_1");
    expect(built.output).toEqual([
      {
        type: "function_call",
        id: expect.stringMatching(/^fc_\d+$/),
        call_id: "call_1",
        name: "get_weather",
        arguments: '{"city":"Paris"}',
        status: "completed",
      },
    ]);
    expect(built.status).toBe("completed");
    expect(built.incomplete_details).toBeNull();
    expect(functionCall("f", '{"raw":1}').output[0]).toMatchObject({
      arguments: '{"raw":1}',
      call_id: expect.stringMatching(/^call_\d+$/),
    });
  });

  it("functionCalls: several calls in order", () => {
    const built = functionCalls([
      { name: "a", args: { x: 1 }, callId: "call_a" },
      { name: "b", args: {} },
    ]);
    expect(built.output.map((item) => item.type === "function_call" && item.name)).toEqual([
      "a",
      "b",
    ]);
    expect(built.output[0]).toMatchObject({ call_id: "call_a", arguments: '{"x":1}' });
  });

  it("incomplete: status incomplete with incomplete_details and a partial message", () => {
    const built = incomplete("The answer is");
    expect(built.status).toBe("incomplete");
    expect(built.incomplete_details).toEqual({ reason: "max_output_tokens" });
    expect(built.output).toEqual([
      expect.objectContaining({ type: "message", status: "incomplete" }),
    ]);
    const filtered = incomplete("", { reason: "content_filter" });
    expect(filtered.output).toEqual([]);
    expect(filtered.incomplete_details).toEqual({ reason: "content_filter" });
  });

  it("response: mixed items and options", () => {
    const built = response([messageItem("hi")], { model: "policy", id: "resp_x", inputTokens: 3 });
    expect(built).toMatchObject({
      id: "resp_x",
      model: "policy",
      usage: { input_tokens: 3, output_tokens: 1, total_tokens: 4 },
    });
  });

  it("sends a hand-written Responses object verbatim", async () => {
    const raw = { object: "response" as const, id: "resp_raw", status: "completed", output: [] };
    model.script("*", [raw]);
    expect(await ask(R0)).toEqual(raw);
  });
});

describe("paths", () => {
  it("parses the rollout prefix and the token-capture segment", async () => {
    await ask("/v1/responses");
    await ask("/ng-rollout/r-a2/v1/responses?x=1");
    await ask("/ng-rollout/r-a2/training-token-capture/v1/responses");
    await ask("/training-token-capture/v1/responses");
    expect(
      model.calls.map(({ index, path, captureKey, tokenCapture }) => ({
        index,
        path,
        captureKey,
        tokenCapture,
      })),
    ).toEqual([
      { index: 0, path: "/v1/responses", captureKey: null, tokenCapture: false },
      {
        index: 1,
        path: "/ng-rollout/r-a2/v1/responses?x=1",
        captureKey: "r-a2",
        tokenCapture: false,
      },
      {
        index: 2,
        path: "/ng-rollout/r-a2/training-token-capture/v1/responses",
        captureKey: "r-a2",
        tokenCapture: true,
      },
      {
        index: 3,
        path: "/training-token-capture/v1/responses",
        captureKey: null,
        tokenCapture: true,
      },
    ]);
    expect(model.callsFor("r-a2").map((call) => call.index)).toEqual([1, 2]);
    expect(model.callsFor(null).map((call) => call.index)).toEqual([0, 3]);
    expect(model.callCount).toBe(4);
  });

  it("takes token-capture calls from their key's script", async () => {
    model.script("r-a0", [message("captured")]);
    expect(textOf(await ask("/ng-rollout/r-a0/training-token-capture/v1/responses"))).toBe(
      "captured",
    );
  });

  it("refuses other paths, methods, malformed keys and non-object bodies, recording none", async () => {
    expect((await post("/v1/chat/completions")).status).toBe(404);
    expect((await post("/ng-rollout/r-a0/v2/responses")).status).toBe(404);
    expect((await fetch(`${model.url}/v1/responses`)).status).toBe(405);
    const malformed = await post("/ng-rollout/-bad/v1/responses");
    expect(malformed.status).toBe(400);
    expect(await malformed.json()).toMatchObject({ error: { code: "invalid_rollout_id" } });
    expect((await post("/v1/responses", [1, 2])).status).toBe(400);
    const notJson = await fetch(`${model.url}/v1/responses`, { method: "POST", body: "{" });
    expect(notJson.status).toBe(400);
    expect(model.callCount).toBe(0);
  });
});

describe("call records and cookies", () => {
  it("records the parsed body, lowercased headers and parsed cookies", async () => {
    await post(
      R0,
      { model: "policy", input: [{ role: "user", content: "hi" }] },
      {
        headers: {
          Authorization: "Bearer k",
          "X-Trace": "t1",
          Cookie: "model_session=7; other=a%20b",
        },
      },
    );
    const [call] = model.calls;
    expect(call?.body).toEqual({ model: "policy", input: [{ role: "user", content: "hi" }] });
    expect(call?.headers).toMatchObject({
      authorization: "Bearer k",
      "x-trace": "t1",
      "content-type": "application/json",
    });
    expect(call?.cookies).toEqual({ model_session: "7", other: "a b" });
    expect(call?.signal.aborted).toBe(false);
  });

  it("has empty cookies without a Cookie header", async () => {
    await ask(R0);
    expect(model.calls[0]?.cookies).toEqual({});
  });

  it("sets model_session=<call number> on every reply, errors included", async () => {
    model.script("*", [message("a"), httpError(500)]);
    const first = await post(R0);
    const second = await post(R0);
    expect(first.headers.get("set-cookie")).toBe("model_session=1; Path=/");
    expect(second.headers.get("set-cookie")).toBe("model_session=2; Path=/");
  });

  it("takes the cookie's name, value and attributes from options, or sets none", async () => {
    await start({
      cookie: { name: "sid", value: (call) => `s${call.captureKey}`, attributes: "HttpOnly" },
    });
    expect((await post(R1)).headers.get("set-cookie")).toBe("sid=sr-a1; HttpOnly");
    await start({ cookie: false });
    expect((await post(R1)).headers.get("set-cookie")).toBeNull();
  });
});

describe("holds and waits", () => {
  it("withholds matching replies until release; arrived resolves when the call is held", async () => {
    model.script("r-a1", [message("held reply")]);
    const hold = model.hold((call) => call.captureKey === "r-a1");
    const arrived = track(hold.arrived());
    await flush();
    expect(arrived.settled).toBe(false);

    const held = track(post(R1));
    const [call] = await arrived.promise;
    expect(call).toBe(model.calls[0]);
    expect(hold.calls).toEqual([call]);

    // Other calls are not held.
    expect(textOf(await ask(R0))).toBe("done");
    await flush();
    expect(held.settled).toBe(false);

    hold.release();
    expect(hold.released).toBe(true);
    const reply = await held.promise;
    expect(reply.status).toBe(200);
    expect(textOf((await reply.json()) as Record<string, unknown>)).toBe("held reply");

    // After release, matching calls are no longer held.
    expect((await post(R1)).status).toBe(200);
  });

  it("arrived(n) waits for n held calls; release before then rejects it", async () => {
    const hold = model.hold();
    const two = track(hold.arrived(2));
    const first = track(post(R0));
    await hold.arrived(1);
    await flush();
    expect(two.settled).toBe(false);
    const second = track(post(R1));
    expect((await two.promise).map((call) => call.captureKey)).toEqual(["r-a0", "r-a1"]);
    expect(first.settled || second.settled).toBe(false);

    const three = hold.arrived(3);
    hold.release();
    await expect(three).rejects.toThrow(/released/);
    expect((await first.promise).status).toBe(200);
    expect((await second.promise).status).toBe(200);
  });

  it("a call held by two holds replies once both are released", async () => {
    const all = model.hold();
    const r0 = model.hold((call) => call.captureKey === "r-a0");
    const reply = track(post(R0));
    await Promise.all([all.arrived(), r0.arrived()]);
    all.release();
    await flush();
    expect(reply.settled).toBe(false);
    r0.release();
    expect((await reply.promise).status).toBe(200);
  });

  it("nextCall resolves with the next matching call", async () => {
    const next = model.nextCall((call) => call.tokenCapture);
    const any = model.nextCall();
    await ask(R0);
    expect((await any).captureKey).toBe("r-a0");
    await flush();
    expect(track(next).settled).toBe(false);
    await ask("/ng-rollout/r-a0/training-token-capture/v1/responses");
    expect((await next).index).toBe(1);
  });

  it("survives a held call whose client disconnects", async () => {
    model.script("r-a0", [message("never sent"), message("next")]);
    const hold = model.hold();
    const client = new AbortController();
    const reply = post(R0, undefined, { signal: client.signal });
    reply.catch(() => undefined);
    const [call] = await hold.arrived();
    const aborted = once(call!.signal, "abort");
    client.abort();
    await expect(reply).rejects.toThrow();
    await aborted;
    hold.release();
    await flush();
    expect(textOf(await ask(R0))).toBe("next");
  });

  it("close releases holds and rejects waiters", async () => {
    const hold = model.hold();
    const pending = hold.arrived();
    const next = model.nextCall();
    await model.close();
    await expect(pending).rejects.toThrow(/closed/);
    await expect(next).rejects.toThrow(/closed/);
    expect(hold.released).toBe(true);
    await model.close();
  });

  it("close cuts a held call", async () => {
    const hold = model.hold();
    const reply = post(R0);
    reply.catch(() => undefined);
    const [call] = await hold.arrived();
    await model.close();
    await expect(reply).rejects.toThrow();
    expect(call?.signal.aborted).toBe(true);
  });
});
