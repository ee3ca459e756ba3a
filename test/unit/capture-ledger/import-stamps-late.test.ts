/**
 * A restore's import copies no row: the checkpointed rows are checked up front and stamped with
 * their source key only when the target's deferred ledger is written (after the restore).
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import * as stamp from "#sdk/capture/ledger/stamp.js";
import { custodyRow, ledgerAt, makeTempDir, removeTempDir } from "./helpers.js";

vi.mock("#sdk/capture/ledger/stamp.js", { spy: true });

let dir: string;

beforeEach(async () => {
  dir = await makeTempDir();
  vi.mocked(stamp.stampRows).mockClear();
});

afterEach(async () => {
  await removeTempDir(dir);
});

describe("importRecords stamps rows when it writes them", () => {
  it("stamps nothing inside the import; the deferred write stamps each target once", async () => {
    const ledger = ledgerAt(dir);
    const rows = [custodyRow("c0", "r"), { model_call_id: "c9", failure_reason: "x" }];
    await ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows },
      { targetKey: "q-a1", sourceKey: "q", rows: [custodyRow("q0", "q")] },
    ]);
    expect(stamp.stampRows).not.toHaveBeenCalled();

    await ledger.settleDeferred();
    expect(stamp.stampRows).toHaveBeenCalledTimes(2);
    expect(await ledger.rows("r-a1")).toEqual([
      { ...custodyRow("c0", "r"), capture_key: "r" },
      { model_call_id: "c9", failure_reason: "x" },
    ]);
    // The caller's rows are left as they were.
    expect(rows[0]).not.toHaveProperty("capture_key");
  });

  it("a row whose capture_key is an own undefined is stamped, not refused", async () => {
    const ledger = ledgerAt(dir);
    const row = { ...custodyRow("c0", "r"), capture_key: undefined };
    await ledger.importRecords([{ targetKey: "r-a1", sourceKey: "r", rows: [row] }]);
    expect(await ledger.rows("r-a1")).toEqual([{ ...custodyRow("c0", "r"), capture_key: "r" }]);
  });
});
