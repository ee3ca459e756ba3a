/**
 * The fake inference backend as a capturing worker: `ng_capture` in text then `token_in` mode,
 * refused lineage, generation cuts of held calls and their continuation from the durable token
 * store (by a fresh backend process on the same directory), and the cut route's bearer.
 */
import { access, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import request from "supertest";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import FakeInferenceServer, {
  renderPrompt,
  stagedFilePath,
} from "../../../reference-servers/fake-inference/src/index.js";
import { TokenStore } from "../../../reference-servers/fake-inference/src/token-store.js";
import { chainHash, hashTokenIds } from "#sdk/capture/digests.js";
import {
  GenerationCutReceiptSchema,
  buildGenerationCutInventory,
  validateReceiptFor,
  type GenerationCutPrefix,
} from "#sdk/capture/generation-cut.js";
import { CommitCoordsSchema, StagedCallRecordSchema } from "#sdk/capture/records.js";

const TOKEN = "t0ken";
const CUT_ROUTE = "/ng-control/v1/generation-cut";

let dir: string;
let store: string;
let servers: FakeInferenceServer[];

beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), "fake-inference-"));
  store = path.join(dir, "tokens");
  servers = [];
});

afterEach(async () => {
  for (const server of servers) {
    server.holds.release();
    await server.close();
  }
  await rm(dir, { recursive: true, force: true });
});

/** A backend on the shared token store; a second one stands for a restarted process. */
function start(): FakeInferenceServer {
  const server = new FakeInferenceServer({
    name: "inference",
    config: { token_store_dir: store, control_token: TOKEN },
    logLevel: "silent",
  });
  servers.push(server);
  return server;
}

type Message = Record<string, unknown> & { role: string };

const USER: Message = { role: "user", content: "What is the weather in Paris?" };
const SCRIPT = {
  default: [
    { tool_calls: [{ name: "get_weather", arguments: { city: "Paris" } }] },
    { content: "It is sunny and mild in Paris today, with a light breeze." },
  ],
};

async function scripted(server: FakeInferenceServer): Promise<FakeInferenceServer> {
  await request(server.app()).post("/_ctl/script").send(SCRIPT).expect(200);
  return server;
}

interface Completion {
  choices: { message: Message; finish_reason: string }[];
  ng_commit_coords: Record<string, unknown>;
}

function send(server: FakeInferenceServer, body: Record<string, unknown>) {
  return request(server.app())
    .post("/v1/chat/completions")
    .send(body)
    .then((reply) => {
      expect(reply.status, JSON.stringify(reply.body)).toBe(200);
      return reply.body as Completion;
    });
}

/** A staged record as a backend started now would read it (a file of its own or a batch's). */
async function staged(key: string) {
  return StagedCallRecordSchema.parse(await new TokenStore(store).get(key));
}

async function callLog(server: FakeInferenceServer) {
  return (await request(server.app()).get("/_ctl/calls")).body.calls as Record<string, unknown>[];
}

function text(rollout: string, call: string) {
  return { rollout_id: rollout, model_call_id: call, mode: "text" };
}

function childOf(coords: Record<string, unknown>, call: string) {
  return {
    rollout_id: coords.rollout_id,
    model_call_id: call,
    mode: "token_in",
    parent_call_id: coords.model_call_id,
    prev_len: coords.cum_len,
    staging_chain: [coords.staging_key],
    parent_chain_hash: coords.chain_hash,
  };
}

