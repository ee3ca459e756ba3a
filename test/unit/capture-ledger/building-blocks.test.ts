/**
 * The ledger's building blocks: file names and their parsing (spec §5.1), key batches, the
 * rollout index of one directory listing (§6.3 step 7), the per-key lock and bounded fan-out.
 */
import { describe, expect, it } from "vitest";
import { InvalidLedgerKeyError } from "../../../sdk/src/capture/ledger/errors.js";
import {
  captureFileName,
  ledgerKeyBatch,
  parseCaptureFileName,
} from "../../../sdk/src/capture/ledger/files.js";
import { KeyedMutex } from "../../../sdk/src/capture/ledger/keyed-mutex.js";
import { mapLimited } from "../../../sdk/src/capture/ledger/map-limited.js";
import { RolloutIndex } from "../../../sdk/src/capture/ledger/rollout-index.js";
import { episodeId } from "../../../sdk/src/identity/episode-id.js";
import { deferred } from "../../../sdk/src/util/deferred.js";

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

describe("mapLimited", () => {
  it("keeps at most `limit` calls in flight and returns results in item order", async () => {
    const gates = Array.from({ length: 5 }, () => deferred());
    let inFlight = 0;
    let most = 0;
    const running = mapLimited([0, 1, 2, 3, 4], 2, async (i) => {
      inFlight += 1;
      most = Math.max(most, inFlight);
      await gates[i]!.promise;
      inFlight -= 1;
      return i * 10;
    });
    for (const gate of [...gates].reverse()) gate.resolve();

    expect(await running).toEqual([0, 10, 20, 30, 40]);
    expect(most).toBe(2);
  });

  it("throws the first failure after the calls in flight settled, starting no more", async () => {
    const started: number[] = [];
    const slow = deferred();
    let slowDone = false;
    const running = mapLimited([0, 1, 2, 3], 2, async (i) => {
      started.push(i);
      if (i === 0) {
        await slow.promise;
        slowDone = true;
      }
      if (i === 1) throw new Error("fail 1");
    });
    const outcome = running.catch((error: unknown) => ({ error, slowDone }));
    slow.resolve();

    expect(await outcome).toEqual({ error: new Error("fail 1"), slowDone: true });
    expect(started).toEqual([0, 1]);
  });
});
