/**
 * `/mcp` on a resources server (docs/mcp.md): tool routes as MCP tools, session tokens handed
 * out by `/seed_session`, and MCP calls checkpointed like any request, through a real listener,
 * the MCP SDK's client and the real control routes. Synchronisation is by gates and bounded
 * polls.
 */
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { readFile } from "node:fs/promises";
import path from "node:path";
import type { Express } from "express";
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { McpToolError } from "#sdk/errors.js";
import { dataRoute } from "#sdk/server/data-route.js";
import type { SeedInput, VerifyInput } from "#sdk/server/resources-server.js";
import { MCP_SESSION_TOKEN_HEADER } from "#sdk/server/resources/mcp-session-token.js";
import { encodeSessionCookie } from "#sdk/server/resources/session-cookie.js";
import { SessionStateServer } from "#sdk/server/resources/session-state-server.js";
import { SessionSecret } from "#sdk/server/session-secret.js";
import { deferred, type Deferred } from "#sdk/util/deferred.js";
import { CONTROL, controlRoutes } from "../../support/control-routes.js";
import { makeTempDir, removeTempDir } from "../../support/test-participant.js";

const TOKEN = "mcp-test-token";
const on = { enabled: true, control_auth_token: TOKEN };
const silent = { logLevel: "silent" } as const;
const mcpOn = { expose_tools_over_mcp: true };
const poll = { timeout: 5000, interval: 5 };
const soon = (): number => Date.now() / 1000 + 0.2;
const { control } = controlRoutes(TOKEN);

const AddSchema = z.strictObject({ amount: z.int() });

/** A tally per session; `/add` can park on a gate; the seed may restrict the session's tools. */
class Tally extends SessionStateServer<{ count: number }> {
  protected override readonly stateSchema = z.strictObject({ count: z.int() });
  override readonly seedRequest = z.looseObject({
    start: z.int().default(0),
    allowed: z.array(z.string()).optional(),
  });
  /** `tools/call` POSTs that reached the server, admitted or not. */
  callsReceived = 0;
  #gate: { gate: Deferred<void>; entered: Deferred<void> } | null = null;

  /** Parks the next `/add` until released. */
  hold(): { entered: Promise<void>; release(): void } {
    const entry = { gate: deferred<void>(), entered: deferred<void>() };
    this.#gate = entry;
    return {
      entered: entry.entered.promise,
      release: () => {
        this.#gate = null;
        entry.gate.resolve();
      },
    };
  }

  protected override initialState({ body }: SeedInput<this>) {
    return { count: body.start };
  }

  protected override mcpAllowedTools({ body }: SeedInput<this>) {
    return body.allowed ?? null;
  }

  protected override installKindMiddleware(app: Express): void {
    // Counted before the session layer and the checkpoint middleware: a call that waits counts.
    app.use((req, _res, next) => {
      const body = req.body as { method?: unknown } | undefined;
      if (req.path === "/mcp" && body?.method === "tools/call") this.callsReceived += 1;
      next();
    });
    super.installKindMiddleware(app);
  }

  protected override tools() {
    return [
      this.stateTool({
        path: "/add",
        summary: "Add an amount to this session's count",
        request: AddSchema,
        reply: z.strictObject({ count: z.int().nullable() }),
        handler: async ({ body, state, setState }) => {
          const gate = this.#gate;
          if (gate !== null) {
            gate.entered.resolve();
            await gate.gate.promise;
          }
          if (state === undefined) return { count: null };
          setState({ count: state.count + body.amount });
          return { count: state.count + body.amount };
        },
      }),
      this.stateTool({
        path: "/read",
        summary: "Read this session's count",
        handler: ({ state }) => ({ count: state?.count ?? null }),
      }),
      // Not tools: a GET, a reserved name, a route kept off MCP.
      dataRoute({ method: "get", path: "/peek", summary: "Peek", handler: () => ({}) }),
      dataRoute({
        method: "post",
        path: "/sandbox_access",
        summary: "Sandbox",
        handler: () => ({}),
      }),
      dataRoute({
        method: "post",
        path: "/admin",
        summary: "Admin",
        mcp: false,
        handler: () => ({}),
      }),
    ];
  }

  protected override verify(_input: VerifyInput<this>) {
    return { reward: 1 };
  }
}

const started: Tally[] = [];
const clients: Client[] = [];
const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
  await Promise.all(started.splice(0).map((s) => s.close()));
  await Promise.all(dirs.splice(0).map((d) => removeTempDir(d)));
});

