/**
 * A call to another server that fails is that server's fault, not the caller's bug: the Simple
 * Agent's `/run` answers 502 with a typed code naming the other server (`upstream_unreachable`
 * when it cannot be reached, `upstream_error` when it refused), never a 500 `internal_error`.
 */
import { createServer, type Server as HttpServer } from "node:http";
import type { AddressInfo } from "node:net";
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import { RecordingCounter, Stack, cleanup } from "../../support/simple-agent-harness.js";

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
  await cleanup();
});

async function listening(server: HttpServer): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** A URL nothing listens on: a port that was bound, then released. */
async function deadUrl(): Promise<string> {
  const server = createServer();
  const url = await listening(server);
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return url;
}

/** A server answering every request with `status` and the error envelope of `code`. */
async function refusing(status: number, code: string): Promise<string> {
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () =>
      res
        .writeHead(status, { "content-type": "application/json" })
        .end(JSON.stringify({ error: { code, detail: `refused by the stub (${code})` } })),
    );
  });
  closers.push(() => new Promise((resolve) => server.close(() => resolve())));
  return await listening(server);
}

const RUN = { responses_create_params: { input: "count to one" } };

describe("a failed call to another server of the deployment", () => {
  it("answers 502 upstream_unreachable naming the server that cannot be reached", async () => {
    const stack = new Stack({ checkpoint: false });
    await stack.resources(RecordingCounter);
    stack.register("policy", "model", await deadUrl());
    const { url } = await stack.agent({ resources_server: "resources" });

    const res = await request(url).post("/run").send(RUN);
    expect(res.status, JSON.stringify(res.body)).toBe(502);
    expect(res.body.error.code).toBe("upstream_unreachable");
    expect(res.body.error.detail).toMatch(/^policy: POST .*cannot connect/);
  });

  it("answers 502 upstream_error with the other server's status and code", async () => {
    const stack = new Stack({ checkpoint: false });
    stack.register("resources", "resources", await refusing(409, "stale_attempt"));
    stack.register("policy", "model", await deadUrl());
    const { url } = await stack.agent({ resources_server: "resources" });

    const res = await request(url).post("/run").send(RUN);
    expect(res.status, JSON.stringify(res.body)).toBe(502);
    expect(res.body.error.code).toBe("upstream_error");
    expect(res.body.error.detail).toMatch(
      /^resources \/seed_session answered HTTP 409: .*stale_attempt/,
    );
  });

  it.each([
    [
      "refuses the call",
      502,
      JSON.stringify({ detail: "the inference backend at x is unreachable" }),
    ],
    ["answers a body that is not a Responses object", 200, JSON.stringify({ nope: true })],
  ])(
    "answers 502 upstream_error naming the model server when it %s",
    async (_what, status, body) => {
      const model = createServer((req, res) => {
        req.resume();
        req.on("end", () =>
          res.writeHead(status, { "content-type": "application/json" }).end(body),
        );
      });
      closers.push(() => new Promise((resolve) => model.close(() => resolve())));
      const stack = new Stack({ checkpoint: false });
      await stack.resources(RecordingCounter);
      stack.register("policy", "model", await listening(model));
      const { url } = await stack.agent({ resources_server: "resources" });

      const res = await request(url).post("/run").send(RUN);
      expect(res.status, JSON.stringify(res.body)).toBe(502);
      expect(res.body.error.code).toBe("upstream_error");
      expect(res.body.error.detail).toMatch(/model server policy/);
    },
  );
});
