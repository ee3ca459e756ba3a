import { createServer, connect, type Server, type Socket } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { FrameBytes, FrameChannel, ChannelClosedError } from "#sdk/workers/frame-channel.js";
import { CheckpointError, DetailError, GymError, InvalidRequestError } from "#sdk/errors.js";
import type { FrameHandler } from "#sdk/workers/frame-channel.js";

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

/** Two connected channels over a Unix socket: `a` calls, `b` answers with `handler`. */
async function pair(
  handler: FrameHandler,
  handlerA: FrameHandler = () => null,
): Promise<{ a: FrameChannel; b: FrameChannel; sockets: Socket[] }> {
  const dir = mkdtempSync(path.join(tmpdir(), "ng-channel-"));
  const file = path.join(dir, "c.sock");
  let b: FrameChannel | null = null;
  const sockets: Socket[] = [];
  const server: Server = createServer((socket) => {
    sockets.push(socket);
    b = new FrameChannel(socket, handler);
  });
  await new Promise<void>((resolve) => server.listen(file, resolve));
  const client = connect(file);
  await new Promise<void>((resolve) => client.once("connect", resolve));
  sockets.push(client);
  const a = new FrameChannel(client, handlerA);
  await expect.poll(() => b !== null).toBe(true);
  cleanups.push(() => {
    client.destroy();
    server.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { a, b: b as unknown as FrameChannel, sockets };
}

describe("FrameChannel", () => {
  it("answers calls in any order, each to its caller", async () => {
    const { a } = await pair(async (kind, body) => {
      const { wait } = body as { wait: number };
      await new Promise((resolve) => setTimeout(resolve, wait));
      return { kind, wait };
    });
    const slow = a.call("slow", { wait: 50 });
    const fast = a.call("fast", { wait: 0 });
    const order: string[] = [];
    await Promise.all([slow.then(() => order.push("slow")), fast.then(() => order.push("fast"))]);
    expect(order).toEqual(["fast", "slow"]);
    expect(await slow).toEqual({ kind: "slow", wait: 50 });
  });

  it("carries numbers plain JSON loses (NaN, infinities, big integers) unchanged", async () => {
    const { a } = await pair((_kind, body) => body);
    const value = { nan: NaN, inf: Infinity, neg: -Infinity, big: 2n ** 70n, text: "é\u2028" };
    const echoed = (await a.call("echo", value)) as Record<string, unknown>;
    expect(echoed.nan).toBeNaN();
    expect(echoed.inf).toBe(Infinity);
    expect(echoed.neg).toBe(-Infinity);
    expect(echoed.big).toBe(2n ** 70n);
    expect(echoed.text).toBe("é\u2028");
  });

  it("moves a large reply whole (a big export)", async () => {
    const line = "x".repeat(1024);
    const { a } = await pair(() => Array.from({ length: 20_000 }, (_, i) => ({ i, line })));
    const reply = (await a.call("export", null)) as { i: number }[];
    expect(reply).toHaveLength(20_000);
    expect(reply[19_999]?.i).toBe(19_999);
  });

  it("hands large bytes on as the chunks they arrived in, never joined", async () => {
    const big = Buffer.alloc(8 * 1024 * 1024);
    for (let i = 0; i < big.length; i += 4096) big.writeUInt32BE(i, i);
    const { a } = await pair((_kind, body) => {
      const sent = body as unknown as FrameBytes;
      // Received as the socket's chunks: several parts, none copied into one buffer.
      return { parts: sent.parts.length, equal: Buffer.concat(sent.parts).equals(big) };
    });
    const reply = (await a.call(
      "put",
      new FrameBytes({ n: 1 }, [big.subarray(0, 5), big.subarray(5)]),
    )) as {
      parts: number;
      equal: boolean;
    };
    expect(reply.equal).toBe(true);
    expect(reply.parts).toBeGreaterThan(1);
  });

  it("passes a typed refusal on as the same typed error (422 issues included)", async () => {
    const { a } = await pair((kind) => {
      if (kind === "stale") throw CheckpointError.stale("ckpt-1");
      if (kind === "invalid")
        throw new InvalidRequestError("bad", [
          { path: ["deadline_ts"], message: "expected number" },
        ]);
      if (kind === "detail") throw new DetailError(404, "no such session");
      throw new TypeError("a bug");
    });
    const stale = await a.call("stale").catch((error: unknown) => error);
    expect(stale).toBeInstanceOf(GymError);
    expect((stale as GymError).toEnvelope()).toEqual(CheckpointError.stale("ckpt-1").toEnvelope());
    const invalid = await a.call("invalid").catch((error: unknown) => error);
    expect((invalid as GymError).status).toBe(422);
    expect((invalid as GymError).toEnvelope().error.issues).toEqual([
      { path: ["deadline_ts"], message: "expected number" },
    ]);
    const detail = await a.call("detail").catch((error: unknown) => error);
    expect(detail).toBeInstanceOf(DetailError);
    expect((detail as DetailError).status).toBe(404);
    const bug = await a.call("bug").catch((error: unknown) => error);
    expect(bug).not.toBeInstanceOf(GymError);
    expect((bug as Error).message).toBe("a bug");
  });

  it("rejects pending calls when the peer goes away", async () => {
    const { a, sockets } = await pair(() => new Promise(() => undefined));
    const pending = a.call("never", null, null);
    sockets[0]?.destroy();
    await expect(pending).rejects.toBeInstanceOf(ChannelClosedError);
    expect(a.closed).toBe(true);
    await expect(a.call("after")).rejects.toBeInstanceOf(ChannelClosedError);
  });

  it("writes a synchronous handler's reply before reading the next message", async () => {
    const seen: string[] = [];
    const { a, b } = await pair((kind) => {
      seen.push(kind);
      return kind;
    });
    // Both frames leave in one write; the first is answered before the second is handled.
    const first = a.call("claim");
    a.send("close");
    expect(await first).toBe("claim");
    await expect.poll(() => seen).toEqual(["claim", "close"]);
    expect(b.closed).toBe(false);
  });
});
