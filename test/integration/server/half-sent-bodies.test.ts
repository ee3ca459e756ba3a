/**
 * Requests whose body has not arrived are not work in flight: half-sent bodies on every server
 * kind, checkpointing on, neither hold a prepare nor show in its report, and once their bodies
 * arrive (after resume) they are served. A server bounds how long a body may take to arrive.
 */
import { createServer, type Server as HttpServer } from "node:http";
import { connect, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import type { Server } from "#sdk/server/server.js";
import { deferred } from "#sdk/util/deferred.js";
import { controlRoutes } from "../../support/control-routes.js";
import { flush } from "../../support/test-participant.js";
import { RestartOnlyAgent, ScriptedAgent } from "../../support/agent-harness.js";
import {
  CHECKPOINT,
  EchoResources,
  PlainServer,
  QuickEnvironment,
  TOKEN,
  codeOf,
  policyServer,
  send,
} from "./kinds.js";

const { control, status } = controlRoutes(TOKEN);
/** How many half-sent bodies each test leaves open. */
const HALF_SENT = 20;

const TASK = { task_id: { taskset: "t", task_id: "1" }, task_input: { n: 1 } };

interface Kind {
  readonly kind: string;
  readonly make: () => Server;
  /** The request path and full JSON body of request `i`. */
  readonly request: (i: number) => { path: string; body: string };
}

const kinds: Kind[] = [
  {
    kind: "resources",
    make: () => new EchoResources({ name: "resources", checkpoint: CHECKPOINT }),
    request: (i) => ({ path: `/ng-rollout/r${i}/seed_session`, body: JSON.stringify({ n: i }) }),
  },
  {
    kind: "session agent",
    make: () => new ScriptedAgent({ name: "agent", checkpoint: CHECKPOINT }),
    request: (i) => ({ path: `/ng-rollout/r${i}/v1/responses`, body: '{"input": "hello"}' }),
  },
  {
    kind: "restart-only agent",
    make: () => new RestartOnlyAgent({ name: "agent-ro", checkpoint: CHECKPOINT }),
    request: (i) => ({ path: `/ng-rollout/r${i}/v1/responses`, body: '{"input": "hello"}' }),
  },
  {
    kind: "environment",
    make: () => new QuickEnvironment({ name: "environment", checkpoint: CHECKPOINT }),
    request: (i) => ({
      path: "/run",
      body: JSON.stringify({ task: TASK, episode_id: { rollout_id: `r${i}` } }),
    }),
  },
  {
    kind: "policy model",
    make: () => policyServer("policy"),
    request: (i) => ({ path: `/ng-rollout/r${i}/v1/responses`, body: '{"input": "hello"}' }),
  },
  {
    kind: "plain",
    make: () => new PlainServer({ name: "plain", checkpoint: CHECKPOINT }),
    request: (i) => ({ path: `/ng-rollout/r${i}/echo`, body: JSON.stringify({ n: i }) }),
  },
];

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Serves `server`'s app on a socket whose arriving request heads the test can count. */
async function serveCounting(
  server: Server,
): Promise<{ url: string; heads: (n: number) => Promise<void> }> {
  const http: HttpServer = createServer(server.app());
  let seen = 0;
  const waiters: { n: number; resolve: () => void }[] = [];
  http.on("request", () => {
    seen += 1;
    for (const waiter of waiters.filter((w) => w.n <= seen)) waiter.resolve();
  });
  await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve));
  cleanups.push(async () => {
    http.closeAllConnections();
    await new Promise<void>((resolve) => http.close(() => resolve()));
    await server.close();
  });
  const { port } = http.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    heads: (n) => {
      if (seen >= n) return Promise.resolve();
      const reached = deferred<void>();
      waiters.push({ n, resolve: () => reached.resolve() });
      return reached.promise;
    },
  };
}

/** A request whose head and first half of body are sent; `finish()` sends the rest. */
interface HalfSent {
  /** The reply's status line (empty when the connection closed without one). */
  readonly reply: Promise<string>;
  /** Sends the rest of the body; resolves with {@link reply}. */
  finish(): Promise<string>;
}

function sendHalf(url: string, path: string, body: string): HalfSent {
  const { port } = new URL(url);
  const socket: Socket = connect(Number(port), "127.0.0.1");
  socket.on("error", () => undefined);
  cleanups.push(async () => {
    socket.destroy();
  });
  const bytes = Buffer.from(body);
  const half = Math.floor(bytes.length / 2);
  socket.write(
    `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${bytes.length}\r\n\r\n`,
  );
  socket.write(bytes.subarray(0, half));
  const reply = deferred<string>();
  let text = "";
  socket.on("data", (chunk: Buffer) => {
    text += chunk.toString("latin1");
    const line = text.indexOf("\r\n");
    if (line >= 0) reply.resolve(text.slice(0, line));
  });
  socket.on("close", () => reply.resolve(text));
  return {
    reply: reply.promise,
    finish: () => {
      socket.write(bytes.subarray(half));
      return reply.promise;
    },
  };
}

describe.each(kinds)("half-sent bodies on a $kind server", ({ make, request }) => {
  it("are not in flight: prepare is ready at once, and they are served after resume", async () => {
    const server = make();
    const { url, heads } = await serveCounting(server);
    const pending = Array.from({ length: HALF_SENT }, (_, i) => {
      const { path, body } = request(i);
      return sendHalf(url, path, body);
    });
    await heads(HALF_SENT);
    await flush(); // whatever the heads set going has run
    const report = (
      await status<{ report: { counts: Record<string, number>; restarts: string[] } }>(url)
    ).report;
    expect(report.counts.inflight ?? 0).toBe(0);
    expect(report.restarts).toEqual([]);
    // A deadline short of the test's timeout: a prepare held by them answers `preparing`.
    const prepared = await control(url, "prepare", {
      checkpoint_id: "c1",
      deadline_ts: Date.now() / 1000 + 3,
    });
    expect(prepared.status).toBe(200);
    expect(prepared.body.phase).toBe("prepared");
    expect(prepared.body.report.blockers).toEqual([]);
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    const lines = await Promise.all(pending.map((half) => half.finish()));
    for (const line of lines) {
      expect(line).toMatch(/^HTTP\/1\.1 \d{3}/);
      expect(line).not.toMatch(/^HTTP\/1\.1 500/);
    }
  });
});

describe("body reception", () => {
  it("is bounded by requestTimeoutMs: a body that never arrives is answered 408", async () => {
    const server = new PlainServer({
      name: "plain",
      checkpoint: CHECKPOINT,
      requestTimeoutMs: 500,
    });
    const { url } = await server.listen({ port: 0 });
    cleanups.push(() => server.close());
    const half = sendHalf(url, "/echo", '{"never": "finished"}');
    // Nothing more is sent: the server answers by itself once the bound passes.
    expect(await half.reply).toMatch(/^HTTP\/1\.1 408/);
  });

  it("answers a declared length past the limit at once, before any body", async () => {
    const server = new PlainServer({ name: "plain", checkpoint: CHECKPOINT });
    const { url } = await server.listen({ port: 0 });
    cleanups.push(() => server.close());
    const reply = await send(url, {
      path: "/ng-rollout/r/echo",
      headers: { "content-type": "application/json", "content-length": "73400320" },
      unfinished: true,
    });
    expect(reply.status).toBe(413);
    expect(codeOf(reply)).toBe("invalid_request");
    expect(reply.headers.connection).toBe("close");
  });
});
