/**
 * The session router of a multi-worker server, with an in-process "owner" worker on a Unix
 * socket: a request for another worker's session is passed through unchanged and its answer
 * streamed back; a client that leaves while the owner still works on its request has that
 * request cancelled upstream; an owner that is gone is a typed 410.
 */
import { mkdtempSync, rmSync } from "node:fs";
import {
  createServer,
  request,
  type IncomingMessage,
  type RequestListener,
  type Server,
} from "node:http";
import { createServer as createNetServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { SessionRouter, type OwnerRoute } from "#sdk/server/routing/session-router.js";
import { SocketMux } from "#sdk/server/routing/socket-mux.js";

const cleanups: (() => void | Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function listening(server: Server, at: string | number): Promise<void> {
  await new Promise<void>((resolve) => server.listen(at, () => resolve()));
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
}

/**
 * An owner worker at `socket`, as a server runs it: a socket per peer worker, each passed-on
 * request a stream of it handed to an HTTP server that never listens. Returns how many
 * sockets peers hold open to it.
 */
async function ownerAt(socket: string, handler: RequestListener): Promise<() => Promise<number>> {
  const http = createServer(handler);
  const server = createNetServer((peer) => {
    new SocketMux(peer, (stream) => http.emit("connection", stream));
  });
  await new Promise<void>((resolve) => server.listen(socket, () => resolve()));
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        http.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return () =>
    new Promise<number>((resolve, reject) =>
      server.getConnections((error, count) => (error ? reject(error) : resolve(count))),
    );
}

/** A router on a TCP port whose sessions named "owner" live behind `ownerSocket`. */
async function routerTo(ownerSocket: string, gone = false): Promise<number> {
  const dir = path.dirname(ownerSocket);
  const router = new SessionRouter(
    {
      routeOwner: (owner): OwnerRoute =>
        owner === null
          ? { to: "local" }
          : gone
            ? { to: "gone", owner }
            : { to: "worker", routingId: owner },
      socketOf: (id) => path.join(dir, `${id}.sock`),
    },
    (req) => (req.headers["x-ng-session-owner"] as string | undefined) ?? null,
    (_req, res) => res.end("served here"),
  );
  cleanups.push(() => router.close());
  const server = createServer(router.listener);
  await listening(server, 0);
  return (server.address() as AddressInfo).port;
}

/** Sends a request naming `owner`; resolves with status and body, or the abort error. */
function send(port: number, owner: string | null, signal?: AbortSignal) {
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request(
      {
        port,
        method: "POST",
        path: "/seed?x=1",
        headers: owner === null ? {} : { "x-ng-session-owner": owner, "x-custom": "kept" },
        signal,
      },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => (body += chunk));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on("error", reject);
    req.end(JSON.stringify({ hello: "owner" }));
  });
}

function ownerDir(): string {
  const dir = mkdtempSync(path.join(tmpdir(), "ng-router-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

describe("SessionRouter", () => {
  it("passes a request for another worker's session through unchanged and streams the answer", async () => {
    const dir = ownerDir();
    const seen: { url?: string; custom?: string; body?: string } = {};
    await ownerAt(path.join(dir, "owner.sock"), (req, res) => {
      let body = "";
      req.on("data", (chunk: Buffer) => (body += chunk.toString()));
      req.on("end", () => {
        Object.assign(seen, { url: req.url, custom: req.headers["x-custom"], body });
        res.writeHead(201, { "x-from": "owner" });
        res.end("served by the owner");
      });
    });
    const port = await routerTo(path.join(dir, "owner.sock"));
    expect(await send(port, "owner")).toEqual({ status: 201, body: "served by the owner" });
    expect(seen).toEqual({ url: "/seed?x=1", custom: "kept", body: '{"hello":"owner"}' });
    expect(await send(port, null)).toEqual({ status: 200, body: "served here" });
  });

  it("cancels the owner's request when its client leaves before the answer", async () => {
    const dir = ownerDir();
    let arrived: () => void = () => undefined;
    const arrival = new Promise<void>((resolve) => (arrived = resolve));
    let cancelled: () => void = () => undefined;
    const cancellation = new Promise<void>((resolve) => (cancelled = resolve));
    // The owner never answers (a request parked behind a checkpoint, say): only a cancelled
    // upstream connection ends it.
    await ownerAt(path.join(dir, "owner.sock"), (req: IncomingMessage, res) => {
      res.on("close", () => {
        if (!res.writableFinished) cancelled();
      });
      req.resume();
      arrived();
    });
    const port = await routerTo(path.join(dir, "owner.sock"));
    const client = new AbortController();
    const sending = send(port, "owner", client.signal).catch((error: unknown) => error);
    await arrival;
    client.abort();
    expect(((await sending) as Error).name).toBe("AbortError");
    await cancellation;
  });

  it("passes hundreds of parked requests to an owner over one socket, each answered in turn", async () => {
    const dir = ownerDir();
    const parked: (() => void)[] = [];
    const connections = await ownerAt(path.join(dir, "owner.sock"), (req, res) => {
      req.resume();
      parked.push(() => res.end(`answer to ${req.url}`));
    });
    const port = await routerTo(path.join(dir, "owner.sock"));
    const replies = Array.from({ length: 300 }, () => send(port, "owner"));
    await expect.poll(() => parked.length, { timeout: 10_000 }).toBe(300);
    // Every request is parked at the owner, and the router holds one socket to it.
    expect(await connections()).toBe(1);
    for (const answer of parked.reverse()) answer();
    const bodies = (await Promise.all(replies)).map((reply) => reply.body);
    expect(bodies).toEqual(Array.from({ length: 300 }, () => "answer to /seed?x=1"));
  });

  it("answers 410 session_owner_gone when the owner's socket is not there", async () => {
    const dir = ownerDir();
    const port = await routerTo(path.join(dir, "owner.sock"));
    const reply = await send(port, "owner");
    expect(reply.status).toBe(410);
    expect(JSON.parse(reply.body).error.code).toBe("session_owner_gone");
  });

  it("answers 410 session_owner_gone for a session whose worker is gone", async () => {
    const dir = ownerDir();
    const port = await routerTo(path.join(dir, "owner.sock"), true);
    const reply = await send(port, "owner");
    expect(reply.status).toBe(410);
    expect(JSON.parse(reply.body).error.code).toBe("session_owner_gone");
  });
});