async function serve(options: { checkpoint?: boolean; mcp?: boolean } = {}) {
  const server = new Tally({
    name: "t",
    config: options.mcp === false ? {} : mcpOn,
    ...(options.checkpoint === false ? { sessionSecret: "a-test-secret" } : { checkpoint: on }),
    ...silent,
  });
  started.push(server);
  const { url } = await server.listen({ port: 0 });
  return { server, url };
}

/** The cookie a client of session `id` sends (key from the control token, as the server's). */
function cookie(id: string): string {
  const key = SessionSecret.fromControlToken(TOKEN).keyFor("Tally___t");
  return `Tally___t=${encodeSessionCookie(id, key)}`;
}

/** Seeds session `id` under `key`'s prefix; returns the MCP token the reply hands out. */
async function seed(url: string, key: string, id: string, body: object = {}): Promise<string> {
  const res = await request(url)
    .post(`/ng-rollout/${key}/seed_session`)
    .set("Cookie", cookie(id))
    .send(body)
    .expect(200);
  return (res.body as { mcp: { headers: Record<string, string> } }).mcp.headers[
    MCP_SESSION_TOKEN_HEADER
  ] as string;
}

/** An MCP SDK client of `/mcp`, speaking `era`'s protocol, sending `token` when given. */
async function connect(
  url: string,
  token: string | null,
  era: "2025" | "2026" = "2026",
): Promise<Client> {
  const client = new Client(
    { name: "mcp-test", version: "1.0.0" },
    { versionNegotiation: { mode: era === "2026" ? { pin: "2026-07-28" } : "legacy" } },
  );
  const headers: Record<string, string> =
    token === null ? {} : { [MCP_SESSION_TOKEN_HEADER]: token };
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${url}/mcp`), { requestInit: { headers } }),
  );
  clients.push(client);
  return client;
}

/** One raw 2025-era JSON-RPC POST to `/mcp` (no MCP session: the endpoint is stateless). */
async function rpc(url: string, token: string | null, method: string, params: object) {
  const res = await fetch(`${url}/mcp`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": "2025-06-18",
      ...(token === null ? {} : { [MCP_SESSION_TOKEN_HEADER]: token }),
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
  });
  // Either a JSON-RPC reply or, refused before any JSON-RPC, the error envelope.
  const body = (await res.json()) as {
    jsonrpc?: string;
    result?: { tools?: unknown[] };
    error?: { code: string | number };
  };
  return { status: res.status, type: res.headers.get("content-type"), body };
}

function text(result: Awaited<ReturnType<Client["callTool"]>>): string {
  const first = (result.content as { type: string; text: string }[])[0];
  return first?.text ?? "";
}

async function records(dir: string): Promise<{ session_id: string; state: unknown }[]> {
  const base = path.join(dir, "gym", "resources", "t");
  const manifest = JSON.parse(await readFile(path.join(base, "manifest.json"), "utf8")) as {
    records_file: string;
  };
  return (await readFile(path.join(base, manifest.records_file), "utf8"))
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as { session_id: string; state: unknown });
}

async function commit(url: string, id: string) {
  const dir = await makeTempDir();
  dirs.push(dir);
  const res = await control(url, "commit", { checkpoint_id: id, checkpoint_dir: dir });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return { dir, records: await records(dir) };
}

function track<T>(work: PromiseLike<T>): { done: () => boolean; value: Promise<T> } {
  let settled = false;
  const value = Promise.resolve(work).finally(() => {
    settled = true;
  });
  value.catch(() => undefined);
  return { done: () => settled, value };
}

describe("tools over MCP", () => {
  it("lists every tool route with its schema and summary, and no reserved, control or GET route", async () => {
    const { url } = await serve({ checkpoint: false });
    const client = await connect(url, null);
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toEqual(["add", "read"]);
    const add = tools.find((t) => t.name === "add");
    expect(add?.description).toBe("Add an amount to this session's count");
    expect(add?.inputSchema).toMatchObject({
      type: "object",
      properties: { amount: { type: "integer" } },
      required: ["amount"],
      additionalProperties: false,
    });
    expect(tools.find((t) => t.name === "read")?.inputSchema).toEqual({ type: "object" });
  });

  it("serves the 2025 revisions too, each reply one JSON body", async () => {
    const { url } = await serve({ checkpoint: false });
    const legacy = await connect(url, null, "2025");
    expect((await legacy.listTools()).tools.map((t) => t.name)).toEqual(["add", "read"]);
    const listed = await rpc(url, null, "tools/list", {});
    expect(listed.status).toBe(200);
    expect(listed.type).toMatch(/^application\/json/);
    expect(listed.body.result?.tools).toHaveLength(2);
  });

  it("a call runs the route's handler on the token's session, without a cookie", async () => {
    const { server, url } = await serve({ checkpoint: false });
    const seeded = await request(url).post("/seed_session").send({ start: 5 }).expect(200);
    const token = seeded.body.mcp.headers[MCP_SESSION_TOKEN_HEADER] as string;
    for (const era of ["2026", "2025"] as const) {
      const client = await connect(url, token, era);
      const added = await client.callTool({ name: "add", arguments: { amount: 2 } });
      expect(added.isError ?? false).toBe(false);
      expect(added.structuredContent).toEqual({ count: era === "2026" ? 7 : 9 });
    }
    expect([...server.states.values()]).toEqual([{ count: 9 }]);
    // Arguments the route's schema refuses are a tool error naming the field.
    const client = await connect(url, token);
    const bad = await client.callTool({ name: "add", arguments: { amount: "two" } });
    expect(bad.isError).toBe(true);
    expect(text(bad)).toContain("amount");
  });

  it("refuses tools/call without a token or with a forged one, and names an unknown tool as an error", async () => {
    const { url } = await serve({ checkpoint: false });
    const seeded = await request(url).post("/seed_session").send({}).expect(200);
    const token = seeded.body.mcp.headers[MCP_SESSION_TOKEN_HEADER] as string;
    const forged = `${token.slice(0, -2)}${token.endsWith("AA") ? "BB" : "AA"}`;
    for (const sent of [null, forged, "not-a-token"]) {
      const client = await connect(url, sent);
      const refused = await client.callTool({ name: "read", arguments: {} });
      expect(refused.isError).toBe(true);
      expect(text(refused)).toContain(MCP_SESSION_TOKEN_HEADER);
    }
    const client = await connect(url, token);
    const unknown = await client.callTool({ name: "nope", arguments: {} });
    expect(unknown.isError).toBe(true);
    expect(text(unknown)).toContain("unknown tool");
  });

  it("a token restricted to some tools lists and calls only those", async () => {
    const { url } = await serve({ checkpoint: false });
    const seeded = await request(url)
      .post("/seed_session")
      .send({ allowed: ["read"] });
    const client = await connect(url, seeded.body.mcp.headers[MCP_SESSION_TOKEN_HEADER]);
    expect((await client.listTools()).tools.map((t) => t.name)).toEqual(["read"]);
    const refused = await client.callTool({ name: "add", arguments: { amount: 1 } });
    expect(refused.isError).toBe(true);
    expect((await client.callTool({ name: "read", arguments: {} })).isError ?? false).toBe(false);
  });

  it("answers a body that is no JSON-RPC request with a 4xx or a JSON-RPC error, never a 5xx", async () => {
    const { url } = await serve({ checkpoint: false });
    const token = await seed(url, "r", "s");
    const bodies = [
      "[]",
      '"x"',
      "{}",
      "null",
      '{"jsonrpc":"2.0"}',
      '{"jsonrpc":"2.0","id":1}',
      '{"jsonrpc":"1.0","id":1,"method":"tools/list"}',
      '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"x"}',
      '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}',
      '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":[1]}}',
      '{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}',
      '[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]',
      '{"jsonrpc":"2.0","id":1,"method":"no/such"}',
      "{not json",
    ];
    for (const [i, body] of bodies.entries()) {
      for (const version of ["2025-06-18", "2026-07-28"]) {
        const res = await fetch(`${url}/mcp`, {
          method: "POST",
          headers: {
            "content-type": "application/json",
            accept: "application/json, text/event-stream",
            "mcp-protocol-version": version,
            [MCP_SESSION_TOKEN_HEADER]: token,
          },
          body,
        });
        await res.arrayBuffer();
        expect(res.status, `body ${i} (${body}) at ${version}`).toBeLessThan(500);
      }
    }
    // The endpoint is there and still answers after them.
    const listed = await rpc(url, token, "tools/list", {});
    expect(listed.status).toBe(200);
    expect(listed.body.result?.tools?.length).toBeGreaterThan(0);
  });

  it("answers GET /mcp with 405 and documents /mcp in the OpenAPI document", async () => {
    const { server, url } = await serve({ checkpoint: false });
    await request(url).get("/mcp").expect(405);
    const paths = server.openApiDocument().paths ?? {};
    expect(paths["/mcp"]?.post).toBeDefined();
    expect(paths["/add"]?.post).toBeDefined();
  });

  it("is off by default: no /mcp and no token in seed replies", async () => {
    const { url } = await serve({ checkpoint: false, mcp: false });
    await request(url)
      .post("/mcp")
      .send({ jsonrpc: "2.0", id: 1, method: "tools/list" })
      .expect(404);
    const seeded = await request(url).post("/seed_session").send({}).expect(200);
    expect(seeded.body).toEqual({});
  });
});

describe("refused at startup", () => {
  function withTool(route: ReturnType<typeof dataRoute>) {
    return class Bad extends Tally {
      protected override tools() {
        return [route];
      }
    };
  }

  it("a tool name outside ^[A-Za-z0-9_-]+$, naming the route", () => {
    const Bad = withTool(
      dataRoute({ method: "post", path: "/bad.name", summary: "x", handler: () => ({}) }),
    );
    const server = new Bad({ name: "t", config: mcpOn, ...silent });
    expect(() => server.app()).toThrow(McpToolError);
    expect(() => server.app()).toThrow("POST /bad.name");
    // The same route is fine with MCP off.
    expect(() => new Bad({ name: "t", ...silent }).app()).not.toThrow();
  });

  it("a tool with `before` middleware, which an MCP call would skip", () => {
    const Bad = withTool(
      dataRoute({
        method: "post",
        path: "/guarded",
        summary: "x",
        before: [(_req, _res, next) => next()],
        handler: () => ({}),
      }),
    );
    const error = (() => {
      try {
        new Bad({ name: "t", config: mcpOn, ...silent }).app();
      } catch (caught) {
        return caught;
      }
      return null;
    })();
    expect(error).toBeInstanceOf(McpToolError);
    expect((error as McpToolError).route).toBe("POST /guarded");
  });
});

describe("session tokens in seed replies", () => {
  function claims(token: string): Record<string, unknown> {
    return JSON.parse(Buffer.from(token.split(".")[0] ?? "", "base64url").toString("utf8"));
  }

  it("a legacy reply gains `mcp`; a native one `resources_tools`; the token names session, attempt and tools", async () => {
    const { url } = await serve();
    const legacy = await request(url)
      .post("/ng-rollout/r/seed_session")
      .set("Cookie", cookie("s1"))
      .send({ allowed: ["read"] })
      .expect(200);
    expect(legacy.body.mcp).toEqual({
      server_name: "t",
      url_path: "/mcp",
      transport: "http",
      headers: { [MCP_SESSION_TOKEN_HEADER]: expect.any(String) },
    });
    expect(claims(legacy.body.mcp.headers[MCP_SESSION_TOKEN_HEADER])).toEqual({
      sid: "s1",
      tools: ["read"],
      episode: "r",
    });
    const native = await request(url)
      .post("/ng-rollout/q-a2/seed_session")
      .send({ resources_session_id: "n1", start: 1 })
      .expect(200);
    expect(native.body.resources_session_id).toBe("n1");
    expect(native.body.mcp).toBeUndefined();
    const token = native.body.resources_tools.headers[MCP_SESSION_TOKEN_HEADER] as string;
    expect(claims(token)).toEqual({ sid: "n1", tools: null, episode: "q-a2" });
  });

  it("with checkpointing off the token names no attempt", async () => {
    const { url } = await serve({ checkpoint: false });
    const seeded = await request(url).post("/ng-rollout/r/seed_session").send({}).expect(200);
    expect(claims(seeded.body.mcp.headers[MCP_SESSION_TOKEN_HEADER])).not.toHaveProperty("episode");
  });
});

describe("MCP calls are checkpointed like any request", () => {
  it("a call during an open checkpoint waits, the checkpoint holds the state from before it, and it runs after resume", async () => {
    const { server, url } = await serve();
    const token = await seed(url, "r", "s", { start: 1 });
    const client = await connect(url, token);
    await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    const call = track(client.callTool({ name: "add", arguments: { amount: 10 } }));
    await expect.poll(() => server.callsReceived, poll).toBe(1);
    const { records: written } = await commit(url, "c1");
    expect(written).toEqual([expect.objectContaining({ session_id: "s", state: { count: 1 } })]);
    expect(call.done()).toBe(false);
    expect(server.states.get("s")).toEqual({ count: 1 });
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    expect((await call.value).structuredContent).toEqual({ count: 11 });
  });

  it("a call in flight holds up prepare", async () => {
    const { server, url } = await serve();
    const token = await seed(url, "r", "s");
    const client = await connect(url, token);
    const gate = server.hold();
    const call = track(client.callTool({ name: "add", arguments: { amount: 1 } }));
    await gate.entered;
    const early = await control(url, "prepare", { checkpoint_id: "c1", deadline_ts: soon() });
    expect(early.status).toBe(200);
    expect(early.body.phase).toBe("preparing");
    expect(early.body.report.counts.inflight).toBe(1);
    gate.release();
    expect((await call.value).isError ?? false).toBe(false);
    const prepared = await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    expect(prepared.body.phase).toBe("prepared");
  });

  it("a retire waits for a call in flight; a later call of the retired session gets 409 stale_attempt", async () => {
    const { server, url } = await serve();
    const token = await seed(url, "r", "s");
    const client = await connect(url, token);
    const gate = server.hold();
    const call = track(client.callTool({ name: "add", arguments: { amount: 1 } }));
    await gate.entered;
    const cut = await control(url, "retire", {
      checkpoint_id: "x1",
      episode_ids: [{ rollout_id: "r", attempt: 0 }],
      deadline_ts: soon(),
    });
    expect(cut.status).toBe(409);
    expect(cut.body.error.code).toBe("deadline_exceeded");
    gate.release();
    await call.value;
    await control(url, "retire", {
      checkpoint_id: "x2",
      episode_ids: [{ rollout_id: "r", attempt: 0 }],
    }).expect(200);
    const late = await rpc(url, token, "tools/call", { name: "read", arguments: {} });
    expect(late.status).toBe(409);
    expect(late.body.error?.code).toBe("stale_attempt");
    expect(late.body.jsonrpc).toBeUndefined();
  });

  /**
   * Session `s` of rollout `r` (count 3) checkpointed and restored into a fresh server, which
   * is resumed: the token `old` is the replaced attempt's.
   */
  async function restoredSession() {
    const first = await serve();
    const old = await seed(first.url, "r", "s", { start: 3 });
    await control(first.url, "prepare", { checkpoint_id: "c1" }).expect(200);
    const { dir } = await commit(first.url, "c1");
    const fresh = await serve();
    await control(fresh.url, "restore", {
      checkpoint_id: "c2",
      checkpoint_dir: dir,
      episode_ids: [{ rollout_id: "r", attempt: 0 }],
    }).expect(200);
    await control(fresh.url, "resume", { checkpoint_id: "c2" }).expect(200);
    return { old, fresh };
  }

  it("after a restore the replaced attempt's token is refused, and a seed under the replacement continues the session", async () => {
    const { old, fresh } = await restoredSession();
    const refused = await rpc(fresh.url, old, "tools/call", {
      name: "add",
      arguments: { amount: 1 },
    });
    expect(refused.status).toBe(409);
    expect(refused.body.error?.code).toBe("stale_attempt");
    expect(fresh.server.states.get("s")).toEqual({ count: 3 });
    const replacement = await seed(fresh.url, "r-a1", "s");
    const client = await connect(fresh.url, replacement);
    const added = await client.callTool({ name: "add", arguments: { amount: 1 } });
    expect(added.structuredContent).toEqual({ count: 4 });
    const status = await request(fresh.url)
      .get(`${CONTROL}/status`)
      .set("Authorization", `Bearer ${TOKEN}`)
      .expect(200);
    expect(status.body.report.counts.sessions).toBe(1);
  });

  it("the replaced attempt's token continues the restored session under the replacement's prefix, and no other", async () => {
    const { old, fresh } = await restoredSession();
    // Another rollout's prefix, or an attempt before the token's, is no continuation of it.
    const replacement = await seed(fresh.url, "q-a2", "other");
    for (const [token, prefix] of [
      [old, "/ng-rollout/q"],
      [replacement, "/ng-rollout/q-a1"],
    ] as const) {
      const refused = await rpc(`${fresh.url}${prefix}`, token, "tools/call", {
        name: "add",
        arguments: { amount: 1 },
      });
      expect(refused.status).toBe(409);
      expect(refused.body.error?.code).toBe("stale_attempt");
    }
    const client = await connect(`${fresh.url}/ng-rollout/r-a1`, old);
    const added = await client.callTool({ name: "add", arguments: { amount: 1 } });
    expect(added.structuredContent).toEqual({ count: 4 });
    expect(fresh.server.states.get("s")).toEqual({ count: 4 });
  });
});