describe("token capture", () => {
  it("stages a text root, then a token_in child on the parent's exact tokens", async () => {
    const server = await scripted(start());
    const first = await send(server, { messages: [USER], ng_capture: text("r", "c1") });
    const parent = CommitCoordsSchema.parse(first.ng_commit_coords);
    const prompt1 = renderPrompt([USER]);
    expect(parent).toMatchObject({
      rollout_id: "r",
      model_call_id: "c1",
      parent_call_id: null,
      prev_len: 0,
      disposition: "staged",
      staging_key: "r/c1",
    });
    const record1 = await staged("r/c1");
    expect(record1.digest).toBe(parent.digest);
    expect(record1.delta_len).toBe(parent.delta_len);
    expect(record1.token_ids_delta.slice(0, prompt1.length)).toEqual(prompt1);

    // The agent echoes the reply and adds the tool result: the child extends the parent.
    const messages = [
      USER,
      first.choices[0]?.message as Message,
      { role: "tool", tool_call_id: "call_0_0", content: "sunny" },
    ];
    const second = await send(server, { messages, ng_capture: childOf(parent, "c2") });
    const child = CommitCoordsSchema.parse(second.ng_commit_coords);
    expect(child).toMatchObject({
      model_call_id: "c2",
      parent_call_id: "c1",
      prev_len: parent.cum_len,
      disposition: "staged",
      staging_key: "r/c2",
    });
    const record2 = await staged("r/c2");
    expect(record2.digest).toBe(child.digest);
    expect(record2.mode).toBe("token_in");
    const prompt2 = renderPrompt(messages);
    expect(prompt2.slice(0, parent.cum_len)).toEqual(record1.token_ids_delta);
    expect(record2.token_ids_delta.slice(0, prompt2.length - parent.cum_len)).toEqual(
      prompt2.slice(parent.cum_len),
    );
    expect(child.chain_hash).toBe(chainHash(parent.chain_hash, record2.token_ids_delta));
    expect(child.cumulative_hash).toBe(
      hashTokenIds(record1.token_ids_delta, record2.token_ids_delta),
    );
    expect((await callLog(server)).map((call) => call.capture)).toEqual(["staged", "staged"]);
  });

  it("answers capture_failed coordinates (HTTP 200) when a token_in prompt does not extend its parent", async () => {
    const server = await scripted(start());
    const first = await send(server, { messages: [USER], ng_capture: text("r", "c1") });
    const parent = CommitCoordsSchema.parse(first.ng_commit_coords);
    // Not what the model said: the rendering differs from the parent's generated tokens.
    const rewritten = { role: "assistant", content: "I will look it up." };
    const messages = [USER, rewritten, { role: "user", content: "Well?" }];
    const second = await send(server, { messages, ng_capture: childOf(parent, "c2") });
    expect(second.choices[0]?.message.content).toBe(SCRIPT.default[1]?.content);
    expect(CommitCoordsSchema.parse(second.ng_commit_coords)).toMatchObject({
      model_call_id: "c2",
      disposition: "capture_failed",
      delta_len: 0,
      cum_len: parent.cum_len,
      staging_key: null,
    });
    await expect(access(stagedFilePath(store, "r/c2"))).rejects.toThrow();

    // A chain naming tokens the store never staged fails the same way.
    const missing = { ...childOf(parent, "c3"), staging_chain: ["r/never-staged"] };
    const third = await send(server, { messages: [USER], ng_capture: missing });
    expect(third.ng_commit_coords.disposition).toBe("capture_failed");
    const log = await callLog(server);
    expect(log.map((call) => call.capture_error)).toEqual([
      null,
      "prompt_mismatch",
      "token_store_miss",
    ]);
  });
});

function prefix(call: string, ticket: string): GenerationCutPrefix {
  return { ticket_id: ticket, rollout_id: "r", attempt: 0, model_call_id: call, admitted_at: 1.5 };
}

function inventory(prefixes: GenerationCutPrefix[]) {
  return buildGenerationCutInventory({
    checkpoint_id: "ckpt-1",
    server_name: "policy",
    active_prefixes: prefixes,
  });
}

