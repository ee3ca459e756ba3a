/**
 * What the ledger makes durable and in which order:
 * file and directory fsyncs, their count per batch, the one directory listing of an import, and
 * a delete that runs between a retire's fence and its removal. Real files in real temporary
 * directories; `fsyncDir` and `node:fs/promises` are wrapped to record and intercept.
 */
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { custodyRow, ledgerAt, listDir, makeTempDir, plant, removeTempDir } from "./helpers.js";

const hooks = vi.hoisted(() => ({
  /** `dirsync <dir>`, `sync <file>` and `readdir <dir>`, in call order. */
  events: [] as string[],
  /** Runs at each directory fsync, before it. */
  beforeDirSync: null as ((dir: string) => Promise<void> | void) | null,
}));

vi.mock("#sdk/store/fs-sync.js", async (importOriginal) => {
  const actual = await importOriginal<typeof import("#sdk/store/fs-sync.js")>();
  return {
    ...actual,
    fsyncDir: async (dir: string) => {
      await hooks.beforeDirSync?.(dir);
      hooks.events.push(`dirsync ${dir}`);
      await actual.fsyncDir(dir);
    },
  };
});

vi.mock("node:fs/promises", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:fs/promises")>();
  const open: typeof actual.open = async (file, flags, mode) => {
    const handle = await actual.open(file, flags, mode);
    const sync = handle.sync.bind(handle);
    const name = path.basename(String(file));
    // Only capture files: fsyncDir's own handle is recorded as `dirsync`.
    if (/\.(lineage|tokens)\./.test(name)) {
      handle.sync = async () => {
        hooks.events.push(`sync ${name}`);
        await sync();
      };
    }
    return handle;
  };
  const readdir = (async (dir: string, ...rest: unknown[]) => {
    // Not the fence lists' directory, looked at once per instance before its first operation,
    // nor the writer registry, listed once when the instance registers.
    const name = path.basename(dir);
    if (name !== "restore-fences" && name !== "writers") hooks.events.push(`readdir ${dir}`);
    return await (actual.readdir as (...args: unknown[]) => Promise<unknown>)(dir, ...rest);
  }) as typeof actual.readdir;
  return { ...actual, default: { ...actual, open, readdir }, open, readdir };
});

let dir: string;

beforeEach(async () => {
  dir = await makeTempDir();
  hooks.events = [];
  hooks.beforeDirSync = null;
});

afterEach(async () => {
  await removeTempDir(dir);
});

const dirSyncs = (): number => hooks.events.filter((event) => event.startsWith("dirsync")).length;

describe("rows", () => {
  it("creating a ledger fsyncs the file, then the directory; appending fsyncs the file only", async () => {
    const ledger = ledgerAt(dir);

    await ledger.record("r1", custodyRow("c1"));
    expect(hooks.events).toEqual(["sync r1.lineage.jsonl", `dirsync ${dir}`]);

    hooks.events = [];
    await ledger.record("r1", custodyRow("c2"));
    await ledger.recordFailure("r1", "c3", "worker_capture_failed");
    expect(hooks.events).toEqual(["sync r1.lineage.jsonl", "sync r1.lineage.jsonl"]);
  });

  it("a failure row that creates the ledger fsyncs the directory too", async () => {
    await ledgerAt(dir).recordFailure("r1", "c1", "worker_capture_failed");
    expect(hooks.events).toEqual(["sync r1.lineage.jsonl", `dirsync ${dir}`]);
  });

  it("unchanged and discarded rows sync nothing", async () => {
    const ledger = ledgerAt(dir);
    await ledger.record("r1", custodyRow("c1"));
    await ledger.retire(["r2"]);
    hooks.events = [];

    await ledger.record("r1", custodyRow("c1"));
    await ledger.record("r2", custodyRow("c1", "r2"));

    expect(hooks.events).toEqual([]);
  });
});

