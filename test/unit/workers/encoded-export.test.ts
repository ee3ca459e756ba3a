/**
 * A worker's export as stored lines: the bytes cross a frame channel untouched (next to a JSON
 * head), become records the writer copies instead of encoding, and the records file is
 * byte-identical to the one the writer encodes from the records themselves.
 */
import { createServer, connect, type Server } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { decodeExport, encodeExport } from "#sdk/workers/encoded-export.js";
import { FrameBytes, FrameChannel, type FrameHandler } from "#sdk/workers/frame-channel.js";
import { episodeId } from "#sdk/identity/episode-id.js";
import { ENCODED_LINE } from "#sdk/store/records-writer.js";
import { writeRecordsAs } from "../../support/craft-checkpoint.js";
import type { RecordBase } from "#sdk/wire/storage.js";

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

function tempDir(): string {
  const dir = mkdtempSync(path.join(tmpdir(), "ng-encoded-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A channel whose peer answers with `handler`. */
async function channelTo(handler: FrameHandler): Promise<FrameChannel> {
  const file = path.join(tempDir(), "c.sock");
  const server: Server = createServer((socket) => new FrameChannel(socket, handler));
  await new Promise<void>((resolve) => server.listen(file, resolve));
  const client = connect(file);
  await new Promise<void>((resolve) => client.once("connect", resolve));
  cleanups.push(() => {
    client.destroy();
    server.close();
  });
  return new FrameChannel(client, () => null);
}

const records = [
  { episode_id: episodeId("r", 0), owner: "w0", state: { count: 3, text: 'é\u2028\n"q"' } },
  { episode_id: episodeId("s", 2), owner: "w1", state: { big: 2n ** 70n, nan: NaN } },
] as unknown as RecordBase[];

async function writeAndRead(list: readonly RecordBase[]): Promise<Buffer> {
  return await writeRecordsAs(tempDir(), "counter", list);
}

describe("encoded exports", () => {
  it("carries raw bytes next to a JSON head across a channel, both ways", async () => {
    const bytes = Buffer.from([0, 10, 255, 74, 69, 106]);
    const a = await channelTo((_kind, body) => {
      const sent = body as unknown as FrameBytes;
      return new FrameBytes({ got: sent.head, length: sent.byteLength }, [
        ...sent.parts,
        ...sent.parts,
      ]);
    });
    const reply = (await a.call("echo", new FrameBytes({ n: 2n ** 70n }, bytes))) as unknown;
    expect(reply).toBeInstanceOf(FrameBytes);
    expect((reply as FrameBytes).head).toEqual({ got: { n: 2n ** 70n }, length: 6 });
    expect([...Buffer.concat((reply as FrameBytes).parts)]).toEqual([...bytes, ...bytes]);
  });

  it("writes a worker's lines byte for byte as the writer encodes the records", async () => {
    const a = await channelTo(() => encodeExport(records));
    const decoded = decodeExport(await a.call("export"));
    expect(decoded.map((record) => record.episode_id)).toEqual([
      episodeId("r", 0),
      episodeId("s", 2),
    ]);
    expect(decoded.every((record) => record[ENCODED_LINE] instanceof Buffer)).toBe(true);
    expect((await writeAndRead(decoded)).equals(await writeAndRead(records))).toBe(true);
  });

  it("refuses a block whose lines do not pair with its episodes", () => {
    const block = encodeExport(records);
    const bytes = Buffer.concat(block.parts);
    const short = new FrameBytes(block.head, bytes.subarray(0, bytes.indexOf(10) + 1));
    expect(() => decodeExport(short)).toThrow(/do not match/);
    expect(() => decodeExport([])).toThrow(/without its lines/);
  });
});
