/**
 * The fake inference backend as a scripted chat completions server: turns in script order,
 * deterministic tokens, the output budget, streaming, holds and the call log.
 */
import { mkdtemp, readFile, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import request from "supertest";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import FakeInferenceServer, {
  renderMessage,
  renderPrompt,
  stagedFilePath,
  tokenize,
} from "../../../reference-servers/fake-inference/src/index.js";
import { TokenStore } from "../../../reference-servers/fake-inference/src/token-store.js";
import { StagedCallRecordSchema } from "#sdk/capture/records.js";

let dir: string;
let servers: FakeInferenceServer[];

beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), "fake-inference-"));
  servers = [];
});

afterEach(async () => {
  for (const server of servers) {
    server.holds.release();
    await server.close();
  }
  await rm(dir, { recursive: true, force: true });
});

function start(storeDir = path.join(dir, "tokens")): FakeInferenceServer {
  const server = new FakeInferenceServer({
    name: "inference",
    config: { token_store_dir: storeDir, control_token: "t0ken" },
    logLevel: "silent",
  });
  servers.push(server);
  return server;
}

type Message = Record<string, unknown> & { role: string };

const USER: Message = { role: "user", content: "What is the weather in Paris?" };
const TOOLS = [{ type: "function", function: { name: "get_weather", parameters: {} } }];

async function complete(server: FakeInferenceServer, body: Record<string, unknown>) {
  const reply = await request(server.app()).post("/v1/chat/completions").send(body);
  expect(reply.status, JSON.stringify(reply.body)).toBe(200);
  return reply.body as {
    choices: { message: Message; finish_reason: string }[];
    usage: { prompt_tokens: number; completion_tokens: number };
    ng_commit_coords?: Record<string, unknown>;
  };
}

/** Starts a call without awaiting it (supertest requests are lazy until `then`). */
function send(server: FakeInferenceServer, body: Record<string, unknown>, rollout?: string) {
  const call = request(server.app()).post("/v1/chat/completions");
  if (rollout !== undefined) call.set("x-ng-rollout", rollout);
  return call.send(body).then((reply) => reply);
}

async function calls(server: FakeInferenceServer) {
  const reply = await request(server.app()).get("/_ctl/calls");
  return reply.body.calls as Record<string, unknown>[];
}

describe("scripted turns", () => {
  it("plays a rollout's script in order, one turn per assistant message, clamped to the last", async () => {
    const server = start();
    const script = {
      default: [{ content: "default answer" }],
      per_rollout: {
        r: [
          { tool_calls: [{ name: "get_weather", arguments: { city: "Paris" } }] },
          { content: "Sunny." },
        ],
      },
    };
    await request(server.app()).post("/_ctl/script").send(script).expect(200);

    const first = await complete(server, { messages: [USER], ng_capture: text("r", "c1") });
    expect(first.choices[0]?.finish_reason).toBe("tool_calls");
    const assistant = first.choices[0]?.message as Message;
    expect(assistant.tool_calls).toEqual([
      {
        id: "call_0_0",
        type: "function",
        function: { name: "get_weather", arguments: '{"city":"Paris"}' },
      },
    ]);
    const toolResult = { role: "tool", tool_call_id: "call_0_0", content: "sunny" };
    const second = await complete(server, { messages: [USER, assistant, toolResult] });
    const rolloutHeader = await request(server.app())
      .post("/v1/chat/completions")
      .set("x-ng-rollout", "r")
      .send({ messages: [USER, assistant, toolResult] });
    expect(second.choices[0]?.message.content).toBe("default answer");
    expect(rolloutHeader.body.choices[0].message).toEqual({ role: "assistant", content: "Sunny." });
    expect(rolloutHeader.body.choices[0].finish_reason).toBe("stop");

    const later = [USER, assistant, toolResult, { role: "assistant", content: "x" }, USER];
    const clamped = await complete(server, { messages: later, ng_capture: text("r-a1", "c9") });
    expect(clamped.choices[0]?.message.content).toBe("Sunny."); // `r-a1` uses rollout r's script
  });

  it("calls the first tool offered, then answers done, when no script is set", async () => {
    const server = start();
    const first = await complete(server, { messages: [USER], tools: TOOLS });
    const call = (first.choices[0]?.message.tool_calls as { function: unknown }[])[0];
    expect(call?.function).toEqual({ name: "get_weather", arguments: "{}" });
    const assistant = first.choices[0]?.message as Message;
    const tool = { role: "tool", tool_call_id: "call_0_0", content: "sunny" };
    const second = await complete(server, { messages: [USER, assistant, tool], tools: TOOLS });
    expect(second.choices[0]?.message.content).toBe("done");
    const noTools = await complete(server, { messages: [USER] });
    expect(noTools.choices[0]?.message.content).toBe("done");
  });

  it("stops at max_tokens with finish_reason length", async () => {
    const server = start();
    await request(server.app())
      .post("/_ctl/script")
      .send({ default: [{ content: "one two three four" }] })
      .expect(200);
    const cut = await complete(server, { messages: [USER], max_tokens: 3 });
    // The role marker is the first generated token: two words fit.
    expect(cut.choices[0]).toMatchObject({
      finish_reason: "length",
      message: { content: "one two" },
    });
    expect(cut.usage.completion_tokens).toBe(3);
    const whole = await complete(server, { messages: [USER] });
    expect(whole.choices[0]).toMatchObject({
      finish_reason: "stop",
      message: { content: "one two three four" },
    });
  });
});