describe("generation cuts", () => {
  it("cuts a held call into a durable prefix that a restarted backend continues", async () => {
    const original = await scripted(start());
    const messages = [
      USER,
      {
        role: "assistant",
        content: null,
        tool_calls: [
          {
            id: "call_0_0",
            type: "function",
            function: { name: "get_weather", arguments: '{"city":"Paris"}' },
          },
        ],
      },
      { role: "tool", tool_call_id: "call_0_0", content: "sunny" },
    ];
    await request(original.app()).post("/_ctl/hold").send({ after_calls: 0 }).expect(200);
    const uncut = send(original, { messages, ng_capture: text("r", "c1") });
    await original.holds.whenBlocked(1);

    const sent = inventory([prefix("c1", "t1"), prefix("no-such-call", "t2")]);
    const reply = await request(original.app())
      .post(CUT_ROUTE)
      .set("authorization", `Bearer ${TOKEN}`)
      .send(sent)
      .expect(200);
    const receipt = GenerationCutReceiptSchema.parse(reply.body);
    validateReceiptFor(receipt, sent);
    const [ack, unknown] = receipt.prefixes;
    expect(unknown).toMatchObject({ ticket_id: "t2", disposition: "durable_failure" });
    expect(ack).toMatchObject({
      ticket_id: "t1",
      disposition: "durable_prefix",
      cut_kind: "active_prefix",
      staging_keys: ["__generation_cut__/r/c1"],
      effective_output_limit: 256,
      terminal_finish_reason: null,
    });
    const held = (await callLog(original))[0] as { generated_tokens: number };
    expect(ack?.prefix_token_count).toBe(held.generated_tokens);
    expect(held.generated_tokens).toBeGreaterThan(0);

    // The staged prefix validates (digest recomputed) and is the one the ack names.
    const cutRecord = await staged("__generation_cut__/r/c1");
    expect(cutRecord.digest).toBe(ack?.prefix_digest);
    expect(cutRecord.token_mask_delta.filter((mask) => mask === 1)).toHaveLength(
      held.generated_tokens,
    );
    await request(original.app())
      .get("/_ctl/cuts")
      .expect(200, { cuts: [["c1"]] });

    // The cut call is still held; released, it answers in full.
    expect(original.holds.blocked).toBe(1);
    expect((await callLog(original))[0]).toMatchObject({ held: true, returned: false });
    await request(original.app()).post("/_ctl/release").expect(200, { released: 1 });
    const full = await uncut;
    const whole = await staged("r/c1");

    // A fresh backend on the same store continues attempt 1 from the cut.
    const restarted = await scripted(start());
    const continuation = {
      source_capture_key: "r",
      source_model_call_id: "c1",
      staging_keys: ack?.staging_keys,
      prefix_token_count: ack?.prefix_token_count,
      prefix_digest: ack?.prefix_digest,
      effective_output_limit: ack?.effective_output_limit,
    };
    const resumed = await send(restarted, {
      messages,
      ng_capture: { ...text("r-a1", "c1-a1"), generation_cut: continuation },
    });
    expect(resumed.choices[0]?.message).toEqual(full.choices[0]?.message);
    expect(resumed.choices[0]?.finish_reason).toBe(full.choices[0]?.finish_reason);
    const [call] = await callLog(restarted);
    expect(call).toMatchObject({
      continued_from: "c1",
      reused_prefix_tokens: held.generated_tokens,
      generated_tokens: whole.delta_len - renderPrompt(messages).length - held.generated_tokens,
      capture: "staged",
    });
    // The continued call's tokens are exactly the uncut call's.
    const continued = await staged("r-a1/c1-a1");
    expect(continued.token_ids_delta).toEqual(whole.token_ids_delta);
    expect(continued.token_mask_delta).toEqual(whole.token_mask_delta);
  });

  it("acks a durable failure for calls it cannot cut, and logs an empty round", async () => {
    const server = await scripted(start());
    await send(server, { messages: [USER], ng_capture: text("r", "done-call") });
    const uncaptured = await send(server, { messages: [USER] });
    expect(uncaptured.ng_commit_coords).toBeUndefined();
    const sent = inventory([prefix("done-call", "t1"), prefix("ghost", "t2")]);
    const reply = await request(server.app())
      .post(CUT_ROUTE)
      .set("authorization", `Bearer ${TOKEN}`)
      .send(sent)
      .expect(200);
    const receipt = GenerationCutReceiptSchema.parse(reply.body);
    validateReceiptFor(receipt, sent);
    expect(receipt.prefixes.map((ack) => ack.disposition)).toEqual([
      "durable_failure",
      "durable_failure",
    ]);
    await request(server.app())
      .get("/_ctl/cuts")
      .expect(200, { cuts: [[]] });
  });

  it("refuses a cut request without the bearer token, and an inventory no receipt can answer", async () => {
    const server = start();
    const sent = inventory([prefix("c1", "t1")]);
    const missing = await request(server.app()).post(CUT_ROUTE).send(sent);
    expect(missing.status).toBe(401);
    expect(missing.body.error.code).toBe("unauthorized");
    const wrong = await request(server.app())
      .post(CUT_ROUTE)
      .set("authorization", "Bearer nope")
      .send(sent);
    expect(wrong.status).toBe(401);
    const forged = await request(server.app())
      .post(CUT_ROUTE)
      .set("authorization", `Bearer ${TOKEN}`)
      .send({ ...sent, server_name: "someone-else" });
    expect(forged.status).toBe(422);
    expect(forged.body.error.code).toBe("invalid_request");
    const twice = inventory([prefix("c1", "t1"), prefix("c2", "t1")]);
    const duplicate = await request(server.app())
      .post(CUT_ROUTE)
      .set("authorization", `Bearer ${TOKEN}`)
      .send(twice);
    expect(duplicate.status).toBe(422);
    await request(server.app()).get("/_ctl/cuts").expect(200, { cuts: [] });
  });
});
