/**
 * `--wait-ready`: the controller waits, bounded and with progress, for servers still starting on
 * other machines, and names those that never answered.
 */
import { createServer, type Server } from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import { ServerClient } from "#sdk/client/server-client.js";
import { CliError, type Io } from "#sdk/cli/output.js";
import { waitReady } from "#sdk/cli/wait-ready.js";
import type { ResolvedDeployment } from "#sdk/wire/deployment.js";

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

function memoryIo(): Io & { errors: string[] } {
  const errors: string[] = [];
  return {
    out: () => undefined,
    err: (line: string) => void errors.push(line),
    env: {},
    cwd: process.cwd(),
    errors,
  };
}

async function listen(status: number): Promise<{ server: Server; port: number }> {
  const server = createServer((_req, res) => {
    res.statusCode = status;
    res.end("{}");
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, port: (server.address() as { port: number }).port };
}

async function freePort(): Promise<number> {
  const { server, port } = await listen(200);
  await new Promise((resolve) => server.close(resolve));
  servers.splice(servers.indexOf(server), 1);
  return port;
}

function deployment(ports: Record<string, number>): ResolvedDeployment {
  return {
    checkpoint: null,
    servers: Object.fromEntries(
      Object.entries(ports).map(([name, port]) => [
        name,
        {
          kind: "resources" as const,
          url: `http://127.0.0.1:${port}`,
          host: "127.0.0.1",
          port,
          node: `node-${name}`,
          num_workers: 1,
          config: {},
        },
      ]),
    ),
  };
}

describe("waitReady", () => {
  it("returns once a server that starts late answers, saying what it waits for meanwhile", async () => {
    const up = await listen(200);
    const latePort = await freePort();
    const client = new ServerClient(deployment({ up: up.port, late: latePort }));
    const io = memoryIo();
    const late = createServer((_req, res) => res.end("{}"));
    servers.push(late);
    let started = false;
    const waiting = waitReady(client, io, { timeoutMs: 20_000, progressEveryMs: 300 });
    // The late server starts once the first progress line has named it.
    const poll = setInterval(() => {
      if (!started && io.errors.some((line) => line.includes("(late)"))) {
        started = true;
        late.listen(latePort, "127.0.0.1");
      }
    }, 20);
    try {
      await waiting;
    } finally {
      clearInterval(poll);
      await client.close();
    }
    expect(started).toBe(true);
    expect(io.errors[0]).toMatch(/waiting for 1 of 2 servers to answer \/health \(late\)/);
  });

  it("names every server that never answered, with its URL, node and why", async () => {
    const broken = await listen(503);
    const downPort = await freePort();
    const client = new ServerClient(deployment({ broken: broken.port, down: downPort }));
    const io = memoryIo();
    const failure = await waitReady(client, io, { timeoutMs: 800, progressEveryMs: 10_000 }).then(
      () => null,
      (error: unknown) => error,
    );
    await client.close();
    expect(failure).toBeInstanceOf(CliError);
    const message = (failure as CliError).message;
    expect(message).toMatch(/2 of 2 servers did not answer \/health within/);
    expect(message).toContain(`broken (http://127.0.0.1:${broken.port}, node node-broken)`);
    expect(message).toContain(`down (http://127.0.0.1:${downPort}, node node-down)`);
    expect(message).toMatch(/503/);
  });
});