function text(rollout: string, call: string) {
  return { rollout_id: rollout, model_call_id: call, mode: "text" };
}

describe("deterministic tokens", () => {
  it("tokenizes by words, stably, and generates exactly the rendering of the reply", async () => {
    expect(tokenize("It is  sunny. ")).toEqual(tokenize("It is  sunny. "));
    expect(tokenize("It is  sunny. ")).toHaveLength(4);
    expect(tokenize("sunny")).not.toEqual(tokenize("Sunny"));

    // Two backends with separate stores stage the same tokens for the same call.
    const a = start(path.join(dir, "a"));
    const b = start(path.join(dir, "b"));
    const body = { messages: [USER], tools: TOOLS, ng_capture: text("r", "c1") };
    const fromA = await complete(a, body);
    const fromB = await complete(b, body);
    expect(fromA.ng_commit_coords).toEqual(fromB.ng_commit_coords);

    const raw = await readFile(stagedFilePath(path.join(dir, "a"), "r/c1"), "utf8");
    const record = StagedCallRecordSchema.parse(JSON.parse(raw));
    const reply = fromA.choices[0]?.message as Message;
    const prompt = renderPrompt([USER]);
    expect(record.token_ids_delta).toEqual([...prompt, ...renderMessage(reply)]);
    expect(record.token_mask_delta).toEqual([
      ...prompt.map(() => 0),
      ...renderMessage(reply).map(() => 1),
    ]);
    expect(fromA.usage).toMatchObject({
      prompt_tokens: prompt.length,
      completion_tokens: renderMessage(reply).length,
    });
  });
});

describe("token store", () => {
  it("stages a batch with one file that a store started later still reads", async () => {
    const server = start(path.join(dir, "a"));
    await complete(server, { messages: [USER], ng_capture: text("r", "c1") });
    const raw = await readFile(stagedFilePath(path.join(dir, "a"), "r/c1"), "utf8");
    const record = StagedCallRecordSchema.parse(JSON.parse(raw));

    const batchDir = path.join(dir, "batch");
    await new TokenStore(batchDir).putMany([
      ["cut/r/c1", record],
      ["cut/r/c2", record],
    ]);
    expect((await readdir(batchDir)).filter((name) => !name.endsWith(".tmp"))).toHaveLength(1);

    const restarted = new TokenStore(batchDir);
    expect(await restarted.get("cut/r/c2")).toEqual(record);
    expect(await restarted.prefixOf(["cut/r/c1"])).toEqual(record.token_ids_delta);
    await expect(restarted.get("cut/r/c3")).rejects.toThrow(/no staged record under 'cut\/r\/c3'/);
  });
});

describe("streaming", () => {
  it("sends a keep-alive comment before anything else, even before a hold, then chunks and [DONE]", async () => {
    const server = start();
    const answer = "It is sunny in Paris today.";
    await request(server.app())
      .post("/_ctl/script")
      .send({ default: [{ content: answer }] })
      .expect(200);
    await request(server.app()).post("/_ctl/hold").send({ after_calls: 0 }).expect(200);
    const { url } = await server.listen({ port: 0 });
    const response = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ messages: [USER], stream: true }),
    });
    expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let body = decoder.decode((await reader.read()).value, { stream: true });
    expect(body.startsWith(": keep-alive\n\n")).toBe(true);
    await server.holds.whenBlocked(1);
    await request(server.app()).post("/_ctl/release").expect(200, { released: 1 });
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
      body += decoder.decode(chunk.value, { stream: true });
    }
    const frames = body.split("\n\n").filter((frame) => frame.length > 0);
    expect(frames[0]).toBe(": keep-alive");
    expect(frames.at(-1)).toBe("data: [DONE]");
    const chunks = frames
      .slice(1, -1)
      .map((frame) => JSON.parse(frame.replace(/^data: /, "")) as StreamChunk);
    expect(chunks.every((chunk) => chunk.object === "chat.completion.chunk")).toBe(true);
    expect(chunks[0]?.choices[0]?.delta).toEqual({ role: "assistant", content: "" });
    expect(chunks.map((chunk) => chunk.choices[0]?.delta.content ?? "").join("")).toBe(answer);
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe("stop");
    expect((await calls(server))[0]).toMatchObject({ stream: true, returned: true });
  });

  it("streams tool calls as deltas that add up to the call", async () => {
    const server = start();
    const reply = await request(server.app())
      .post("/v1/chat/completions")
      .send({ messages: [USER], tools: TOOLS, stream: true })
      .buffer(true)
      .parse((res, done) => {
        let raw = "";
        res.on("data", (chunk: Buffer) => (raw += chunk.toString("utf8")));
        res.on("end", () => done(null, raw));
      });
    const frames = (reply.body as string)
      .split("\n\n")
      .filter((frame) => frame.startsWith("data: {"));
    const deltas = frames.flatMap(
      (frame) => (JSON.parse(frame.slice(6)) as StreamChunk).choices[0]?.delta.tool_calls ?? [],
    );
    expect(deltas[0]).toMatchObject({
      index: 0,
      id: "call_0_0",
      function: { name: "get_weather" },
    });
    expect(deltas.map((delta) => delta.function.arguments ?? "").join("")).toBe("{}");
  });

  it("refuses a captured stream with 422: worker-owned capture stages whole responses", async () => {
    const server = start();
    const reply = await request(server.app())
      .post("/v1/chat/completions")
      .send({ messages: [USER], stream: true, ng_capture: text("r", "c1") });
    expect(reply.status).toBe(422);
    expect(reply.body.detail).toMatch(/streaming/);
  });
});

