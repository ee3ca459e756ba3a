import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { CollectionDir, type CollectionManifest } from "#sdk/collect/collection-dir.js";

let root: string;
beforeEach(() => {
  root = mkdtempSync(path.join(tmpdir(), "gym-cdir-"));
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

function manifest(id: string, second: number): CollectionManifest {
  return {
    format: 1,
    run_id: "r1",
    session: 1,
    checkpoint_id: id,
    created_at: new Date(Date.UTC(2026, 0, 1, 0, 0, second)).toISOString(),
    continued: [{ rollout_id: "r1-0-0", attempt: 0, row: 0, repeat: 0 }],
    restarted: [],
  };
}

/** A directory holding a run. */
async function startedDir(): Promise<CollectionDir> {
  const dir = new CollectionDir(root);
  await dir.createRun({
    format: 1,
    run_id: "r1",
    session: 1,
    created_at: "x",
    input: "t.jsonl",
    input_digest: "d",
    rows: 1,
    repeats: 1,
  });
  return dir;
}

describe("CollectionDir", () => {
  it("publishes the manifest, then LATEST, keeping the newest two and no unpublished one", async () => {
    const dir = await startedDir();
    expect(await dir.readLatest()).toBeNull();
    for (const [id, second] of [
      ["c1", 1],
      ["c2", 2],
    ] as const) {
      mkdirSync(dir.checkpointDir(id), { recursive: true });
      await dir.publish(manifest(id, second));
    }
    mkdirSync(dir.checkpointDir("failed"), { recursive: true }); // committed, never published
    mkdirSync(dir.checkpointDir("c3"), { recursive: true });
    await dir.publish(manifest("c3", 3));
    expect(readdirSync(dir.checkpointsDir).sort()).toEqual(["c2", "c3"]);
    expect(readFileSync(dir.latestFile, "utf8")).toBe("c3\n");
    expect((await dir.readLatest())?.checkpoint_id).toBe("c3");
    expect(readdirSync(root).filter((name) => name.endsWith(".tmp"))).toEqual([]);
    await dir.clear();
    expect(existsSync(dir.runFile) || existsSync(dir.checkpointsDir)).toBe(false);
  });

  it("refuses a LATEST that names a checkpoint without a manifest", async () => {
    const dir = await startedDir();
    mkdirSync(dir.checkpointDir("c1"), { recursive: true });
    await dir.publish(manifest("c1", 1));
    rmSync(path.join(dir.checkpointDir("c1"), "collection.json"));
    await expect(dir.readLatest()).rejects.toThrow(/has no collection\.json/);
  });
});