describe("retire", () => {
  it("fences every key, fsyncs the directory once, then removes the ledgers", async () => {
    const ledger = ledgerAt(dir);
    const keys = Array.from({ length: 30 }, (_, i) => `r${i}`);
    for (const key of keys) await ledger.record(key, custodyRow("c1", key));
    hooks.events = [];
    const seen: boolean[][] = [];
    hooks.beforeDirSync = () => {
      seen.push([
        keys.every((key) => existsSync(path.join(dir, `${key}.lineage.retired`))),
        keys.every((key) => existsSync(path.join(dir, `${key}.lineage.jsonl`))),
      ]);
    };

    await ledger.retire(keys);

    expect(seen).toEqual([[true, true]]);
    expect(dirSyncs()).toBe(1);
    expect((await listDir(dir)).every((name) => name.endsWith(".lineage.retired"))).toBe(true);
  });

  it("retiring again writes nothing but still fsyncs the directory once", async () => {
    const ledger = ledgerAt(dir);
    await ledger.record("r1", custodyRow("c1"));
    await ledger.retire(["r1"]);
    hooks.events = [];

    await ledger.retire(["r1"]);

    expect(hooks.events).toEqual([`dirsync ${dir}`]);
  });

  it("fsyncs a fence a crashed retire left before deleting the ledger beside it", async () => {
    await ledgerAt(dir).record("r1", custodyRow("c1"));
    await plant(dir, "r1.lineage.retired");
    const ledgerAtSync: boolean[] = [];
    hooks.beforeDirSync = () => {
      ledgerAtSync.push(existsSync(path.join(dir, "r1.lineage.jsonl")));
    };

    expect(await ledgerAt(dir).retire(["r1"])).toEqual({ removed: ["r1"], absent: [] });

    expect(ledgerAtSync).toEqual([true]);
  });

  it("keeps a ledger a delete and a new write recreated between fencing and removing", async () => {
    const ledger = ledgerAt(dir);
    await ledger.record("r1", custodyRow("c1"));
    hooks.beforeDirSync = async () => {
      hooks.beforeDirSync = null;
      await ledger.delete(["r1"]);
      await ledger.record("r1", custodyRow("new"));
    };

    const result = await ledger.retire(["r1"]);

    expect(result).toEqual({ removed: [], absent: ["r1"] });
    expect(await listDir(dir)).toEqual(["r1.lineage.jsonl"]);
    expect((await ledger.manifest("r1")).records.map((r) => r.model_call_id)).toEqual(["new"]);
  });

  it("the same holds when another process deletes and writes in between", async () => {
    const ledger = ledgerAt(dir);
    const other = ledgerAt(dir);
    await ledger.record("r1", custodyRow("c1"));
    hooks.beforeDirSync = async () => {
      hooks.beforeDirSync = null;
      await other.delete(["r1"]);
      await other.record("r1", custodyRow("new"));
    };

    await ledger.retire(["r1"]);

    expect((await ledgerAt(dir).rows("r1")).map((row) => row.model_call_id)).toEqual(["new"]);
  });
});

describe("delete", () => {
  it("fsyncs the directory once per non-empty batch, even when it found nothing", async () => {
    const ledger = ledgerAt(dir);
    for (const key of ["r1", "r2", "r3"]) await ledger.record(key, custodyRow("c1", key));
    hooks.events = [];

    await ledger.delete(["r1", "r2", "r3"]);
    expect(dirSyncs()).toBe(1);
    await ledger.delete(["r1", "never-recorded"]);
    expect(dirSyncs()).toBe(2);
    await ledger.delete([]);
    expect(dirSyncs()).toBe(2);
  });
});

describe("started markers", () => {
  it("marking an attempt started syncs neither the marker nor the directory", async () => {
    await ledgerAt(dir).markStarted("r-a1");
    expect(hooks.events).toEqual([]);
  });

  it("deleteUnstarted fsyncs the directory when it deletes, and nothing when started", async () => {
    const ledger = ledgerAt(dir);
    await ledger.record("r-a1", custodyRow("c1", "r-a1"));
    await ledger.record("r-a2", custodyRow("c1", "r-a2"));
    await ledger.markStarted("r-a2");
    hooks.events = [];

    await ledger.deleteUnstarted("r-a1");
    expect(hooks.events).toEqual([`dirsync ${dir}`]);
    await ledger.deleteUnstarted("r-a2");
    expect(hooks.events).toEqual([`dirsync ${dir}`]);
  });
});

