/**
 * Writing and reading rows: the line format, write-once
 * per model call, failure rows, key validation, the per-key cache, visibility across instances
 * sharing a directory, and export minus undelivered calls.
 */
import { appendFile, rename, writeFile } from "node:fs/promises";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  CorruptLedgerError,
  InvalidLedgerKeyError,
  InvalidLedgerRowError,
  LedgerConflictError,
} from "#sdk/capture/ledger/errors.js";
import {
  custodyRow,
  ledgerAt,
  listDir,
  makeTempDir,
  readText,
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

describe("the line format", () => {
  it("writes one compact line per row, keys sorted at every level, newline-terminated", async () => {
    const ledger = ledgerAt(dir);
    await ledger.record("r1", { model_call_id: "c1", z: 1, a: { y: [2, { b: 1, a: 0 }], x: "é" } });
    await ledger.recordFailure("r1", "c2", "worker_capture_failed");

    expect(await readText(dir, "r1.lineage.jsonl")).toBe(
      '{"a":{"x":"é","y":[2,{"a":0,"b":1}]},"model_call_id":"c1","z":1}\n' +
        '{"failure_reason":"worker_capture_failed","model_call_id":"c2"}\n',
    );
  });

  it("names files after the capture key: r-a2 writes r-a2.lineage.jsonl", async () => {
    await ledgerAt(dir).record("r-a2", custodyRow("c1", "r-a2"));
    expect(await listDir(dir)).toEqual(["r-a2.lineage.jsonl"]);
  });

  it("refuses a row that is not JSON or names no model call, writing nothing", async () => {
    const ledger = ledgerAt(dir);
    for (const row of [
      { model_call_id: "" },
      { model_call_id: 7 },
      { model_call_id: "c1", admitted_at: NaN },
      { model_call_id: "c1", at: new Date(0) },
      { model_call_id: "c1", big: 2n ** 70n },
    ]) {
      await rejectsWith(ledger.record("r1", row as never), InvalidLedgerRowError);
    }
    await rejectsWith(ledger.recordFailure("r1", "c1", ""), InvalidLedgerRowError);
    expect(await listDir(dir)).toEqual([]);
  });
});

describe("write-once per model call", () => {
  it("an identical row again is a no-op, key order aside", async () => {
    const ledger = ledgerAt(dir);
    expect(await ledger.record("r1", custodyRow("c1"))).toBe("appended");
    const reordered = Object.fromEntries(Object.entries(custodyRow("c1")).reverse());
    expect(await ledger.record("r1", reordered as never)).toBe("unchanged");
    expect(await ledger.rows("r1")).toEqual([custodyRow("c1")]);
  });

  it.each([
    { weight_version: 18 },
    { response_id: "chatcmpl-other" },
    { admitted_at: 1.0 },
    { staging_chain: ["r1/c0", "r1/c1"] },
  ])("a row differing in %o is a conflict and leaves the ledger unchanged", async (changed) => {
    const ledger = ledgerAt(dir);
    await ledger.record("r1", custodyRow("c1"));
    const before = await readText(dir, "r1.lineage.jsonl");

    const error = await rejectsWith(
      ledger.record("r1", custodyRow("c1", "r1", changed)),
      LedgerConflictError,
    );

    expect(error.message).toContain("conflicting");
    expect([error.captureKey, error.modelCallId]).toEqual(["r1", "c1"]);
    expect(await readText(dir, "r1.lineage.jsonl")).toBe(before);
  });

  it("a custody row after a failure row of the same call conflicts", async () => {
    const ledger = ledgerAt(dir);
    await ledger.recordFailure("r1", "c1", "worker_capture_failed");
    await rejectsWith(ledger.record("r1", custodyRow("c1")), LedgerConflictError);
  });

  it("an identical failure row is not appended again; another reason is", async () => {
    const ledger = ledgerAt(dir);
    expect(await ledger.recordFailure("r1", "c1", "worker_capture_failed")).toBe("appended");
    expect(await ledger.recordFailure("r1", "c1", "worker_capture_failed")).toBe("unchanged");
    expect(await ledger.recordFailure("r1", "c1", "unresolved_parent")).toBe("appended");
    expect((await ledger.rows("r1")).map((row) => row.failure_reason)).toEqual([
      "worker_capture_failed",
      "unresolved_parent",
    ]);
  });

  it("checks write-once against rows another instance appended", async () => {
    await ledgerAt(dir).record("r1", custodyRow("c1"));
    await rejectsWith(
      ledgerAt(dir).record("r1", custodyRow("c1", "r1", { weight_version: 1 })),
      LedgerConflictError,
    );
  });

  it("serializes concurrent writes of one key: one row per call, every call once", async () => {
    const ledger = ledgerAt(dir);
    const ids = Array.from({ length: 20 }, (_, i) => `c${i}`);
    const outcomes = await Promise.all([
      ...ids.map((id) => ledger.record("r1", custodyRow(id))),
      ...ids.map((id) => ledger.record("r1", custodyRow(id))),
    ]);

    expect(outcomes.filter((outcome) => outcome === "appended")).toHaveLength(20);
    const rows = await ledgerAt(dir).rows("r1");
    expect(rows.map((row) => row.model_call_id).sort()).toEqual([...ids].sort());
  });
});

describe("capture keys", () => {
  const invalid = ["", "-a1", "r-a1-a2", ".x", "../escape", "a/b", "bad!id", "r1.lineage.jsonl/x"];

  it.each(invalid)("refuses %j before building a file name, changing nothing", async (key) => {
    const ledger = ledgerAt(dir);
    const calls: Promise<unknown>[] = [
      ledger.record(key, custodyRow("c1")),
      ledger.recordFailure(key, "c1", "worker_capture_failed"),
      ledger.rows(key),
      ledger.hasRows(key),
      ledger.manifest(key),
      ledger.exportRows(key, new Set()),
      ledger.markStarted(key),
      ledger.isStarted(key),
      ledger.deleteUnstarted(key),
    ];
    for (const call of calls) {
      const error = await rejectsWith(call, InvalidLedgerKeyError);
      expect(error.key).toBe(key);
    }
    expect(await listDir(dir)).toEqual([]);
  });

  it("a non-string key is refused as invalid", async () => {
    await rejectsWith(ledgerAt(dir).rows(3 as never), InvalidLedgerKeyError);
  });
});

describe("reading", () => {
  it("a key without a ledger has no rows", async () => {
    const ledger = ledgerAt(dir);
    expect(await ledger.rows("r-none")).toEqual([]);
    expect(await ledger.hasRows("r-none")).toBe(false);
    expect(await ledgerAt(path.join(dir, "missing")).rows("r1")).toEqual([]);
  });

  it("failure rows count as rows", async () => {
    const ledger = ledgerAt(dir);
    await ledger.recordFailure("r1", "c1", "worker_capture_failed");
    expect(await ledger.hasRows("r1")).toBe(true);
  });

  it("sees rows another instance appends after this one cached the ledger", async () => {
    const reader = ledgerAt(dir);
    const writer = ledgerAt(dir);
    await writer.record("r1", custodyRow("c1"));
    expect((await reader.rows("r1")).map((row) => row.model_call_id)).toEqual(["c1"]);

    await writer.record("r1", custodyRow("c2"));
    await writer.recordFailure("r1", "c3", "worker_capture_failed");

    expect((await reader.rows("r1")).map((row) => row.model_call_id)).toEqual(["c1", "c2", "c3"]);
  });

  it("re-reads from the start a ledger another process replaced, even a longer one", async () => {
    const ledger = ledgerAt(dir);
    await ledger.record("r1", custodyRow("c1"));
    expect(await ledger.rows("r1")).toHaveLength(1);
    const file = path.join(dir, "r1.lineage.jsonl");
    const replacement = ["x1", "x2", "x3"].map((id) => JSON.stringify(custodyRow(id)) + "\n");
    await writeFile(`${file}.tmp`, replacement.join(""));
    await rename(`${file}.tmp`, file);

    expect((await ledger.rows("r1")).map((row) => row.model_call_id)).toEqual(["x1", "x2", "x3"]);
  });

  it("leaves a line still being appended for a later read", async () => {
    const ledger = ledgerAt(dir);
    await ledger.record("r1", custodyRow("c1"));
    const file = path.join(dir, "r1.lineage.jsonl");
    await appendFile(file, '{"model_call_id":"c2"');
    expect((await ledger.rows("r1")).map((row) => row.model_call_id)).toEqual(["c1"]);

    await appendFile(file, "}\n");
    expect((await ledger.rows("r1")).map((row) => row.model_call_id)).toEqual(["c1", "c2"]);
  });

  it("a line that is not a row is a CorruptLedgerError", async () => {
    for (const line of ["not json", "[1]", '{"x":1}']) {
      await writeFile(path.join(dir, "r1.lineage.jsonl"), `${line}\n`);
      await rejectsWith(ledgerAt(dir).rows("r1"), CorruptLedgerError);
    }
  });

  it("returns rows callers cannot change", async () => {
    const ledger = ledgerAt(dir);
    await ledger.record("r1", custodyRow("c1"));
    const [row] = await ledger.rows("r1");
    expect(() => {
      (row as unknown as { staging_chain: string[] }).staging_chain.push("x");
    }).toThrow(TypeError);
    expect(await ledger.rows("r1")).toEqual([custodyRow("c1")]);
  });
});

describe("exportRows", () => {
  it("returns the key's rows minus the undelivered calls, in order", async () => {
    const ledger = ledgerAt(dir);
    for (const id of ["c1", "c2", "c3"]) await ledger.record("r1", custodyRow(id));
    await ledger.recordFailure("r1", "c4", "worker_capture_failed");
    await ledger.record("r2", custodyRow("c2", "r2"));

    const exported = await ledger.exportRows("r1", new Set(["c2", "c9"]));

    expect(exported.map((row) => row.model_call_id)).toEqual(["c1", "c3", "c4"]);
    expect(await ledger.exportRows("r1", new Set())).toHaveLength(4);
    expect(await ledger.exportRows("r-none", new Set())).toEqual([]);
  });
});
