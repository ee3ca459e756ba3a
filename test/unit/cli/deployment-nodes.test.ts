/**
 * A deployment across machines: `nodes:`, a server's `node`, its bind address and advertised
 * URL, and the checks that refuse a file before anything starts.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { problemsOf, writeDeploymentFile } from "../../support/deployment-files.js";
import { afterAll, describe, expect, it } from "vitest";
import { loadDeploymentFile, resolveDeployment } from "#sdk/deployment/index.js";
import { ResolvedDeploymentSchema } from "#sdk/wire/deployment.js";

const temp = mkdtempSync(path.join(tmpdir(), "gym-deployment-nodes-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

/** Writes a deployment file in a fresh directory holding a server module `srv.ts`. */
const deploymentFile = (text: string, name?: string): string =>
  writeDeploymentFile(temp, text, name);

const TWO_NODES = `nodes:
  gpu:
    host: \${GPU_HOST}
  cpu:
    host: \${CPU_HOST}
servers:
  policy:
    kind: model
    entrypoint: ./srv.ts
    node: gpu
    port: 8001
  counter:
    kind: resources
    entrypoint: ./srv.ts
    node: cpu
    host: 0.0.0.0
    port: 8002
  agent:
    kind: agent
    entrypoint: ./srv.ts
    node: cpu
    port: 8003
    url: http://agent.example.org:80/
    config:
      model_server: policy
`;

