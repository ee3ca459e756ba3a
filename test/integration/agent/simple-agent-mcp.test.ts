/**
 * The Simple Agent calling a resources server's tools over MCP: the reference counter serves
 * its tools on `/mcp` (`expose_tools_over_mcp: true`), the task grants them with the session
 * token the counter's seed handed out, and the fake inference backend (behind the reference
 * policy model) picks the tools the agent lists. A session ends with the count its calls made,
 * and one checkpointed in the middle continues in fresh agent and counter processes from its
 * boundary, its calls reaching the restored counter session under the replacement's prefix.
 */
import path from "node:path";
import type { Express } from "express";
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import CounterServer from "../../../reference-servers/counter/src/index.js";
import FakeInferenceServer from "../../../reference-servers/fake-inference/src/index.js";
import PolicyModel from "../../../reference-servers/policy-model/src/index.js";
import { mcpGrantUrl } from "../../../reference-servers/simple-agent/src/index.js";
import { fromCaptureKey } from "gym-participant-sdk";
import { MCP_SESSION_TOKEN_HEADER } from "#sdk/server/resources/mcp-session-token.js";
import {
  CHECKPOINT_ON,
  POLL,
  Stack,
  activate,
  cleanup,
  commit,
  ep,
  prepare,
  restoreAndResume,
  seed,
  tempDir,
} from "../../support/simple-agent-harness.js";

const silent = { logLevel: "silent", shutdownGraceMs: 50 } as const;

const extra: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const server of extra.splice(0).reverse()) await server.close();
  await cleanup();
});

/** The counter over MCP, recording the paths of its `/mcp` requests. */
class McpCounter extends CounterServer {
  readonly mcpPaths: string[] = [];
  protected override configureApp(app: Express): void {
    app.use((req, _res, next) => {
      if (req.path === "/mcp") this.mcpPaths.push(req.originalUrl);
      next();
    });
    super.configureApp(app);
  }
}

/** The increments the fake model makes, one per turn, then its answer. */
const INCREMENTS = [2, 3, 4];
const SCRIPT = {
  default: [
    ...INCREMENTS.map((count) => ({
      tool_calls: [{ name: "increment_counter", arguments: { count } }],
    })),
    { content: "done" },
  ],
};

/** Fake inference behind the reference policy model, registered in `stack` as `policy`. */
async function model(stack: Stack) {
  const dir = await tempDir();
  const inference = new FakeInferenceServer({
    name: "inference",
    config: { token_store_dir: path.join(dir, "tokens"), control_token: "t" },
    ...silent,
  });
  extra.push(inference);
  stack.register("inference", "backend", (await inference.listen({ port: 0 })).url);
  const policy = new PolicyModel({
    name: "policy",
    deployment: { checkpoint: null, servers: stack.servers },
    config: { backend_server: "inference" },
    ...silent,
  });
  extra.push(policy);
  stack.register("policy", "model", (await policy.listen({ port: 0 })).url);
  inference.script.set({ ...SCRIPT, per_rollout: {} });
  return inference;
}

/** Starts the counter with MCP on (at `port` when given), registered as `counter`. */
async function counter(stack: Stack, port = 0) {
  const server = new McpCounter({
    name: "counter",
    config: { expose_tools_over_mcp: true },
    checkpoint: stack.checkpoint ? CHECKPOINT_ON : null,
    ...silent,
  });
  extra.push(server);
  const { url } = await server.listen({ port });
  stack.register("counter", "resources", url);
  return { server, url };
}

/** Seeds the counter session under `key`; returns the MCP grant its reply hands out. */
async function grantOf(url: string, key: string) {
  const res = await request(url)
    .post(`/ng-rollout/${key}/seed_session`)
    .send({ resources_session_id: "c1", task_data: { initial_count: 0, target: 9 } });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  const access = res.body.resources_tools as { url_path: string; headers: Record<string, string> };
  expect(access.headers[MCP_SESSION_TOKEN_HEADER]).toEqual(expect.any(String));
  return {
    kind: "mcp",
    name: "counter",
    required: true,
    connection: {
      transport: "streamable_http",
      url: `${url}${access.url_path}`,
      headers: access.headers,
    },
  };
}

function countOf(server: CounterServer): number | undefined {
  return server.states.get("c1")?.count;
}

