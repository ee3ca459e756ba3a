import { createHash } from "node:crypto";
import { mkdtemp, open, readFile, rm, type FileHandle } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { episodeId } from "#sdk/identity/episode-id.js";
import {
  ENCODED_LINE,
  RecordsWriter,
  encodeRecordLine,
  encodeRecordLines,
} from "#sdk/store/records-writer.js";
import { linesOf } from "#sdk/util/buffer-parts.js";
import type { RecordBase } from "#sdk/wire/storage.js";

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), "gym-batches-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("records spanning many write batches", () => {
  it("land in order, byte for byte, whatever their sizes (lines larger than a batch included)", async () => {
    const sizes = [
      10, 3_000_000, 9_500_000, 5, 7_000_000, 12, 4_200_000, 8_388_607, 1, 20_000_000, 2,
    ];
    const records = sizes.map((size, i) => ({
      episode_id: episodeId(`r${i}`),
      text: "é".repeat(Math.floor(size / 4)) + "x".repeat(size % 7),
    }));
    const manifest = await new RecordsWriter({
      checkpointDir: dir,
      kind: "resources",
      instance: "batches",
      checkpointId: "c1",
    }).write(records);
    const bytes = await readFile(
      path.join(dir, "gym", "resources", "batches", manifest.records_file),
    );
    const expected = Buffer.from(records.map(encodeRecordLine).join(""), "utf8");
    expect(bytes.equals(expected)).toBe(true);
    expect(manifest.records_sha256).toBe(createHash("sha256").update(expected).digest("hex"));
    expect(manifest.record_count).toBe(records.length);
  });

  it("write encoded lines byte for byte, long runs of adjacent lines from where they lie", async () => {
    // Records of every source in one file: lines adjacent in one block (a worker's export as
    // it arrived), lines apart, a line larger than a batch, and records encoded by the writer.
    const plain = Array.from({ length: 400 }, (_, i) => ({
      episode_id: episodeId(`p${i}`),
      text: `${"é".repeat(i % 50)}${"y".repeat((i * 37) % 3000)}`,
    }));
    const huge = { episode_id: episodeId("huge"), text: "z".repeat(9_000_000) };
    const block = Buffer.concat(encodeRecordLines(plain.slice(0, 300)));
    const blockLines = linesOf([block]).lines;
    const apart = plain.slice(300, 350).map((r) => Buffer.from(encodeRecordLine(r)));
    const records = [
      ...plain
        .slice(0, 300)
        .map((r, i) => ({ episode_id: r.episode_id, [ENCODED_LINE]: blockLines[i]! })),
      ...plain
        .slice(300, 350)
        .map((r, i) => ({ episode_id: r.episode_id, [ENCODED_LINE]: apart[i]! })),
      { episode_id: huge.episode_id, [ENCODED_LINE]: Buffer.from(encodeRecordLine(huge)) },
      ...plain.slice(350),
    ];
    const expected = Buffer.from([...plain, huge].map(encodeRecordLine).join(""), "utf8");
    const reordered = Buffer.from(
      [...plain.slice(0, 350), huge, ...plain.slice(350)].map(encodeRecordLine).join(""),
      "utf8",
    );
    expect(expected.length).toBe(reordered.length);
    const copy = vi.spyOn(Buffer.prototype, "copy");
    let manifest;
    try {
      manifest = await new RecordsWriter({
        checkpointDir: dir,
        kind: "resources",
        instance: "encoded",
        checkpointId: "c1",
      }).write(records);
      // The block's lines go out from the block itself: no copy reads from its memory.
      expect(copy.mock.contexts.some((source) => (source as Buffer).buffer === block.buffer)).toBe(
        false,
      );
    } finally {
      copy.mockRestore();
    }
    const bytes = await readFile(
      path.join(dir, "gym", "resources", "encoded", manifest.records_file),
    );
    expect(bytes.equals(reordered)).toBe(true);
    expect(manifest.records_sha256).toBe(createHash("sha256").update(reordered).digest("hex"));
    expect(manifest.record_count).toBe(records.length);
  });

  it("fail the commit when the last write fails, publishing nothing", async () => {
    // One small batch: its write is the file's only one, and the last.
    const probe = await open(path.join(dir, "probe"), "w");
    const handleClass = Object.getPrototypeOf(probe) as { writev: FileHandle["writev"] };
    await probe.close();
    const writev = vi
      .spyOn(handleClass, "writev")
      .mockRejectedValue(Object.assign(new Error("no space left on device"), { code: "ENOSPC" }));
    try {
      const writing = new RecordsWriter({
        checkpointDir: dir,
        kind: "resources",
        instance: "full",
        checkpointId: "c1",
      }).write([{ episode_id: episodeId("a"), n: 1 } as RecordBase]);
      await expect(writing).rejects.toMatchObject({ code: "invalid_checkpoint_state" });
      expect(writev).toHaveBeenCalled();
    } finally {
      writev.mockRestore();
    }
    await expect(
      readFile(path.join(dir, "gym", "resources", "full", "manifest.json")),
    ).rejects.toMatchObject({ code: "ENOENT" });
  });

  it("encodes records into chunks whose bytes are the records' stored lines", () => {
    const records = [
      { episode_id: episodeId("a"), text: "€".repeat(700_000) },
      { episode_id: episodeId("b"), n: 2n ** 70n, x: NaN },
      { episode_id: episodeId("c"), text: "q".repeat(3_000_000) },
    ];
    const chunks = encodeRecordLines(records);
    expect(chunks.length).toBeGreaterThan(1);
    expect(Buffer.concat(chunks).toString("utf8")).toBe(records.map(encodeRecordLine).join(""));
    expect(() =>
      encodeRecordLines([{ episode_id: episodeId("d"), f: () => 1 } as RecordBase]),
    ).toThrow(/episode 'd-a0'|d#0|'d/);
  });
});
