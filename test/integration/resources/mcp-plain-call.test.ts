/**
 * The plain-call path of `/mcp` (mcp-plain-call.ts) answers byte for byte what the MCP SDK's
 * server and transport answer: the same tools served twice, once with the path and once with
 * every request sent through the SDK, and each reply compared whole (status, content type,
 * length, body). Each case also says whether the path answers it, checked by counting the SDK
 * servers connected, so the comparison is never between two SDK answers only.
 */
import { Server } from "@modelcontextprotocol/server";
import express from "express";
import { pino } from "pino";
import request from "supertest";
import { afterEach, describe, expect, it, vi } from "vitest";
import { z } from "zod";
import { DetailError, InvalidRequestError } from "#sdk/errors.js";
import { dataRoute, type DataRoute } from "#sdk/server/data-route.js";
import { mcpRoutes, mcpTools } from "#sdk/server/resources/mcp-endpoint.js";
import {
  MCP_SESSION_TOKEN_HEADER,
  McpSessionTokens,
} from "#sdk/server/resources/mcp-session-token.js";

const tokens = new McpSessionTokens(Buffer.alloc(32, 7));
const everyTool = tokens.mint({ sessionId: "s", episode: null, tools: null });
const echoOnly = tokens.mint({ sessionId: "s", episode: null, tools: ["echo"] });

const routes: DataRoute[] = [
  dataRoute({
    method: "post",
    path: "/echo",
    summary: "Echo a value",
    request: z.strictObject({ value: z.unknown().optional(), label: z.string().default("x") }),
    handler: ({ body }) => body.value,
  }),
  dataRoute({
    method: "post",
    path: "/refuse",
    summary: "Refuse with a typed error or a detail",
    request: z.strictObject({ typed: z.boolean() }),
    handler: ({ body }) => {
      if (body.typed) throw new InvalidRequestError("refused: try another value");
      throw new DetailError(409, "refused with a detail");
    },
  }),
  dataRoute({
    method: "post",
    path: "/boom",
    summary: "Fail with a bug",
    handler: () => {
      throw new Error("a bug");
    },
  }),
];

/** An app serving `/mcp` over `routes`, with the plain-call path on or off. */
function app(plainCalls: boolean): express.Express {
  const [post] = mcpRoutes({
    serverName: "plain",
    version: "1.0.0",
    tools: mcpTools(routes),
    tokens,
    errors: [],
    logger: pino({ level: "silent" }),
    plainCalls,
  });
  const served = express();
  served.use(express.json());
  served.post("/mcp", (req, res, next) => {
    const controller = new AbortController();
    Promise.resolve(
      post!.handler({ body: req.body, rollout: null, signal: controller.signal, req, res }),
    ).catch(next);
  });
  return served;
}

const headers = {
  accept: "application/json, text/event-stream",
  "mcp-protocol-version": "2025-06-18",
  [MCP_SESSION_TOKEN_HEADER]: everyTool,
};
const call = (params: unknown, id: unknown = 1) => ({
  jsonrpc: "2.0",
  id,
  method: "tools/call",
  params,
});

interface Case {
  readonly name: string;
  readonly body: unknown;
  readonly headers?: Record<string, string | undefined>;
  /** Whether the plain-call path answers it (else the SDK does, on both apps). */
  readonly plain: boolean;
}

