/**
 * Every invalid `POST /v1/responses` is refused by the policy model server itself with 422
 * `invalid_request` naming the field at fault, before the backend sees it and before a gate
 * admits it: never a 500, never the backend's refusal relayed as a 502. And the ledger control
 * routes check their bearer before reading the body.
 */
import fc from "fast-check";
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import { MAX_OUTPUT_TOKENS_LIMIT } from "#sdk/server/model/responses-request.js";
import {
  CAPTURE_TOKEN,
  LEDGER,
  cleanup,
  fakeCalls,
  firstInput,
  ledgerControl,
  respond,
  startFake,
  startPolicy,
  tempDir,
  type Fake,
  type Policy,
} from "../../support/policy-harness.js";

afterEach(cleanup);

async function setup(): Promise<{ fake: Fake; policy: Policy }> {
  const fake = await startFake();
  const policy = await startPolicy(fake, { captureDir: await tempDir() });
  return { fake, policy };
}

/** Sends `text` as the raw JSON body of a call (so lone surrogates travel as `\ud800`). */
function respondRaw(url: string, key: string | null, text: string) {
  const path = key === null ? "/v1/responses" : `/ng-rollout/${key}/v1/responses`;
  return request(url).post(path).set("content-type", "application/json").send(text);
}

/** Asserts a 422 `invalid_request` with an issue at `path`. */
function expectRefused(res: request.Response, path: (string | number)[]): void {
  expect(res.status, JSON.stringify(res.body)).toBe(422);
  expect(res.body.error.code).toBe("invalid_request");
  expect(res.body.error.issues.map((issue: { path: unknown }) => issue.path)).toContainEqual(path);
}

const user = (content: unknown) => ({ type: "message", role: "user", content });

