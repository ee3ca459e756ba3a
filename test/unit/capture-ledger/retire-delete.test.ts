/**
 * Ledger retire and delete: batch validation, de-duplication, the
 * result, fences and what they refuse, late writes, crashes that leave a fence beside a ledger,
 * and `retireLedgers`. The fsync order of these operations is in `durability.test.ts`.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { InvalidLedgerKeyError, RolloutRetiredError } from "#sdk/capture/ledger/errors.js";
import { FENCE_WINDOW } from "#sdk/capture/ledger/fence-window.js";
import { episodeId } from "#sdk/identity/episode-id.js";
import {
  custodyRow,
  ledgerAt,
  listDir,
  makeTempDir,
  plant,
  readText,
  rejectsWith,
  removeTempDir,
  warnings,
} from "./helpers.js";

let dir: string;

beforeEach(async () => {
  dir = await makeTempDir();
});

afterEach(async () => {
  await removeTempDir(dir);
});

describe("retire", () => {
  it("removes ledgers, fences every key and reports removed and absent keys once each", async () => {
    const ledger = ledgerAt(dir);
    await ledger.record("r1", custodyRow("c1"));
    await ledger.recordFailure("r2", "c1", "worker_capture_failed");

    const result = await ledger.retire(["r1", "r2", "r-none", "r1"]);

    expect(result).toEqual({ removed: ["r1", "r2"], absent: ["r-none"] });
    expect(await listDir(dir)).toEqual([
      "r-none.lineage.retired",
      "r1.lineage.retired",
      "r2.lineage.retired",
    ]);
  });

  it("makes hasRows and manifest throw RolloutRetiredError, also for keys that never recorded", async () => {
    const ledger = ledgerAt(dir);
    await ledger.record("r1", custodyRow("c1"));
    await ledger.retire(["r1", "never-recorded"]);

    for (const key of ["r1", "never-recorded"]) {
      expect((await rejectsWith(ledger.hasRows(key), RolloutRetiredError)).captureKey).toBe(key);
      await rejectsWith(ledger.manifest(key), RolloutRetiredError);
    }
    expect(await ledger.hasRows("r2")).toBe(false);
  });

  it("retiring again removes nothing and leaves the fence as it was", async () => {
    const ledger = ledgerAt(dir);
    await ledger.record("r1", custodyRow("c1"));
    await ledger.retire(["r1"]);
    await plant(dir, "r1.lineage.retired", "kept");

    expect(await ledger.retire(["r1"])).toEqual({ removed: [], absent: ["r1"] });
    expect(await readText(dir, "r1.lineage.retired")).toBe("kept");
  });

  it("removes the key's started marker with its ledger", async () => {
    const ledger = ledgerAt(dir);
    await ledger.markStarted("r-a1");
    await ledger.record("r-a1", custodyRow("c1", "r-a1"));

    await ledger.retire(["r-a1"]);

    expect(await listDir(dir)).toEqual(["r-a1.lineage.retired"]);
    expect(await ledger.isStarted("r-a1")).toBe(false);
  });

  it("leaves other keys alone, look-alikes included", async () => {
    const ledger = ledgerAt(dir);
    for (const key of ["r", "r-a1", "r1", "r-a1x-a3"])
      await ledger.record(key, custodyRow("c1", key));

    await ledger.retire(["r"]);

    for (const key of ["r-a1", "r1", "r-a1x-a3"]) expect(await ledger.hasRows(key)).toBe(true);
  });

  it("an empty batch does nothing", async () => {
    expect(await ledgerAt(dir).retire([])).toEqual({ removed: [], absent: [] });
    expect(await listDir(dir)).toEqual([]);
  });
});

describe("late writes on a retired key", () => {
  it("are discarded with a warning naming the late row's staging key", async () => {
    const { logger, logged } = warnings();
    const ledger = ledgerAt(dir, logger);
    await ledger.record("r1", custodyRow("c1"));
    await ledger.retire(["r1", "r-unstarted"]);

    expect(await ledger.record("r1", custodyRow("c2"))).toBe("discarded");
    expect(await ledger.recordFailure("r1", "c3", "worker_capture_failed")).toBe("discarded");
    expect(await ledger.record("r-unstarted", custodyRow("c1", "r-unstarted"))).toBe("discarded");

    expect(await listDir(dir)).toEqual(["r-unstarted.lineage.retired", "r1.lineage.retired"]);
    expect(logged).toHaveLength(3);
    expect(logged[0]?.msg).toContain("r1/c2");
    expect(logged[0]?.obj).toMatchObject({ capture_key: "r1", staging_key: "r1/c2" });
    expect(logged[1]?.obj).toMatchObject({ capture_key: "r1", model_call_id: "c3" });
  });

  it("are discarded by every instance sharing the directory, also ones created later", async () => {
    const retirer = ledgerAt(dir);
    const lateWriter = ledgerAt(dir);
    await lateWriter.record("r1", custodyRow("c1"));

    await retirer.retire(["r1"]);
    await lateWriter.record("r1", custodyRow("c2"));
    await ledgerAt(dir).record("r1", custodyRow("c1"));
    await lateWriter.recordFailure("r1", "c3", "worker_capture_failed");

    expect(await listDir(dir)).toEqual(["r1.lineage.retired"]);
  });

  it("the fence is checked only when a write would create the ledger", async () => {
    // A retire that crashed after fencing, before deleting, leaves both files. Appending to the
    // existing ledger does not look for the fence; creating one does.
    const ledger = ledgerAt(dir);
    await ledger.record("r1", custodyRow("c1"));
    await plant(dir, "r1.lineage.retired");

    expect(await ledger.record("r1", custodyRow("c2"))).toBe("appended");
    expect((await ledger.rows("r1")).map((row) => row.model_call_id)).toEqual(["c1", "c2"]);
    await rejectsWith(ledger.hasRows("r1"), RolloutRetiredError);
  });
});

describe("a crash that left a fence beside its ledger", () => {
  it("reads as retired, and the next retire removes the ledger", async () => {
    await ledgerAt(dir).record("r1", custodyRow("c1"));
    await plant(dir, "r1.lineage.retired");
    const restarted = ledgerAt(dir);

    await rejectsWith(restarted.manifest("r1"), RolloutRetiredError);
    expect(await restarted.retire(["r1"])).toEqual({ removed: ["r1"], absent: [] });
    expect(await listDir(dir)).toEqual(["r1.lineage.retired"]);
  });
});

describe("delete", () => {
  it("removes ledger, fence and started marker; only keys whose ledger existed are removed", async () => {
    const ledger = ledgerAt(dir);
    for (const key of ["r1", "r2"]) await ledger.record(key, custodyRow("c1", key));
    await ledger.retire(["r1"]);
    await ledger.markStarted("r3");

    const result = await ledger.delete(["r1", "r2", "r3", "r-none", "r2"]);

    expect(result).toEqual({ removed: ["r2"], absent: ["r1", "r3", "r-none"] });
    expect(await listDir(dir)).toEqual([]);
  });

  it("makes a retired key unused again: an empty manifest, and writes land", async () => {
    const ledger = ledgerAt(dir);
    await ledger.record("r1", custodyRow("c1"));
    await ledger.retire(["r1"]);

    await ledger.delete(["r1"]);

    expect((await ledger.manifest("r1")).records).toEqual([]);
    expect(await ledger.record("r1", custodyRow("c1"))).toBe("appended");
    expect((await ledger.manifest("r1")).records.map((r) => r.model_call_id)).toEqual(["c1"]);
  });

  it("leaves token files and other keys alone", async () => {
    const ledger = ledgerAt(dir);
    await ledger.record("r1", custodyRow("c1"));
    await ledger.record("r1.lineage", custodyRow("c1", "r1.lineage"));
    await plant(dir, "r1.tokens.jsonl");

    await ledger.delete(["r1"]);

    expect(await listDir(dir)).toEqual(["r1.lineage.lineage.jsonl", "r1.tokens.jsonl"]);
  });
});

describe("batch validation (retire and delete)", () => {
  it.each(["retire", "delete"] as const)(
    "%s refuses the whole batch on one invalid key",
    async (op) => {
      const ledger = ledgerAt(dir);
      await ledger.record("r1", custodyRow("c1"));

      const error = await rejectsWith(ledger[op](["r1", "../escape"]), InvalidLedgerKeyError);

      expect(error.message).toContain("Invalid rollout id");
      expect(await listDir(dir)).toEqual(["r1.lineage.jsonl"]);
      expect(await ledger.hasRows("r1")).toBe(true);
    },
  );

  it.each(["retire", "delete"] as const)("%s refuses a bare string", async (op) => {
    const ledger = ledgerAt(dir);
    await ledger.record("r1", custodyRow("c1"));

    await expect(ledger[op]("r1" as never)).rejects.toThrow(/sequence of rollout ids/);
    expect(await ledger.hasRows("r1")).toBe(true);
  });
});

describe("the row cache", () => {
  it.each(["retire", "delete"] as const)("%s forgets the cached rows of its keys", async (op) => {
    const ledger = ledgerAt(dir);
    const keys = ["r0", "r1", "r2", "r3", "r4"];
    for (const key of keys) await ledger.record(key, custodyRow("c1", key));
    expect(ledger.cachedKeyCount).toBe(5);

    await ledger[op](keys);

    expect(ledger.cachedKeyCount).toBe(0);
  });
});

describe("retireLedgers", () => {
  it("retires attempts 0..N of every episode in one batch, not N+1", async () => {
    const ledger = ledgerAt(dir);
    for (const key of ["r", "r-a1", "r-a2", "r-a3", "q", "q-a1"]) {
      await ledger.record(key, custodyRow("c1", key));
    }

    const result = await ledger.retireLedgers([episodeId("r", 2), episodeId("q", 0)]);

    expect(result).toEqual({ removed: ["r", "r-a1", "r-a2", "q"], absent: [] });
    expect(await ledger.hasRows("r-a3")).toBe(true);
    expect(await ledger.hasRows("q-a1")).toBe(true);
    await rejectsWith(ledger.hasRows("r-a2"), RolloutRetiredError);
  });

  it("fences a huge attempt's window and every older attempt with files, not 10^8 files", async () => {
    const ledger = ledgerAt(dir);
    const huge = 100_000_000;
    // Attempts with files below the window, one inside it, and one past the retired attempt.
    for (const key of ["r", "r-a7", `r-a${huge - 3}`, `r-a${huge + 1}`, "q"]) {
      await ledger.record(key, custodyRow("c1", key));
    }

    const result = await ledger.retireLedgers([episodeId("r", huge)]);

    expect([...result.removed].sort()).toEqual(["r", "r-a7", `r-a${huge - 3}`].sort());
    expect(result.absent).toHaveLength(FENCE_WINDOW - 1);
    const fences = (await listDir(dir)).filter((name) => name.endsWith(".lineage.retired"));
    expect(fences).toHaveLength(FENCE_WINDOW + 2);
    // Fenced: the old attempts that left files, and every attempt of the window.
    for (const key of ["r", "r-a7", `r-a${huge}`, `r-a${huge - FENCE_WINDOW + 1}`]) {
      await rejectsWith(ledger.hasRows(key), RolloutRetiredError);
    }
    // Not fenced: the next attempt, another rollout, and an older attempt that left nothing
    // (the participant's retired marks refuse its calls).
    expect(await ledger.hasRows(`r-a${huge + 1}`)).toBe(true);
    expect(await ledger.hasRows("q")).toBe(true);
    expect(await ledger.hasRows("r-a8")).toBe(false);
  });

  it("fences exactly 0..N inside the window, with or without files", async () => {
    const ledger = ledgerAt(dir);
    const last = FENCE_WINDOW - 1;
    const result = await ledger.retireLedgers([episodeId("w", last)]);
    expect(result.absent).toHaveLength(FENCE_WINDOW);
    await rejectsWith(ledger.hasRows("w"), RolloutRetiredError);
    await rejectsWith(ledger.hasRows(`w-a${last}`), RolloutRetiredError);
  });
});
