import { createHash } from "node:crypto";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { episodeId } from "#sdk/identity/episode-id.js";
import { RecordsWriter, encodeRecordLine } from "#sdk/store/records-writer.js";

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
});