describe("the Simple Agent with MCP tools", () => {
  it("offers the granted server's tools to the model and calls them over MCP: the count is the calls'", async () => {
    const stack = new Stack({ checkpoint: true });
    const inference = await model(stack);
    const { server, url } = await counter(stack);
    const grant = await grantOf(url, "r");
    const { url: agentUrl } = await stack.agent();
    const cookie = await seed(agentUrl, "s", ep("r"), { tool_accesses: [grant] });
    const res = await activate(agentUrl, cookie, "r", { input: "Count to nine." });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(countOf(server)).toBe(9);
    // Every call went over MCP, under the activation's prefix; none over the POST routes.
    expect(server.mcpPaths.length).toBeGreaterThanOrEqual(INCREMENTS.length);
    expect(new Set(server.mcpPaths)).toEqual(new Set(["/ng-rollout/r/mcp"]));
    const outputs = (res.body.output as { type: string; output?: string }[]).filter(
      (item) => item.type === "function_call_output",
    );
    expect(outputs.map((item) => JSON.parse(item.output ?? "null"))).toEqual(
      INCREMENTS.map(() => ({ success: true })),
    );
    const tools = res.body._ng_trajectory.tool_calls as { status: string; name: string }[];
    expect(tools.map((t) => [t.name, t.status])).toEqual(
      INCREMENTS.map(() => ["increment_counter", "completed"]),
    );
    expect(inference.calls.calls()).toHaveLength(INCREMENTS.length + 1);
  });

  it("the fake model's built-in script picks the first listed tool: one increment", async () => {
    const stack = new Stack({ checkpoint: false });
    const inference = await model(stack);
    inference.script.set({ per_rollout: {} });
    const { server, url } = await counter(stack);
    const grant = await grantOf(url, "r");
    const { url: agentUrl } = await stack.agent();
    const cookie = await seed(agentUrl, "s", ep("r"), { tool_accesses: [grant] });
    const res = await activate(agentUrl, cookie, "r", { input: "Count." });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(countOf(server)).toBe(1);
  });

  it("checkpointed between tool rounds, continues in fresh agent and counter processes", async () => {
    const stack = new Stack({ checkpoint: true });
    const inference = await model(stack);
    const first = await counter(stack);
    const grant = await grantOf(first.url, "r");
    const old = await stack.agent();
    const cookie = await seed(old.url, "s", ep("r"), { tool_accesses: [grant] });
    // The third model call waits: two increments are made, the loop is at its boundary.
    inference.holds.place({ after_calls: 2 });
    void activate(old.url, cookie, "r", { input: "Count to nine." }, 1).then(
      () => undefined,
      () => undefined,
    );
    await expect.poll(() => inference.calls.calls().length, POLL).toBe(3);
    expect(countOf(first.server)).toBe(5);
    await prepare([old.url, first.url], "c1");
    const dir = await commit([old.url, first.url], "c1", [ep("r")]);

    // The old counter goes and comes back at its address, as a deployment's does; the old
    // agent, never resumed, parks its activation at the next boundary.
    const port = Number(new URL(first.url).port);
    await first.server.close();
    inference.holds.release();
    const fresh = await counter(stack, port);
    const { url: agentUrl } = await stack.agent();
    await restoreAndResume(fresh.url, "c2", dir, [ep("r")]);
    await restoreAndResume(agentUrl, "c2", dir, [ep("r")]);
    expect(countOf(fresh.server)).toBe(5);

    const res = await activate(agentUrl, cookie, "r-a1", { input: "Count to nine." }, 1);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    // Only the third increment ran again, on the restored session, under the replacement.
    expect(countOf(fresh.server)).toBe(9);
    expect(new Set(fresh.server.mcpPaths)).toEqual(new Set(["/ng-rollout/r-a1/mcp"]));
    const outputs = (res.body.output as { type: string; output?: string }[]).filter(
      (item) => item.type === "function_call_output",
    );
    expect(outputs.map((item) => JSON.parse(item.output ?? "null"))).toEqual(
      INCREMENTS.map(() => ({ success: true })),
    );
  });
});

describe("a required grant that cannot be used", () => {
  it("fails the activation 502 upstream_unreachable naming the grant, not 500", async () => {
    const stack = new Stack({ checkpoint: false });
    await model(stack);
    const { url: agentUrl } = await stack.agent();
    const cookie = await seed(agentUrl, "s", ep("r"), {
      tool_accesses: [
        {
          kind: "mcp",
          name: "gone",
          connection: { transport: "http", url: "http://127.0.0.1:1/mcp" },
        },
      ],
    });
    const res = await activate(agentUrl, cookie, "r", { input: "Count." });
    expect(res.status, JSON.stringify(res.body)).toBe(502);
    expect(res.body.error.code).toBe("upstream_unreachable");
    expect(res.body.error.detail).toContain("MCP grant gone");
  });
});

describe("seed rules", () => {
  it("an MCP grant over a transport other than Streamable HTTP is refused with 422", async () => {
    const stack = new Stack({ checkpoint: false });
    await stack.model();
    const { url } = await stack.agent();
    const res = await request(url)
      .post("/v1/agent_sessions")
      .send({
        agent_session_id: "s",
        episode_id: ep("r"),
        task_id: { taskset: "t", task_id: "1" },
        tool_accesses: [
          { kind: "mcp", name: "m", connection: { transport: "stdio", url: "http://h/mcp" } },
        ],
      });
    expect(res.status).toBe(422);
    expect(res.body.error.code).toBe("invalid_request");
    expect(res.body.error.detail).toContain("m: stdio");
  });
});

describe("mcpGrantUrl", () => {
  const rollout = { captureKey: "r-a1", episodeId: fromCaptureKey("r-a1"), tokenCapture: false };

  it("puts the activation's prefix after a deployment server's base, replacing one the URL has", () => {
    const bases = ["http://h:1", "http://p:2/counter/"];
    expect(mcpGrantUrl("http://h:1/mcp", rollout, bases).href).toBe(
      "http://h:1/ng-rollout/r-a1/mcp",
    );
    expect(mcpGrantUrl("http://h:1/ng-rollout/r/mcp", rollout, bases).href).toBe(
      "http://h:1/ng-rollout/r-a1/mcp",
    );
    expect(mcpGrantUrl("http://p:2/counter/mcp", rollout, bases).href).toBe(
      "http://p:2/counter/ng-rollout/r-a1/mcp",
    );
  });

  it("leaves a URL outside the deployment, or an activation without a rollout, as granted", () => {
    expect(mcpGrantUrl("http://x:9/mcp", rollout, ["http://h:1"]).href).toBe("http://x:9/mcp");
    expect(mcpGrantUrl("http://h:1/mcp", null, ["http://h:1"]).href).toBe("http://h:1/mcp");
  });
});
