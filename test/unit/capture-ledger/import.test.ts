/**
 * Restore import: stamping, clearing what dead
 * executions left for the target attempt and later ones of the same rollout only, writing
 * exactly the checkpointed rows, retiring the source attempts, and restoring the same
 * checkpoint again. Fsync and listing counts are in `durability.test.ts`.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  InvalidLedgerKeyError,
  InvalidLedgerRowError,
  LedgerImportError,
  RolloutRetiredError,
} from "#sdk/capture/ledger/errors.js";
import type { LedgerImport } from "#sdk/capture/ledger/import-plan.js";
import { episodeId } from "#sdk/identity/episode-id.js";
import {
  custodyRow,
  ledgerAt,
  listDir,
  makeTempDir,
  plant,
  rejectsWith,
  removeTempDir,
} from "./helpers.js";

let dir: string;

beforeEach(async () => {
  dir = await makeTempDir();
});

afterEach(async () => {
  await removeTempDir(dir);
});

/** What a dead execution of rollout `r` (and of look-alike rollouts) left behind. */
async function plantDeadExecution(): Promise<void> {
  const dead = ledgerAt(dir);
  await dead.record("r", custodyRow("c0", "r"));
  await dead.record("r-a1", custodyRow("dead-1", "r-a1"));
  await dead.markStarted("r-a1");
  await dead.record("r-a2", custodyRow("dead-2", "r-a2"));
  await plant(dir, "r-a2.tokens.jsonl", "{}\n");
  await plant(dir, "r-a2.tokens.incomplete", "x\n");
  await dead.retire(["r-a3"]);
  await dead.record("r1-a2", custodyRow("other", "r1-a2"));
  await dead.record("r-a1x-a3", custodyRow("look-alike", "r-a1x-a3"));
  await plant(dir, "r1-a2.tokens.jsonl");
  await plant(dir, "r-a1x.lineage.retired");
}

const checkpointed = [custodyRow("c0", "r"), { model_call_id: "c9", failure_reason: "x" }];

