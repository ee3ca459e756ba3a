/**
 * A backend that fails a call is the backend's fault, not the policy server's: the caller gets
 * 502 with the backend's answer in `detail`, never a 500.
 */
import { createServer, type Server as HttpServer } from "node:http";
import type { AddressInfo } from "node:net";
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import { PolicyModelServer } from "#sdk/server/policy-model-server.js";
import { ServerLog } from "#sdk/testing/server-log.js";

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

/** A backend that answers every request with `status` and `body`. */
async function brokenBackend(status: number, body: string): Promise<string> {
  const server: HttpServer = createServer((req, res) => {
    req.resume();
    req.on("end", () => res.writeHead(status, { "content-type": "text/plain" }).end(body));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  closers.push(() => new Promise((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
}

/** The URL of a backend that is not running: a port that was just freed. */
async function deadBackend(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `http://127.0.0.1:${port}/v1`;
}

/** A backend that drops the connection of every request without answering. */
async function hangUpBackend(): Promise<string> {
  const server: HttpServer = createServer((req) => req.socket.destroy());
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  closers.push(() => new Promise((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
}

function policyIn(front: string, log?: ServerLog): PolicyModelServer {
  const server = new PolicyModelServer({
    name: "policy",
    config: { backend_url: front },
    ...(log === undefined ? { logLevel: "silent" } : { logger: log.logger }),
  });
  closers.push(() => server.close());
  return server;
}

describe("a failing inference backend", () => {
  it("answers 502 naming the backend's status when the backend answers an error", async () => {
    const policy = policyIn(await brokenBackend(500, "engine exploded"));
    const reply = await request(policy.app()).post("/v1/responses").send({ input: "hi" });
    expect(reply.status).toBe(502);
    expect(reply.body.detail).toMatch(/inference backend answered 500: engine exploded/);
  });

  it("answers 502 when the backend's body is not JSON", async () => {
    const policy = policyIn(await brokenBackend(200, "<html>gateway</html>"));
    const reply = await request(policy.app()).post("/v1/responses").send({ input: "hi" });
    expect(reply.status).toBe(502);
    expect(reply.body.detail).toMatch(/not JSON/);
  });

  it.each([false, true])(
    "answers 502 naming the backend when nothing listens there (stream: %s)",
    async (stream) => {
      const backend = await deadBackend();
      const log = new ServerLog();
      const policy = policyIn(backend, log);
      const reply = await request(policy.app()).post("/v1/responses").send({ input: "hi", stream });
      expect(reply.status).toBe(502);
      expect(reply.body.detail).toContain(
        `inference backend at ${new URL(backend).origin} is unreachable`,
      );
      expect(reply.body.detail).toMatch(/ECONNREFUSED/);
      // Logged as another server's failure, so a dead backend shows in the model server's log.
      expect(log.since(0)).toEqual([
        expect.stringMatching(/^a call to another server failed: .*unreachable/),
      ]);
    },
  );

  it("answers 502 when the backend drops the connection without answering", async () => {
    const policy = policyIn(await hangUpBackend());
    const reply = await request(policy.app()).post("/v1/responses").send({ input: "hi" });
    expect(reply.status).toBe(502);
    expect(reply.body.detail).toMatch(/is unreachable/);
  });
});
