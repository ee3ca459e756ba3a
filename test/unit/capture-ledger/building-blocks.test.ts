/**
 * The ledger's building blocks: file names and their parsing, key batches, the rollout index
 * of one directory listing, the per-key lock, and the synchronous
 * file operations of a batch.
 */
import { readFileSync, statSync, unlinkSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { InvalidLedgerKeyError } from "#sdk/capture/ledger/errors.js";
import {
  captureFileName,
  ledgerKeyBatch,
  parseCaptureFileName,
} from "#sdk/capture/ledger/files.js";
import { KeyedMutex } from "#sdk/util/keyed-mutex.js";
import { EmptyFileBatch, inSlices } from "#sdk/capture/ledger/file-batch.js";
import { RolloutIndex } from "#sdk/capture/ledger/rollout-index.js";
import { episodeId } from "#sdk/identity/episode-id.js";
import { deferred } from "#sdk/util/deferred.js";
import { makeTempDir, removeTempDir } from "./helpers.js";

describe("capture file names", () => {
  it.each([
    ["r.lineage.jsonl", "r", "r", 0, "ledger"],
    ["r-a1.lineage.retired", "r-a1", "r", 1, "fence"],
    ["r-a2.lineage.started", "r-a2", "r", 2, "started"],
    ["r1-a2.tokens.jsonl", "r1-a2", "r1", 2, "tokens"],
    ["r-a1x-a3.tokens.incomplete", "r-a1x-a3", "r-a1x", 3, "tokensIncomplete"],
    ["r.lineage.lineage.jsonl", "r.lineage", "r.lineage", 0, "ledger"],
  ] as const)("%s is key %s: rollout %s, attempt %i, %s", (name, key, rollout, attempt, kind) => {
    expect(parseCaptureFileName(name)).toEqual({
      name,
      key,
      episode: episodeId(rollout, attempt),
      kind,
    });
    expect(captureFileName(key, kind)).toBe(name);
  });

  it.each([
    "r.lineage.lock",
    "notes.txt",
    ".lineage.jsonl",
    "r-a1-a2.lineage.jsonl",
    "-a1.tokens.jsonl",
  ])("%s is not a capture file", (name) => {
    expect(parseCaptureFileName(name)).toBeNull();
  });
});

describe("ledgerKeyBatch", () => {
  it("keeps first occurrences in order", () => {
    expect(ledgerKeyBatch(["b", "a", "b", "c", "a"])).toEqual(["b", "a", "c"]);
  });

  it("refuses a string and any invalid key", () => {
    expect(() => ledgerKeyBatch("ab" as never)).toThrow(TypeError);
    expect(() => ledgerKeyBatch(["a", "a/b"])).toThrow(InvalidLedgerKeyError);
  });
});

describe("RolloutIndex", () => {
  it("finds a rollout's files at or after an attempt, and never a look-alike's", () => {
    const index = new RolloutIndex([
      "r.lineage.jsonl",
      "r-a1.lineage.jsonl",
      "r-a2.lineage.retired",
      "r-a3.tokens.jsonl",
      "r1-a2.lineage.jsonl",
      "r-a1x-a3.lineage.jsonl",
      "r-a1x.lineage.jsonl",
      "junk",
    ]);

    expect(index.fromAttempt(episodeId("r", 1)).map((file) => file.name)).toEqual([
      "r-a1.lineage.jsonl",
      "r-a2.lineage.retired",
      "r-a3.tokens.jsonl",
    ]);
    expect(index.fromAttempt(episodeId("r-a1x", 1)).map((file) => file.name)).toEqual([
      "r-a1x-a3.lineage.jsonl",
    ]);
    expect(index.fromAttempt(episodeId("s", 0))).toEqual([]);
  });
});

describe("KeyedMutex", () => {
  it("runs holders of one key one at a time, in arrival order", async () => {
    const locks = new KeyedMutex();
    const gate = deferred();
    const order: string[] = [];
    const first = locks.run(["k"], async () => {
      order.push("first:in");
      await gate.promise;
      order.push("first:out");
    });
    const second = locks.run(["k"], async () => {
      order.push("second");
    });
    const other = locks.run(["j"], async () => {
      order.push("other");
    });

    await other;
    expect(order).toEqual(["first:in", "other"]);
    gate.resolve();
    await Promise.all([first, second]);
    expect(order).toEqual(["first:in", "other", "first:out", "second"]);
  });

  it("takes several keys in sorted order, so crossing batches do not deadlock", async () => {
    const locks = new KeyedMutex();
    const results = await Promise.all([
      locks.run(["b", "a"], async () => "ba"),
      locks.run(["a", "b"], async () => "ab"),
      locks.run(["b", "c", "a"], async () => "bca"),
    ]);
    expect(results).toEqual(["ba", "ab", "bca"]);
  });

  it("takes free keys at once: the holder starts in the caller's turn", async () => {
    const locks = new KeyedMutex();
    let started = false;
    const keys = Array.from({ length: 10_000 }, (_, i) => `k${i}`);
    const running = locks.run(keys, async () => {
      started = true;
    });
    expect(started).toBe(true);
    await running;
    expect(locks.size).toBe(0);
  });

  it("a holder waiting for one key holds the keys before it, and gets it in turn", async () => {
    const locks = new KeyedMutex();
    const gate = deferred();
    const order: string[] = [];
    const holdingB = locks.run(["b"], async () => {
      await gate.promise;
      order.push("b done");
    });
    const both = locks.run(["a", "b"], async () => {
      order.push("a+b");
    });
    const onlyA = locks.run(["a"], async () => {
      order.push("a");
    });
    await Promise.resolve();
    expect(order).toEqual([]);
    gate.resolve();
    await Promise.all([holdingB, both, onlyA]);
    expect(order).toEqual(["b done", "a+b", "a"]);
  });

  it("releases on failure and forgets idle keys", async () => {
    const locks = new KeyedMutex();
    await expect(
      locks.run(["k"], async () => {
        throw new Error("boom");
      }),
    ).rejects.toThrow("boom");
    expect(await locks.run(["k", "k"], async () => locks.size)).toBe(1);
    expect(locks.size).toBe(0);
  });
});

describe("inSlices", () => {
  it("runs every item in order, handing the event loop a turn between slices", async () => {
    const seen: string[] = [];
    const timer = new Promise<void>((resolve) =>
      setImmediate(() => {
        seen.push("turn");
        resolve();
      }),
    );
    const items = Array.from({ length: 300 }, (_, i) => i);

    const results = await inSlices(items, (i) => {
      seen.push(`op ${i}`);
      return i * 2;
    });
    await timer;

    expect(results).toEqual(items.map((i) => i * 2));
    // The other task ran after the first slice of 128 and before the batch ended.
    expect(seen.indexOf("turn")).toBe(128);
  });

  it("also hands a turn when a slice has run out of time, however few items it ran", async () => {
    let clock = 0;
    const seen: string[] = [];
    const timer = new Promise<void>((resolve) =>
      setImmediate(() => {
        seen.push("turn");
        resolve();
      }),
    );

    await inSlices(
      [0, 1, 2, 3, 4],
      (i) => {
        seen.push(`op ${i}`);
        clock += 4; // each operation "takes" 4 ms of the slice's 10
      },
      { ops: 128, ms: 10, now: () => clock },
    );
    await timer;

    expect(seen.slice(0, 4)).toEqual(["op 0", "op 1", "op 2", "turn"]);
  });

  it("throws the first failure and leaves the later items alone", async () => {
    const ran: number[] = [];
    const running = inSlices([0, 1, 2, 3], (i) => {
      ran.push(i);
      if (i === 1) throw new Error("fail 1");
    });

    await expect(running).rejects.toThrow("fail 1");
    expect(ran).toEqual([0, 1]);
  });
});

describe("file batch operations", () => {
  let dir: string;
  beforeEach(async () => {
    dir = await makeTempDir();
  });
  afterEach(async () => {
    await removeTempDir(dir);
  });
  const at = (name: string): string => path.join(dir, name);

  it("creates a batch's empty files as links to its first, telling created from existing", async () => {
    const batch = new EmptyFileBatch();
    writeFileSync(at("b"), "");

    expect(["a", "b", "c", "d"].map((name) => batch.create(at(name)))).toEqual([
      true,
      false,
      true,
      true,
    ]);
    expect(["a", "c", "d"].map((name) => readFileSync(at(name), "utf8"))).toEqual(["", "", ""]);
    expect(statSync(at("c")).ino).toBe(statSync(at("a")).ino);
    expect(statSync(at("a")).nlink).toBe(3);
  });

  it("creates a file of its own when the link source is gone, and links to it next", async () => {
    const batch = new EmptyFileBatch();
    batch.create(at("a"));
    unlinkSync(at("a"));

    expect(batch.create(at("b"))).toBe(true);
    expect(batch.create(at("c"))).toBe(true);
    expect(statSync(at("b")).nlink).toBe(2);
    expect(statSync(at("c")).ino).toBe(statSync(at("b")).ino);
  });
});