const cases: Case[] = [
  {
    name: "an object result",
    body: call({ name: "echo", arguments: { value: { a: [1, "é"] } } }),
    plain: true,
  },
  {
    name: "an array result",
    body: call({ name: "echo", arguments: { value: [1, { b: null }] } }),
    plain: true,
  },
  {
    name: "a string result",
    body: call({ name: "echo", arguments: { value: 'line\n"two"' } }),
    plain: true,
  },
  { name: "a null result", body: call({ name: "echo", arguments: { value: null } }), plain: true },
  { name: "no result", body: call({ name: "echo", arguments: {} }), plain: true },
  { name: "no arguments", body: call({ name: "echo" }), plain: true },
  {
    name: "a string id",
    body: call({ name: "echo", arguments: { value: 2 } }, "call-7"),
    plain: true,
  },
  {
    name: "a typed refusal",
    body: call({ name: "refuse", arguments: { typed: true } }),
    plain: true,
  },
  {
    name: "a detail refusal",
    body: call({ name: "refuse", arguments: { typed: false } }),
    plain: true,
  },
  {
    name: "arguments the schema refuses",
    body: call({ name: "echo", arguments: { nope: 1 } }),
    plain: true,
  },
  { name: "a bug in the tool", body: call({ name: "boom", arguments: {} }), plain: true },
  {
    name: "no protocol-version header",
    body: call({ name: "echo", arguments: { value: 3 } }),
    headers: { "mcp-protocol-version": undefined },
    plain: true,
  },
  {
    name: "an older revision",
    body: call({ name: "echo", arguments: { value: 3 } }),
    headers: { "mcp-protocol-version": "2025-03-26" },
    plain: true,
  },
  // Left to the SDK: the answers are its own on both apps.
  { name: "an unknown tool", body: call({ name: "nope", arguments: {} }), plain: false },
  {
    name: "a tool the token does not allow",
    body: call({ name: "refuse", arguments: { typed: true } }),
    headers: { [MCP_SESSION_TOKEN_HEADER]: echoOnly },
    plain: false,
  },
  {
    name: "no token",
    body: call({ name: "echo", arguments: {} }),
    headers: { [MCP_SESSION_TOKEN_HEADER]: undefined },
    plain: false,
  },
  {
    name: "params with _meta",
    body: call({ name: "echo", arguments: {}, _meta: { progressToken: 1 } }),
    plain: false,
  },
  { name: "a fractional id", body: call({ name: "echo", arguments: {} }, 1.5), plain: false },
  {
    name: "arguments that are no object",
    body: call({ name: "echo", arguments: [1] }),
    plain: false,
  },
  { name: "a batch", body: [call({ name: "echo", arguments: {} })], plain: false },
  {
    name: "an unsupported revision",
    body: call({ name: "echo", arguments: {} }),
    headers: { "mcp-protocol-version": "1999-01-01" },
    plain: false,
  },
  {
    name: "an Accept without SSE",
    body: call({ name: "echo", arguments: {} }),
    headers: { accept: "application/json" },
    plain: false,
  },
];

async function answer(served: express.Express, one: Case) {
  let req = request(served).post("/mcp").type("application/json");
  for (const [key, value] of Object.entries({ ...headers, ...one.headers })) {
    if (value !== undefined) req = req.set(key, value);
  }
  const res = await req.send(JSON.stringify(one.body));
  return {
    status: res.status,
    type: res.headers["content-type"] as unknown,
    length: res.headers["content-length"] as unknown,
    body: res.text,
  };
}

describe("the plain-call path of /mcp", () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it.each(cases)("answers $name as the SDK does", async (one) => {
    const connected = vi.spyOn(Server.prototype, "connect");
    const sdk = await answer(app(false), one);
    const bySdk = connected.mock.calls.length;
    connected.mockClear();
    const fast = await answer(app(true), one);
    // A plain call connects no protocol server; anything else is served as without the path.
    if (one.plain) expect([bySdk, connected.mock.calls.length]).toEqual([1, 0]);
    else expect(connected).toHaveBeenCalledTimes(bySdk);
    expect(fast).toEqual(sdk);
  });

  it("answers a plain call with the tool's result, not an error", async () => {
    const one = cases[0]!;
    const reply = await answer(app(true), one);
    expect(reply.status).toBe(200);
    expect(JSON.parse(reply.body)).toEqual({
      jsonrpc: "2.0",
      id: 1,
      result: {
        content: [{ type: "text", text: '{"a":[1,"é"]}' }],
        structuredContent: { a: [1, "é"] },
      },
    });
  });
});