describe("a deployment with nodes", () => {
  it("binds each server on its node's host unless it says otherwise, and advertises the node's host", () => {
    const loaded = loadDeploymentFile(deploymentFile(TWO_NODES), {
      env: { GPU_HOST: "10.0.0.1", CPU_HOST: "cpu-7.cluster" },
    });
    expect(loaded.nodes).toEqual({ gpu: { host: "10.0.0.1" }, cpu: { host: "cpu-7.cluster" } });
    expect(loaded.servers.policy).toMatchObject({ node: "gpu", host: "10.0.0.1", port: 8001 });
    expect(loaded.servers.counter).toMatchObject({ node: "cpu", host: "0.0.0.0" });
    const resolved = resolveDeployment(loaded, {});
    expect(ResolvedDeploymentSchema.parse(resolved)).toEqual(resolved);
    expect(resolved.servers.policy).toMatchObject({
      url: "http://10.0.0.1:8001",
      host: "10.0.0.1",
      node: "gpu",
    });
    // Bound on every interface, reached at its node's name.
    expect(resolved.servers.counter).toMatchObject({
      url: "http://cpu-7.cluster:8002",
      host: "0.0.0.0",
    });
    // An advertised URL wins, without its trailing slash.
    expect(resolved.servers.agent?.url).toBe("http://agent.example.org:80");
  });

  it("is resolved identically on every machine: nothing is chosen at startup", () => {
    const env = { GPU_HOST: "10.0.0.1", CPU_HOST: "10.0.0.2" };
    const file = deploymentFile(TWO_NODES);
    const one = resolveDeployment(loadDeploymentFile(file, { env }), {});
    const two = resolveDeployment(loadDeploymentFile(file, { env }), {});
    expect(two).toEqual(one);
  });

  it("refuses a server on no node, on an unknown node, or without a fixed port, naming each", () => {
    const problems = problemsOf(
      deploymentFile(`nodes:
  gpu:
    host: 10.0.0.1
servers:
  policy:
    kind: model
    entrypoint: ./srv.ts
    port: 8001
  counter:
    kind: resources
    entrypoint: ./srv.ts
    node: gpus
    port: 8002
  agent:
    kind: agent
    entrypoint: ./srv.ts
    node: gpu
`),
    );
    const messages = problems.map((problem) => problem.message);
    expect(messages).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/server policy runs on no node.*node: gpu/),
        expect.stringMatching(/server counter names node 'gpus'.*did you mean 'gpu'/),
        expect.stringMatching(/server agent needs a fixed port/),
      ]),
    );
    expect(problems.find((p) => p.path === "servers.policy.node")?.line).toBe(5);
  });

  it("refuses two servers of one node on one port, whatever addresses they bind", () => {
    const problems = problemsOf(
      deploymentFile(`nodes:
  cpu:
    host: 10.0.0.2
servers:
  a:
    kind: resources
    entrypoint: ./srv.ts
    node: cpu
    port: 8000
  b:
    kind: resources
    entrypoint: ./srv.ts
    node: cpu
    host: 0.0.0.0
    port: 8000
`),
    );
    expect(problems).toEqual([
      expect.objectContaining({
        path: "servers.b.port",
        message: expect.stringMatching(/port 8000 on node cpu is also given to server a/),
      }),
    ]);
  });

  it("refuses a node named without a nodes block, a bad node host and a URL that does not parse", () => {
    const problems = problemsOf(
      deploymentFile(`servers:
  a:
    kind: resources
    entrypoint: ./srv.ts
    node: cpu
    url: "policy:8000"
  b:
    kind: resources
    entrypoint: ./srv.ts
    url: https://b.example.org/v1
`),
    );
    const messages = problems.map((problem) => problem.message);
    expect(messages).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/names node 'cpu', but the deployment has no nodes: block/),
        expect.stringMatching(/http:\/\/ or https:\/\/ URL/),
        expect.stringMatching(/no path, query or fragment/),
      ]),
    );
    const badHost = problemsOf(
      deploymentFile(`nodes:
  cpu:
    host: "not a host"
servers:
  a:
    kind: resources
    entrypoint: ./srv.ts
    node: cpu
    port: 8000
`),
    );
    expect(badHost.map((problem) => problem.path)).toContain("nodes.cpu.host");
  });

  it("reaches a server bound to an address of its own there, not at its node's host", () => {
    const loaded = loadDeploymentFile(
      deploymentFile(`nodes:
  gpu:
    host: 10.0.0.1
servers:
  inference:
    kind: backend
    entrypoint: ./srv.ts
    node: gpu
    host: 127.0.0.1
    port: 8100
`),
      { env: {} },
    );
    expect(resolveDeployment(loaded, {}).servers.inference?.url).toBe("http://127.0.0.1:8100");
  });

  it("refuses a url whose scheme disagrees with the tls block, or without a fixed port", () => {
    const plain = problemsOf(
      deploymentFile(`servers:
  a:
    kind: resources
    entrypoint: ./srv.ts
    url: https://a.example.org:8443
    port: 8443
  b:
    kind: resources
    entrypoint: ./srv.ts
    url: http://b.example.org:8000
`),
    );
    expect(plain.map((problem) => problem.message)).toEqual([
      expect.stringMatching(/server a's url is https:\/\/, but the deployment has no tls: block/),
      expect.stringMatching(/server b gives a url but no fixed port/),
    ]);
    const tls = problemsOf(
      deploymentFile(`tls:
  cert_file: c.pem
  key_file: k.pem
servers:
  a:
    kind: resources
    entrypoint: ./srv.ts
    url: http://a.example.org:8000
    port: 8000
`),
    );
    expect(tls.map((problem) => problem.message)).toEqual([
      expect.stringMatching(/server a's url is http:\/\/, but the deployment has a tls: block/),
    ]);
  });

  it("builds https URLs when the deployment has a tls block, with its paths made absolute", () => {
    const file = deploymentFile(`tls:
  cert_file: certs/server.pem
  key_file: certs/server.key
  ca_file: certs/ca.pem
servers:
  a:
    kind: resources
    entrypoint: ./srv.ts
    port: 8443
`);
    const loaded = loadDeploymentFile(file, { env: {} });
    expect(loaded.tls).toEqual({
      cert_file: path.join(path.dirname(file), "certs/server.pem"),
      key_file: path.join(path.dirname(file), "certs/server.key"),
      ca_file: path.join(path.dirname(file), "certs/ca.pem"),
      client_ca_file: null,
    });
    const resolved = resolveDeployment(loaded, {});
    expect(resolved.servers.a?.url).toBe("https://127.0.0.1:8443");
    expect(resolved.tls?.ca_file).toBe(loaded.tls?.ca_file);
  });
});