interface StreamChunk {
  object: string;
  choices: {
    delta: {
      role?: string;
      content?: string;
      tool_calls?: {
        index: number;
        id?: string;
        function: { name?: string; arguments?: string };
      }[];
    };
    finish_reason: string | null;
  }[];
}

describe("holds", () => {
  const ANSWER = { default: [{ content: "a b c d e f" }] }; // 7 tokens with the role marker

  it("holds calls from a global index part-way through, each logged on arrival", async () => {
    const server = start();
    await request(server.app()).post("/_ctl/script").send(ANSWER).expect(200);
    await request(server.app()).post("/_ctl/hold").send({ after_calls: 1 }).expect(200);
    expect((await send(server, { messages: [USER] })).status).toBe(200);
    const messages = [USER, { role: "assistant", content: "a" }, USER];
    const held = send(server, { messages }, "r7");
    await server.holds.whenBlocked(1);

    await request(server.app()).get("/_ctl/call_count").expect(200, { count: 2 });
    const log = await calls(server);
    expect(log[0]).toMatchObject({ index: 0, returned: true, held: false });
    expect(log[1]).toEqual({
      index: 1,
      rollout: "r7",
      model_call_id: null,
      n_messages: 3,
      stream: false,
      held: true,
      generated_tokens: 4, // half of 7, rounded up
      returned: false,
      finish_reason: null,
      continued_from: null,
      reused_prefix_tokens: 0,
      capture: null,
      capture_error: null,
    });

    await request(server.app()).post("/_ctl/release").expect(200, { released: 1 });
    expect((await held).body.choices[0].message.content).toBe("a b c d e f");
    expect((await calls(server))[1]).toMatchObject({
      held: false,
      returned: true,
      generated_tokens: 7,
    });
  });

  it("holds each rollout's calls past that rollout's own count", async () => {
    const server = start();
    await request(server.app()).post("/_ctl/hold").send({ after_calls_per_rollout: 1 }).expect(200);
    const body = { messages: [USER] };
    expect((await send(server, body, "a")).status).toBe(200);
    expect((await send(server, body, "b")).status).toBe(200);
    const secondOfA = send(server, body, "a");
    await server.holds.whenBlocked(1);
    const secondOfB = send(server, body, "b");
    await server.holds.whenBlocked(2);
    expect((await calls(server)).map((call) => [call.rollout, call.held])).toEqual([
      ["a", false],
      ["b", false],
      ["a", true],
      ["b", true],
    ]);
    await request(server.app()).post("/_ctl/release").expect(200, { released: 2 });
    expect((await secondOfA).status).toBe(200);
    expect((await secondOfB).status).toBe(200);
  });

  it("keeps the same release event when a hold is placed while one is active", async () => {
    const server = start();
    const body = { messages: [USER] };
    await request(server.app()).post("/_ctl/hold").send({ after_calls: 0 }).expect(200);
    const first = send(server, body, "x");
    await server.holds.whenBlocked(1);
    await request(server.app()).post("/_ctl/hold").send({ after_calls_per_rollout: 0 }).expect(200);
    const second = send(server, body, "y");
    await server.holds.whenBlocked(2);

    // One release frees the calls held under both rules.
    await request(server.app()).post("/_ctl/release").expect(200, { released: 2 });
    expect((await first).status).toBe(200);
    expect((await second).status).toBe(200);
    // Released means lifted: a later call is not held.
    expect((await send(server, body, "z")).status).toBe(200);
  });
});