describe("importRecords", () => {
  it("clears attempts T and later of the target's rollout, fences included, and nothing else", async () => {
    await plantDeadExecution();
    const ledger = ledgerAt(dir);

    const result = await ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: checkpointed },
    ]);
    await ledger.settleDeferred();

    expect(result.imported).toEqual(["r-a1"]);
    expect(result.cleared).toEqual([
      "r-a1.lineage.jsonl",
      "r-a1.lineage.started",
      "r-a2.lineage.jsonl",
      "r-a2.tokens.incomplete",
      "r-a2.tokens.jsonl",
      "r-a3.lineage.retired",
    ]);
    expect(await listDir(dir)).toEqual([
      "r-a1.lineage.jsonl",
      "r-a1x-a3.lineage.jsonl",
      "r-a1x.lineage.retired",
      "r.lineage.retired",
      "r1-a2.lineage.jsonl",
      "r1-a2.tokens.jsonl",
    ]);
    expect(await ledger.exportRows("r-a2", new Set())).toEqual([]);
    expect((await ledger.rows("r1-a2")).map((row) => row.model_call_id)).toEqual(["other"]);
    expect((await ledger.rows("r-a1x-a3")).map((row) => row.model_call_id)).toEqual(["look-alike"]);
  });

  it("writes exactly the record's rows, stamped with the source key", async () => {
    const ledger = ledgerAt(dir);
    const rows = [
      custodyRow("c1", "r-a1"),
      custodyRow("c0", "r", { capture_key: "r" }),
      { model_call_id: "c2", failure_reason: "worker_capture_failed" },
    ];

    await ledger.importRecords([{ targetKey: "r-a2", sourceKey: "r-a1", rows }]);

    expect(await ledger.rows("r-a2")).toEqual([
      { ...rows[0], capture_key: "r-a1" },
      rows[1],
      rows[2],
    ]);
    const manifest = await ledger.manifest("r-a2");
    expect(manifest.records.map((record) => record.capture_key)).toEqual(["r-a1", "r"]);
    expect(manifest.failures.map((failure) => failure.model_call_id)).toEqual(["c2"]);
  });

  it("a source ledger longer than the checkpoint (calls after it) leaves the target exactly the checkpointed rows", async () => {
    const dead = ledgerAt(dir);
    for (const id of ["c0", "late-1", "late-2"]) await dead.record("r", custodyRow(id, "r"));
    const ledger = ledgerAt(dir);

    const result = await ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r")] },
    ]);

    expect(await ledger.rows("r-a1")).toEqual([{ ...custodyRow("c0", "r"), capture_key: "r" }]);
    expect(result.retired).toEqual({ removed: ["r"], absent: [] });
    await ledger.settleDeferred();
    expect(await listDir(dir)).toEqual(["r-a1.lineage.jsonl", "r.lineage.retired"]);
  });

  it("retires attempts 0..N of the source and not the target", async () => {
    const ledger = ledgerAt(dir);
    for (const key of ["r", "r-a1", "r-a2"]) await ledger.record(key, custodyRow("c", key));

    const result = await ledger.importRecords([
      { targetKey: "r-a3", sourceKey: "r-a2", rows: checkpointed },
    ]);

    expect(result.retired).toEqual({ removed: ["r", "r-a1", "r-a2"], absent: [] });
    for (const key of ["r", "r-a1", "r-a2"]) {
      await rejectsWith(ledger.hasRows(key), RolloutRetiredError);
    }
    expect(await ledger.hasRows("r-a3")).toBe(true);
    expect(await ledger.record("r-a3", custodyRow("c10", "r-a3"))).toBe("appended");
  });

  it("clears a target the checkpoint holds no rows for, writing no ledger", async () => {
    await plantDeadExecution();
    const ledger = ledgerAt(dir);

    await ledger.importRecords([{ targetKey: "r-a1", sourceKey: "r", rows: [] }]);
    await ledger.settleDeferred();

    expect((await listDir(dir)).filter((name) => /^r(-a\d+)?\./.test(name))).toEqual([
      "r.lineage.retired",
    ]);
    expect(await ledger.hasRows("r-a1")).toBe(false);
  });

  it("restoring the same checkpoint again yields exactly the checkpointed rows", async () => {
    const first = ledgerAt(dir);
    await first.record("r", custodyRow("c0", "r"));
    const records: LedgerImport[] = [
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r")] },
    ];
    await first.importRecords(records);
    // The replacement attempt makes calls, starts, and Gym crashes before the next checkpoint.
    await first.markStarted("r-a1");
    await first.record("r-a1", custodyRow("c1", "r-a1"));
    expect(await first.rows("r-a1")).toHaveLength(2);

    const second = ledgerAt(dir);
    await second.importRecords(records);

    expect(await second.rows("r-a1")).toEqual([{ ...custodyRow("c0", "r"), capture_key: "r" }]);
    expect(await second.isStarted("r-a1")).toBe(false);
    expect(await first.rows("r-a1")).toEqual(await second.rows("r-a1"));
  });

  it("drops cached rows of the keys it rewrites", async () => {
    const ledger = ledgerAt(dir);
    await ledger.record("r-a1", custodyRow("dead", "r-a1"));
    await ledger.record("r-a2", custodyRow("dead", "r-a2"));
    expect(ledger.cachedKeyCount).toBe(2);

    await ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r"), custodyRow("c1", "r")] },
    ]);

    expect(ledger.cachedKeyCount).toBe(0);
    expect((await ledger.rows("r-a1")).map((row) => row.model_call_id)).toEqual(["c0", "c1"]);
  });

  it("imports many targets in one batch", async () => {
    const ledger = ledgerAt(dir);
    const targets = Array.from({ length: 40 }, (_, i) => ({
      targetKey: `t${i}-a1`,
      sourceKey: `t${i}`,
      rows: [custodyRow("c0", `t${i}`)],
    }));

    const result = await ledger.importRecords(targets);

    expect(result.imported).toEqual(targets.map((target) => target.targetKey));
    expect(result.retired.absent).toHaveLength(40);
    for (const target of targets) expect(await ledger.hasRows(target.targetKey)).toBe(true);
  });

  it("keys given with their EpisodeIds import exactly as keys alone do", async () => {
    const alone = await makeTempDir();
    try {
      const rows = [custodyRow("c0", "r"), custodyRow("c1", "r")];
      const outcomes = [];
      for (const [where, episodes] of [
        [dir, { target: episodeId("r", 2), source: episodeId("r", 1) }],
        [alone, undefined],
      ] as const) {
        const ledger = ledgerAt(where);
        await ledger.record("r-a1", custodyRow("c0", "r-a1"));
        const result = await ledger.importRecords([
          { targetKey: "r-a2", sourceKey: "r-a1", rows, ...(episodes ? { episodes } : {}) },
        ]);
        outcomes.push({ result, rows: await ledger.rows("r-a2"), files: await listDir(where) });
      }
      expect(outcomes[0]).toEqual(outcomes[1]);
      expect(outcomes[0]?.result.retired).toEqual({ removed: ["r-a1"], absent: ["r"] });
    } finally {
      await removeTempDir(alone);
    }
  });

  it("an empty batch touches nothing", async () => {
    expect(await ledgerAt(dir).importRecords([])).toEqual({
      imported: [],
      cleared: [],
      retired: { removed: [], absent: [] },
    });
    expect(await listDir(dir)).toEqual([]);
  });
});