describe("POST /v1/responses refuses invalid requests with 422", () => {
  it.each([
    ["max_output_tokens 0", { max_output_tokens: 0 }, ["max_output_tokens"]],
    ["max_output_tokens -1", { max_output_tokens: -1 }, ["max_output_tokens"]],
    ["max_output_tokens 1.5", { max_output_tokens: 1.5 }, ["max_output_tokens"]],
    ['max_output_tokens ""', { max_output_tokens: "" }, ["max_output_tokens"]],
    ["max_output_tokens 1e30", { max_output_tokens: 1e30 }, ["max_output_tokens"]],
    ["max_output_tokens 2^53", { max_output_tokens: 2 ** 53 }, ["max_output_tokens"]],
    ["max_output_tokens above int32", { max_output_tokens: 2 ** 31 }, ["max_output_tokens"]],
    ["temperature as text", { temperature: "hot" }, ["temperature"]],
    ["temperature above 2", { temperature: 2.5 }, ["temperature"]],
    ["top_p above 1", { top_p: 1.01 }, ["top_p"]],
    ["top_p negative", { top_p: -0.1 }, ["top_p"]],
    ["seed 0.5", { seed: 0.5 }, ["seed"]],
    ["stop as a number", { stop: 5 }, ["stop"]],
    ["instructions as a number", { instructions: 5 }, ["instructions"]],
    ["an empty input list", { input: [] }, ["input"]],
    ["a number item", { input: [1] }, ["input", 0]],
    ["a null item", { input: [user("hi"), null] }, ["input", 1]],
    ["an item with neither type nor role", { input: [{ content: "hi" }] }, ["input", 0]],
    ["a numeric role", { input: [{ role: 5, content: "x" }] }, ["input", 0, "role"]],
    ["an unknown role", { input: [{ role: "wizard", content: "x" }] }, ["input", 0, "role"]],
    ["object content", { input: [user({ a: 1 })] }, ["input", 0, "content"]],
    ["content parts of numbers", { input: [user([1, null])] }, ["input", 0, "content"]],
    [
      "a part with neither type nor text",
      { input: [user([{ image: 1 }])] },
      ["input", 0, "content", 0],
    ],
    [
      "a function_call without a name",
      { input: [user("x"), { type: "function_call", arguments: "{}", call_id: "c" }] },
      ["input", 1, "name"],
    ],
    [
      "function_call arguments as an object",
      { input: [{ type: "function_call", name: "f", arguments: { a: 1 }, call_id: "c" }] },
      ["input", 0, "arguments"],
    ],
    [
      "a function_call_output without a call_id",
      { input: [{ type: "function_call_output", output: "x" }] },
      ["input", 0, "call_id"],
    ],
    ["a non-object tool", { tools: [1] }, ["tools", 0]],
    ["a function tool without a name", { tools: [{ type: "function" }] }, ["tools", 0, "name"]],
    ["only items a chat backend does not take", { input: [{ type: "reasoning" }] }, ["input"]],
  ])("%s", async (_name, fields, path) => {
    const { fake, policy } = await setup();
    for (const key of [null, "r"]) {
      const res = await respond(policy.url, key, { input: firstInput(), ...fields });
      expectRefused(res, path as (string | number)[]);
    }
    expect(await fakeCalls(fake)).toEqual([]);
  });

  it.each([
    ["input as text", '{"input":"\\ud800"}', ["input"]],
    [
      "message content",
      '{"input":[{"role":"user","content":"a\\udc00b"}]}',
      ["input", 0, "content"],
    ],
    [
      "a content part",
      '{"input":[{"role":"user","content":[{"type":"input_text","text":"\\ud800"}]}]}',
      ["input", 0, "content", 0, "text"],
    ],
    ["instructions", '{"input":"hi","instructions":"\\ud800"}', ["instructions"]],
    ["an unknown field's key", '{"input":"hi","\\ud800":1}', ["\ud800"]],
  ])("a lone surrogate in %s, captured or not, streamed or not", async (_name, text, path) => {
    const { fake, policy } = await setup();
    for (const key of [null, "r"]) {
      expectRefused(await respondRaw(policy.url, key, text), path as (string | number)[]);
    }
    const streamed = text.replace(/^\{/, '{"stream":true,');
    expectRefused(await respondRaw(policy.url, null, streamed), path as (string | number)[]);
    expect(await fakeCalls(fake)).toEqual([]);
  });

  it.each(["assistant", "system"])(
    "refuses a captured call whose tool arguments decode to a lone surrogate (role %s), before the backend",
    async (role) => {
      const { fake, policy } = await setup();
      const call = {
        type: "function_call",
        role,
        name: "f",
        arguments: '{"a":"\\ud800"}',
        call_id: "c",
      };
      const input = [user("hi"), call];
      const captured = await respond(policy.url, "r", { input });
      expectRefused(captured, ["input"]);
      expect(await fakeCalls(fake)).toEqual([]);
      // Uncaptured, the arguments are only text for the backend.
      expect((await respond(policy.url, null, { input })).status).toBe(200);
    },
  );

  it("accepts the extremes of the ranges and passes max_output_tokens on as max_tokens", async () => {
    const { fake, policy } = await setup();
    for (const fields of [
      { max_output_tokens: 1, temperature: 0, top_p: 0 },
      { max_output_tokens: MAX_OUTPUT_TOKENS_LIMIT, temperature: 2, top_p: 1 },
      { max_output_tokens: null, temperature: null, top_p: null, seed: -3 },
    ]) {
      const res = await respond(policy.url, "r", { input: firstInput(), ...fields });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
    }
    const budgeted = await respond(policy.url, null, { input: "hi", max_output_tokens: 1 });
    expect(budgeted.body).toMatchObject({ status: "incomplete", usage: { output_tokens: 1 } });
    expect(await fakeCalls(fake)).toHaveLength(4);
  });

  it("answers a function_call_output whose output is any JSON list, and sends the backend its text", async () => {
    const { fake, policy } = await setup();
    const input = [
      user("Weather?"),
      { type: "function_call", name: "get_weather", arguments: "{}", call_id: "c1" },
      {
        type: "function_call_output",
        call_id: "c1",
        output: [null, 1.5, "sunny", { type: "input_image" }],
      },
    ];
    for (const key of [null, "r"]) {
      const res = await respond(policy.url, key, { input });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
    }
    expect((await fakeCalls(fake)).map((call) => call.n_messages)).toEqual([3, 3]);
  });

  it("answers any JSON input items with a 2xx or a 4xx, never a 5xx", async () => {
    const { policy } = await setup();
    const item = fc.oneof(
      fc.jsonValue({ maxDepth: 3 }),
      fc.record(
        {
          type: fc.oneof(
            fc.constantFrom("message", "function_call", "function_call_output"),
            fc.jsonValue({ maxDepth: 1 }),
          ),
          role: fc.oneof(
            fc.constantFrom("user", "assistant", "system"),
            fc.jsonValue({ maxDepth: 1 }),
          ),
          content: fc.oneof(
            fc.string(),
            fc.array(fc.jsonValue({ maxDepth: 2 })),
            fc.jsonValue({ maxDepth: 2 }),
          ),
          name: fc.jsonValue({ maxDepth: 1 }),
          arguments: fc.jsonValue({ maxDepth: 1 }),
          call_id: fc.jsonValue({ maxDepth: 1 }),
          output: fc.jsonValue({ maxDepth: 2 }),
        },
        { requiredKeys: [] },
      ),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.array(item, { maxLength: 4 }),
        fc.constantFrom(null, "r"),
        async (items, key) => {
          const res = await respond(policy.url, key, { input: items });
          expect(res.status, JSON.stringify(res.body)).toBeLessThan(500);
        },
      ),
      { numRuns: 60 },
    );
  });
});

describe("the ledger control routes", () => {
  it("check the bearer before reading the body: an unauthenticated bad body is 401, not 422", async () => {
    const { policy } = await setup();
    for (const auth of [null, "Bearer wrong", `Bearer ${CAPTURE_TOKEN}x`]) {
      for (const body of [{ rollout_ids: [] }, { nope: 1 }]) {
        const res = await ledgerControl(policy.url, "post", "/rollouts/retire", body, auth);
        expect(res.status, JSON.stringify(res.body)).toBe(401);
        expect(typeof res.body.detail).toBe("string");
      }
      const req = request(policy.url)
        .post(`${LEDGER}/rollouts/delete`)
        .set("content-type", "application/json");
      if (auth !== null) req.set("Authorization", auth);
      expect((await req.send("{not json")).status).toBe(401);
    }
    const invalid = await ledgerControl(policy.url, "post", "/rollouts/retire", {
      rollout_ids: [],
    });
    expect(invalid.status).toBe(422);
  });
});
