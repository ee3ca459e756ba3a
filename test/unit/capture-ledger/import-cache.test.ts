/**
 * The ledgers a restore deferred are cached as they are written: the first read after the
 * restore (usually the next commit's export of every restored episode) reads none of them back,
 * and still notices rows another process appended since.
 */
import * as fs from "node:fs";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { encodeRowLine } from "#sdk/capture/ledger/row-codec.js";
import { custodyRow, ledgerAt, makeTempDir, removeTempDir } from "./helpers.js";

vi.mock("node:fs", { spy: true });

let dir: string;

beforeEach(async () => {
  dir = await makeTempDir();
});

afterEach(async () => {
  await removeTempDir(dir);
});

const stamped = (id: string): Record<string, unknown> => ({
  ...custodyRow(id, "r"),
  capture_key: "r",
});

describe("a restored ledger written by the settle", () => {
  it("is read from the cache: the export after the restore opens no ledger file", async () => {
    const ledger = ledgerAt(dir);
    await ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r"), custodyRow("c1", "r")] },
    ]);
    await ledger.settleDeferred();
    vi.mocked(fs.readSync).mockClear();

    const [rows] = await ledger.exportRowsOf(["r-a1"], new Set());
    expect(rows).toEqual([stamped("c0"), stamped("c1")]);
    expect(fs.readSync).not.toHaveBeenCalled();
    expect(Object.isFrozen(rows?.[0])).toBe(true);
  });

  it("still picks up a row another process appended after the write", async () => {
    const ledger = ledgerAt(dir);
    await ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r")] },
    ]);
    await ledger.settleDeferred();
    fs.appendFileSync(
      path.join(dir, "r-a1.lineage.jsonl"),
      encodeRowLine("r-a1", custodyRow("c1", "r-a1")),
    );

    expect(await ledger.rows("r-a1")).toEqual([stamped("c0"), custodyRow("c1", "r-a1")]);
  });

  it("a target another server wrote first is read from its file, not from what this one meant to write", async () => {
    const other = ledgerAt(dir);
    const ledger = ledgerAt(dir);
    await other.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("x", "r")] },
    ]);
    await other.settleDeferred();
    await ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r")] },
    ]);
    // This import cleared the other server's file: write it again, as if it won the race.
    fs.writeFileSync(path.join(dir, "r-a1.lineage.jsonl"), encodeRowLine("r-a1", stamped("x")));
    await ledger.settleDeferred();

    expect(await ledger.rows("r-a1")).toEqual([{ ...custodyRow("x", "r"), capture_key: "r" }]);
  });
});