describe("importRecords validates the whole batch before touching a file", () => {
  const good = { targetKey: "q-a1", sourceKey: "q", rows: [custodyRow("c0", "q")] };

  it.each([
    [{ targetKey: "r-a1", sourceKey: "../r", rows: [] }, InvalidLedgerKeyError],
    [{ targetKey: "r-a1-a2", sourceKey: "r", rows: [] }, InvalidLedgerKeyError],
    [{ targetKey: "s-a1", sourceKey: "r", rows: [] }, LedgerImportError],
    [{ targetKey: "r-a1", sourceKey: "r-a1", rows: [] }, LedgerImportError],
    [{ targetKey: "r", sourceKey: "r-a1", rows: [] }, LedgerImportError],
    [
      { targetKey: "r-a1", sourceKey: "r", rows: [{ model_call_id: "c", x: NaN }] },
      InvalidLedgerRowError,
    ],
    [{ targetKey: "r-a1", sourceKey: "r", rows: [{ nope: 1 }] }, InvalidLedgerRowError],
    [{ targetKey: "r-a1", sourceKey: "r", rows: [null] }, InvalidLedgerRowError],
    [{ targetKey: "r-a1", sourceKey: "r", rows: ["c0"] }, InvalidLedgerRowError],
    // EpisodeIds that are not those of the keys are no reason to trust the keys.
    [
      {
        targetKey: "r-a1-a2",
        sourceKey: "r",
        rows: [],
        episodes: { target: episodeId("r", 1), source: episodeId("r") },
      },
      InvalidLedgerKeyError,
    ],
    [
      {
        targetKey: "s-a1",
        sourceKey: "r",
        rows: [],
        episodes: { target: episodeId("r", 1), source: episodeId("r") },
      },
      LedgerImportError,
    ],
  ] as const)("refuses %j", async (bad, type) => {
    await plantDeadExecution();
    const before = await listDir(dir);

    await rejectsWith(ledgerAt(dir).importRecords([good, bad as never]), type);

    expect(await listDir(dir)).toEqual(before);
  });

  it("rows vouched for as standard JSON are checked for their shape only", async () => {
    const ledger = ledgerAt(dir);
    await rejectsWith(
      ledger.importRecords([
        { targetKey: "r-a1", sourceKey: "r", rows: [{ nope: 1 } as never], rowsStandardJson: true },
      ]),
      InvalidLedgerRowError,
    );
    // Not walked: the caller's word (a natively decoded checkpoint line) stands in for it.
    await ledger.importRecords([
      {
        targetKey: "q-a1",
        sourceKey: "q",
        rows: [{ model_call_id: "c", x: Number.NaN }],
        rowsStandardJson: true,
      },
    ]);
    expect(ledger.deferredKeys()).toContain("q-a1");
  });

  it("refuses two targets of one rollout", async () => {
    const ledger = ledgerAt(dir);
    await rejectsWith(
      ledger.importRecords([
        { targetKey: "r-a1", sourceKey: "r", rows: [] },
        { targetKey: "r-a3", sourceKey: "r-a2", rows: [] },
      ]),
      LedgerImportError,
    );
    expect(await listDir(dir)).toEqual([]);
  });
});
