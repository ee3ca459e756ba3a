/**
 * The fake inference backend with a rollout ID far longer than a file name may be (rollout IDs
 * have no maximum length): its token store keeps such staging keys under digest names, and its
 * built-in script calls a tool with the tool's required parameters filled in.
 */
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import request from "supertest";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import FakeInferenceServer, {
  stagedFilePath,
} from "../../../reference-servers/fake-inference/src/index.js";
import { exampleArguments } from "../../../reference-servers/fake-inference/src/script.js";
import { TokenStore } from "../../../reference-servers/fake-inference/src/token-store.js";

const LONG = `r${"x".repeat(299)}`;
let dir: string;
const servers: FakeInferenceServer[] = [];

beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), "fake-inference-long-"));
});

afterEach(async () => {
  for (const server of servers.splice(0)) await server.close();
  await rm(dir, { recursive: true, force: true });
});

function start(): FakeInferenceServer {
  const server = new FakeInferenceServer({
    name: "inference",
    config: { token_store_dir: path.join(dir, "tokens"), control_token: "t0ken" },
    logLevel: "silent",
  });
  servers.push(server);
  return server;
}

describe("the token store with a long staging key", () => {
  it("stages and reads back a captured call of a 300-character rollout, under a name that fits", async () => {
    const server = start();
    const reply = await request(server.app())
      .post("/v1/chat/completions")
      .send({
        messages: [{ role: "user", content: "hi" }],
        ng_capture: { rollout_id: LONG, model_call_id: "c1", mode: "text" },
      });
    expect(reply.status, JSON.stringify(reply.body)).toBe(200);
    expect(reply.body.ng_commit_coords).toMatchObject({
      disposition: "staged",
      staging_key: `${LONG}/c1`,
    });
    const names = await readdir(path.join(dir, "tokens"));
    expect(names).toHaveLength(1);
    expect(Buffer.byteLength(names[0] as string)).toBeLessThanOrEqual(255);
    // A store started later (a restarted backend) finds the record.
    const record = await new TokenStore(path.join(dir, "tokens")).get(`${LONG}/c1`);
    expect(record.rollout_id).toBe(LONG);
  });

  it("names short keys as before and long ones apart from each other", () => {
    expect(stagedFilePath("/s", "r/c1")).toBe(path.join("/s", "r%2Fc1.json"));
    const a = stagedFilePath("/s", `${LONG}/c1`);
    const b = stagedFilePath("/s", `${LONG}/c2`);
    expect(path.basename(a)).toMatch(/^~[0-9a-f]{64}\.json$/);
    expect(a).not.toBe(b);
  });
});

describe("the built-in script", () => {
  it("calls the first tool with its required parameters filled in", async () => {
    const server = start();
    const tools = [
      {
        type: "function",
        function: {
          name: "increment_counter",
          parameters: {
            type: "object",
            properties: { count: { type: "integer" }, note: { type: "string" } },
            required: ["count"],
          },
        },
      },
    ];
    const reply = await request(server.app())
      .post("/v1/chat/completions")
      .send({ messages: [{ role: "user", content: "count" }], tools });
    expect(reply.status, JSON.stringify(reply.body)).toBe(200);
    const call = reply.body.choices[0].message.tool_calls[0];
    expect(call.function.name).toBe("increment_counter");
    expect(JSON.parse(call.function.arguments)).toEqual({ count: 1 });
  });

  it("fills each JSON Schema type, and nothing for a tool without required parameters", () => {
    expect(
      exampleArguments({
        properties: {
          i: { type: "integer" },
          n: { type: "number" },
          s: { type: "string" },
          b: { type: "boolean" },
          a: { type: "array" },
          o: { type: "object" },
          u: {},
        },
        required: ["i", "n", "s", "b", "a", "o", "u", 7],
      }),
    ).toEqual({ i: 1, n: 1, s: "x", b: true, a: [], o: {}, u: null });
    expect(exampleArguments({ type: "object", properties: {} })).toEqual({});
    expect(exampleArguments(undefined)).toEqual({});
  });
});
