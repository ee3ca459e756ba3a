/**
 * The conformance kit's agent, environment and model profiles against the reference stack in
 * one process (fake inference backend, policy model, counter, Simple Agent, single_agent_turn):
 * the Simple Agent, single_agent_turn and the policy model pass every requirement that applies;
 * a broken participant per kind (the reference server behind a one-bug proxy) fails exactly the
 * requirement its bug breaks.
 */
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ResolvedDeployment, ServerKind } from "gym-participant-sdk/controller";
import { runConformance, type ConformanceReport } from "#sdk/conformance/runner.js";
import CounterServer from "../../../reference-servers/counter/src/index.js";
import FakeInferenceServer from "../../../reference-servers/fake-inference/src/index.js";
import PolicyModel from "../../../reference-servers/policy-model/src/index.js";
import SimpleAgent from "../../../reference-servers/simple-agent/src/index.js";
import SingleAgentTurnServer from "../../../reference-servers/single-agent-turn/src/index.js";
import { faultProxy, type Fault } from "../../fixtures/broken-participants.js";
import { makeTempDir, removeTempDir } from "../../support/test-participant.js";

const TOKEN = "conformance-kinds-token";
// A short grace, so the lease expiry is checked, not skipped.
const checkpoint = { enabled: true, control_auth_token: TOKEN, lease_grace_seconds: 2 };
const silent = { logLevel: "silent", shutdownGraceMs: 50 } as const;
const closers: (() => Promise<void>)[] = [];
let dir = "";

type Listening = { listen(o: { port?: number }): Promise<{ url: string }>; close(): Promise<void> };

const stale = (reply: { body: Buffer }): boolean =>
  reply.body.toString("utf8").includes('"stale_attempt"');
const ok = { status: 200, headers: { "content-type": "application/json" } };

/** One bug per kind; each names the requirement it must fail and only that one. */
function kindFaults(): { kind: string; fault: Fault }[] {
  const open = new Set<string>();
  const track: Fault["reply"] = (req, reply) => {
    let id: unknown;
    try {
      id = (JSON.parse(req.body.toString("utf8")) as { checkpoint_id?: unknown }).checkpoint_id;
    } catch {
      return reply;
    }
    if (typeof id === "string" && reply.status === 200) {
      if (req.path.endsWith("/prepare")) open.add(id);
      if (req.path.endsWith("/resume")) open.delete(id);
    }
    return reply;
  };
  return [
    {
      kind: "agent",
      fault: {
        fails: "agent.admission.seed-waits",
        bug: "answers a seed during an open checkpoint",
        request: (req) =>
          open.size > 0 && req.path === "/v1/agent_sessions"
            ? { ...ok, body: Buffer.from('{"agent_session_id":"x"}') }
            : req,
        reply: track,
      },
    },
    {
      kind: "environment",
      fault: {
        fails: "environment.fencing.stale-attempt",
        bug: "runs an episode of a retired attempt",
        reply: (req, reply) =>
          req.path === "/run" && stale(reply) ? { ...ok, body: Buffer.from("{}") } : reply,
      },
    },
    {
      kind: "model",
      fault: {
        fails: "model.fencing.stale-attempt",
        bug: "serves a generation call of a retired attempt",
        reply: (req, reply) =>
          req.path.startsWith("/ng-rollout/") && stale(reply)
            ? { ...ok, body: Buffer.from("{}") }
            : reply,
      },
    },
  ];
}

const faults = kindFaults();
const reports = new Map<string, ConformanceReport>();
const failed = (report: ConformanceReport): string[] =>
  report.results.filter((r) => r.result === "fail").map((r) => r.id);
const reasons = (report: ConformanceReport): string =>
  report.results
    .filter((r) => r.result === "fail")
    .map((r) => `${r.id}: ${r.reason}`)
    .join("\n");

beforeAll(async () => {
  dir = await makeTempDir();
  const deployment: ResolvedDeployment = { checkpoint, servers: {} };
  const start = async (name: string, kind: ServerKind, server: Listening): Promise<string> => {
    closers.push(() => server.close());
    const { url } = await server.listen({ port: 0 });
    const { hostname, port } = new URL(url);
    deployment.servers[name] = {
      kind,
      url,
      host: hostname,
      port: Number(port),
      num_workers: 1,
      config: {},
    };
    return url;
  };
  await start(
    "inference",
    "backend",
    new FakeInferenceServer({
      name: "inference",
      config: { token_store_dir: path.join(dir, "tokens"), control_token: TOKEN },
      ...silent,
    }),
  );
  const model = await start(
    "policy",
    "model",
    new PolicyModel({
      name: "policy",
      checkpoint,
      deployment,
      config: { backend_server: "inference", capture_dir: path.join(dir, "capture") },
      ...silent,
    }),
  );
  await start(
    "counter",
    "resources",
    new CounterServer({ name: "counter", checkpoint, ...silent }),
  );
  const agent = await start(
    "simple_agent",
    "agent",
    new SimpleAgent({
      name: "simple_agent",
      checkpoint,
      deployment,
      config: { model_server: "policy" },
      ...silent,
    }),
  );
  const environment = await start(
    "counter_env",
    "environment",
    new SingleAgentTurnServer({
      name: "counter_env",
      checkpoint,
      deployment,
      config: {
        cleanup_timeout_seconds: 5,
        resources_server: "counter",
        agent_server: "simple_agent",
        resources_tool_transports: ["direct_http"],
      },
      ...silent,
    }),
  );
  const urls: Record<string, string> = { agent, environment, model };
  const broken = await Promise.all(
    faults.map(async ({ kind, fault }) => {
      const proxy = await faultProxy(urls[kind] as string, fault);
      closers.push(proxy.close);
      return [fault.bug, proxy.url] as const;
    }),
  );
  // The proxies front the servers the reference runs use too: run those first.
  await Promise.all(
    Object.entries(urls).map(async ([kind, url]) => {
      reports.set(kind, await runConformance({ url, token: TOKEN, seed: 11 }));
    }),
  );
  await Promise.all(
    broken.map(async ([bug, url]) => {
      reports.set(bug, await runConformance({ url, token: TOKEN, seed: 11 }));
    }),
  );
}, 180_000);

afterAll(async () => {
  for (const close of closers.splice(0).reverse()) await close();
  await removeTempDir(dir);
});

describe("the reference agent, environment and model conform", () => {
  it.each(["agent", "environment", "model"])("%s passes every requirement that applies", (kind) => {
    const report = reports.get(kind) as ConformanceReport;
    expect(failed(report), reasons(report)).toEqual([]);
    expect(report.passed).toBe(true);
    // Its own kind's profile ran.
    const own = report.results.filter((r) => r.id.startsWith(`${kind}.`));
    expect(own.length).toBeGreaterThan(0);
    for (const result of own) expect(result.result, result.id).toBe("pass");
    // Skips are other kinds' and modes' requirements, or the crash ones without --launch.
    for (const result of report.results.filter((r) => r.result === "skip")) {
      expect(result.reason).toMatch(/^only |--launch/);
    }
  });
});

describe("a broken agent, environment and model each fail exactly their requirement", () => {
  it.each(faults.map(({ fault }) => [fault.bug, fault.fails] as const))("%s: %s", (bug, fails) => {
    const report = reports.get(bug) as ConformanceReport;
    expect(failed(report), reasons(report)).toEqual([fails]);
    expect(report.passed).toBe(false);
  });
});