describe("import", () => {
  /** Dead executions of `count` rollouts, then one import of all of them. */
  async function importRollouts(
    count: number,
    beforeDirSync: typeof hooks.beforeDirSync = null,
  ): Promise<string[]> {
    const dead = ledgerAt(dir);
    const targets = [];
    for (let i = 0; i < count; i++) {
      const rollout = `t${i}`;
      await dead.record(rollout, custodyRow("c0", rollout));
      await dead.record(`${rollout}-a1`, custodyRow("dead", `${rollout}-a1`));
      await dead.retire([`${rollout}-a2`]);
      await dead.markStarted(`${rollout}-a1`);
      targets.push({
        targetKey: `${rollout}-a1`,
        sourceKey: rollout,
        rows: [custodyRow("c0", rollout)],
      });
    }
    hooks.events = [];
    hooks.beforeDirSync = beforeDirSync;
    const ledger = ledgerAt(dir);
    await ledger.importRecords(targets);
    hooks.events.push("imported");
    await ledger.settleDeferred();
    return hooks.events;
  }

  it.each([1, 25])(
    "lists the directory once, writes one fence list and fsyncs the directory once for %i targets; the settle fsyncs once per batch, then removes the list, syncing no ledger file",
    async (count) => {
      const events = await importRollouts(count);

      const lists = path.join(dir, "restore-fences");
      expect(events).toEqual([
        `readdir ${dir}`,
        `dirsync ${lists}`,
        `dirsync ${dir}`,
        "imported",
        `dirsync ${dir}`,
        `dirsync ${lists}`,
      ]);
      expect(existsSync(lists)).toBe(false);
    },
  );

  it("a retire of 25 imported sources before the settle fsyncs the directory once, not per key", async () => {
    const ledger = ledgerAt(dir);
    const sources = Array.from({ length: 25 }, (_, i) => `s${i}`);
    for (const key of sources) await ledger.record(key, custodyRow("c0", key));
    await ledger.importRecords(
      sources.map((key) => ({ targetKey: `${key}-a1`, sourceKey: key, rows: [] })),
    );
    hooks.events = [];

    await ledger.retire(sources);

    // The retire's own fsync; the deferred fences and deletions need none (the import's fence
    // list is durable, and stays until a settle removes it).
    expect(hooks.events).toEqual([`dirsync ${dir}`]);
    expect(await listDir(dir)).toEqual(
      ["restore-fences", ...sources.map((key) => `${key}.lineage.retired`)].sort(),
    );
  });

  it("an import with nothing to clear writes only its fence list, and fsyncs it before it returns", async () => {
    const ledger = ledgerAt(dir);
    await ledger.record("r", custodyRow("c0", "r"));
    hooks.events = [];

    await ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r")] },
    ]);

    const lists = path.join(dir, "restore-fences");
    expect(hooks.events).toEqual([`readdir ${dir}`, `dirsync ${lists}`, `dirsync ${dir}`]);
    expect(await listDir(dir)).toEqual(["r.lineage.jsonl", "restore-fences"]);
    const [list] = await listDir(lists);
    expect(readFileSync(path.join(lists, list as string), "utf8")).toBe("r\n");
  });

  it("the import's fsync covers the clearing and the fences; the settle's, the writes and deletions", async () => {
    const states: string[][] = [];

    await importRollouts(1, async (synced) => {
      if (synced === dir) states.push(await listDir(dir));
    });

    expect(states).toEqual([
      // the import: what dead executions left is gone, the source fenced by the list
      ["restore-fences", "t0.lineage.jsonl"],
      // the settle: the source's fence file, the target written, the fenced ledger deleted
      ["restore-fences", "t0-a1.lineage.jsonl", "t0.lineage.retired"],
    ]);
    // and then the list removed
    expect(await listDir(dir)).toEqual(["t0-a1.lineage.jsonl", "t0.lineage.retired"]);
  });

  it("the first row appended to a ledger a settle created fsyncs the directory, once", async () => {
    const ledger = ledgerAt(dir);
    await ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r")] },
    ]);
    hooks.events = [];

    await ledger.record("r-a1", custodyRow("c1", "r-a1"));
    await ledger.record("r-a1", custodyRow("c2", "r-a1"));

    expect(hooks.events).toEqual([
      `sync r-a1.lineage.jsonl`,
      `dirsync ${dir}`,
      `sync r-a1.lineage.jsonl`,
    ]);
  });

  it("a ledger the background settle created and synced needs no directory fsync of its own", async () => {
    const ledger = ledgerAt(dir);
    await ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r")] },
    ]);
    await ledger.settleDeferred();
    hooks.events = [];

    await ledger.record("r-a1", custodyRow("c1", "r-a1"));

    expect(hooks.events).toEqual([`sync r-a1.lineage.jsonl`]);
  });
});
