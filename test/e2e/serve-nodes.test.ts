/**
 * A deployment across two machines, each machine its own loopback address: `gym serve --node`
 * starts only that node's servers, bound on its address, with its own state file; the
 * controller's commands reach every node from the deployment file; `gym stop --node` stops one.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FIXTURES, gym, isGone, killEverything, stateServers } from "./helpers.js";

let dir: string;
let deployment: string;
const NODE_A = "127.0.0.2";
const NODE_B = "127.0.0.3";
let counterPort: number;
let echoPort: number;

/** A port free on the given address now (released before it is used). */
async function freePort(host: string): Promise<number> {
  return await new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, host, () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

const stateOf = (node: string): string => path.join(dir, ".gym", "nodes", node, "run.json");

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "gym-e2e-nodes-"));
  counterPort = await freePort(NODE_A);
  echoPort = await freePort(NODE_B);
  const servers = path.join(FIXTURES, "servers");
  deployment = path.join(dir, "deployment.yaml");
  writeFileSync(
    deployment,
    `checkpoint:
  enabled: true
  control_auth_token: node-token
nodes:
  a:
    host: \${NODE_A_HOST}
  b:
    host: \${NODE_B_HOST}
servers:
  counter:
    kind: resources
    entrypoint: ${servers}/episodes-resources.ts
    node: a
    port: ${counterPort}
    config:
      episodes: [task-1]
      backend_server: echo
  echo:
    kind: backend
    entrypoint: ${servers}/echo-backend.ts
    node: b
    port: ${echoPort}
`,
  );
});

afterAll(async () => {
  await killEverything(dir, [stateOf("a"), stateOf("b")]);
  rmSync(dir, { recursive: true, force: true });
});

const env = { ...process.env, NODE_A_HOST: NODE_A, NODE_B_HOST: NODE_B };
// The built CLI starts in half the time; `npm test` builds first.
const run = (args: readonly string[]) => gym(args, { env, compiled: true });

describe.sequential("two nodes on one machine", { timeout: 60_000 }, () => {
  it("refuses to start a multi-node deployment without --node, and an unknown node", async () => {
    const all = await run(["serve", deployment, "--detach"]);
    expect(all.code).toBe(2);
    expect(all.stderr).toMatch(/spans 2 nodes \(a, b\): say which this machine is/);
    const unknown = await run(["serve", deployment, "--node", "c", "--detach"]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/--node names c, which .* does not define.*choose among: a, b/s);
  });

  it("gym serve --node a starts only node a's servers, bound on its address", async () => {
    const served = await run(["serve", deployment, "--node", "a", "--detach"]);
    expect(served.code, served.stderr).toBe(0);
    const servers = stateServers(stateOf("a"));
    expect(servers.map((server) => server.name)).toEqual(["counter"]);
    expect(servers[0]).toMatchObject({ url: `http://${NODE_A}:${counterPort}` });
    expect(existsSync(stateOf("b"))).toBe(false);
    expect((await fetch(`http://${NODE_A}:${counterPort}/health`)).status).toBe(200);
    // Bound on the node's address only: the machine's other loopback address does not answer.
    await expect(fetch(`http://127.0.0.1:${counterPort}/health`)).rejects.toThrow();
    const resolved = JSON.parse(
      readFileSync(path.join(dir, ".gym", "nodes", "a", "deployment.resolved.json"), "utf8"),
    ) as { servers: Record<string, { url: string; node: string }> };
    // Every server of the deployment, so counter reaches echo on the other node.
    expect(resolved.servers.echo).toMatchObject({ url: `http://${NODE_B}:${echoPort}`, node: "b" });
  });

  it("the controller reaches node a's participant from the deployment file alone", async () => {
    const status = await run(["ckpt", "status", "--deployment", deployment, "--json"]);
    expect(status.code, status.stderr).toBe(0);
    const json = JSON.parse(status.stdout) as { servers: Record<string, { phase: string }> };
    expect(json.servers.counter).toMatchObject({ phase: "idle" });
  });

  it("gym serve --node b starts node b's, and a checkpoint spans both", async () => {
    const served = await run(["serve", deployment, "--node", "b", "--detach"]);
    expect(served.code, served.stderr).toBe(0);
    expect(stateServers(stateOf("b")).map((server) => server.name)).toEqual(["echo"]);
    const checkpoint = await run([
      "ckpt",
      "checkpoint",
      "--dir",
      path.join(dir, "ckpt", "c1"),
      "--deployment",
      deployment,
    ]);
    expect(checkpoint.code, checkpoint.stderr).toBe(0);
    expect(
      existsSync(path.join(dir, "ckpt", "c1", "gym", "resources", "counter", "manifest.json")),
    ).toBe(true);
  });

  it("gym top reaches the servers of both nodes from the deployment file", async () => {
    const top = await run(["top", "--once", "--deployment", deployment]);
    expect(top.code, top.stderr).toBe(0);
    // A participant of node a, reached over node a's address (a backend is no participant).
    expect(top.stdout).toMatch(/counter\s+resources/);
  });

  it("gym stop --node a stops only node a's servers", async () => {
    const a = stateServers(stateOf("a"));
    const b = stateServers(stateOf("b"));
    const stopped = await run(["stop", deployment, "--node", "a"]);
    expect(stopped.code, stopped.stderr).toBe(0);
    for (const server of a) expect(isGone(server.pid)).toBe(true);
    for (const server of b) expect(isGone(server.pid)).toBe(false);
    const rest = await run(["stop", deployment, "--node", "b"]);
    expect(rest.code, rest.stderr).toBe(0);
  });
});
