/**
 * Rows as a RolloutManifest, the row → record conversion and the capture-key stamping of
 * carried-over rows.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  LEDGER_ROW_MISSING_CHAIN_HASH,
  LEDGER_ROW_MISSING_RESPONSE_ID,
  callRecordFromRow,
  manifestFromRows,
} from "#sdk/capture/ledger/manifest.js";
import type { LedgerRow } from "#sdk/capture/ledger/row-codec.js";
import { stampRows } from "#sdk/capture/ledger/stamp.js";
import { custodyRow, ledgerAt, makeTempDir, plant, removeTempDir } from "./helpers.js";

const failureRow = (id: string, reason: string): LedgerRow => ({
  model_call_id: id,
  failure_reason: reason,
});

/** A local-capture row: lineage fields, no custody columns. */
const lineageOnlyRow = (id: string): LedgerRow => ({
  model_call_id: id,
  fingerprint: "f".repeat(64),
  context_len: 1,
  context_digest: "d".repeat(64),
  cumulative_token_ids: [1, 2, 3],
  digest: "c".repeat(64),
});

describe("callRecordFromRow", () => {
  it("maps the custody columns onto CallRecord fields", () => {
    expect(callRecordFromRow(custodyRow("c1"))).toEqual({
      schema_version: 2,
      digest_version: 2,
      extras_digest_version: 1,
      model_call_id: "c1",
      parent_call_id: null,
      prev_len: 0,
      delta_len: 900,
      cum_len: 900,
      weight_version: 17,
      digest: "a".repeat(64),
      extras_digest: "e".repeat(64),
      staging_key: "r1/c1",
      mode: "text",
      chain_hash: "1".repeat(64),
      cumulative_hash: "c".repeat(64),
      response_id: "chatcmpl-c1",
      admitted_at: 1_755_600_000.25,
      output_fingerprint: null,
      continuation_fingerprint: null,
      fingerprint_version: 3,
      capture_key: null,
    });
  });

  it("defaults what older rows lack and keeps a restore's capture_key", () => {
    const row = custodyRow("c1", "r1", {
      mode: undefined,
      admitted_at: undefined,
      fingerprint_version: undefined,
      output_fingerprint: "",
      continuation_fingerprint: "b".repeat(64),
      capture_key: "r",
    });
    delete (row as Record<string, unknown>).mode;
    delete (row as Record<string, unknown>).admitted_at;
    delete (row as Record<string, unknown>).fingerprint_version;

    expect(callRecordFromRow(row)).toMatchObject({
      mode: "token_in",
      admitted_at: null,
      fingerprint_version: 0,
      output_fingerprint: null,
      continuation_fingerprint: "b".repeat(64),
      capture_key: "r",
    });
  });
});

describe("manifestFromRows", () => {
  it("turns failure rows into failures and custody rows into records, in row order", () => {
    const rows = [
      custodyRow("c1"),
      failureRow("c2", "worker_capture_failed"),
      custodyRow("c3"),
      lineageOnlyRow("c4"),
    ];

    const manifest = manifestFromRows("r1", rows);

    expect(manifest.schema_version).toBe(2);
    expect(manifest.rollout_id).toBe("r1");
    expect(manifest.records).toEqual([callRecordFromRow(rows[0]!), callRecordFromRow(rows[2]!)]);
    expect(manifest.failures).toEqual([
      { schema_version: 2, model_call_id: "c2", reason: "worker_capture_failed" },
    ]);
  });

  it("omits lineage-only rows", () => {
    expect(manifestFromRows("r1", [lineageOnlyRow("c1")])).toEqual({
      schema_version: 2,
      rollout_id: "r1",
      records: [],
      failures: [],
    });
  });

  it.each([{ response_id: null }, { response_id: "" }, { response_id: undefined }])(
    "a custody row with %o fails as ledger_row_missing_response_id",
    (changed) => {
      const manifest = manifestFromRows("r1", [custodyRow("c1", "r1", changed)]);
      expect(manifest.records).toEqual([]);
      expect(manifest.failures).toEqual([
        { schema_version: 2, model_call_id: "c1", reason: LEDGER_ROW_MISSING_RESPONSE_ID },
      ]);
    },
  );

  it.each([{ chain_hash: null }, { cumulative_hash: "" }, { chain_hash: undefined }])(
    "a custody row with %o fails as a missing chain hash",
    (changed) => {
      const manifest = manifestFromRows("r1", [custodyRow("c1", "r1", changed)]);
      expect(manifest.records).toEqual([]);
      expect(manifest.failures.map((failure) => failure.reason)).toEqual([
        LEDGER_ROW_MISSING_CHAIN_HASH,
      ]);
    },
  );

  it("builds records with the given conversion", () => {
    const manifest = manifestFromRows("r1", [custodyRow("c1")], (row) => row.model_call_id);
    expect(manifest.records).toEqual(["c1"]);
  });
});

describe("CaptureLedger.manifest", () => {
  let dir: string;

  beforeEach(async () => {
    dir = await makeTempDir();
  });

  afterEach(async () => {
    await removeTempDir(dir);
  });

  it("is the manifest of the key's stored rows", async () => {
    const ledger = ledgerAt(dir);
    await ledger.record("r1", custodyRow("c1"));
    await ledger.recordFailure("r1", "c2", "worker_capture_failed");
    await ledger.record("r1", lineageOnlyRow("c3"));

    expect(await ledger.manifest("r1")).toEqual(manifestFromRows("r1", await ledger.rows("r1")));
    expect((await ledger.manifest("r1", (row) => row.staging_key)).records).toEqual(["r1/c1"]);
    expect(await ledger.manifest("r-none")).toEqual(manifestFromRows("r-none", []));
  });

  it("poisons the manifest of a hand-written row missing its response id", async () => {
    const row = custodyRow("c1");
    delete (row as Record<string, unknown>).response_id;
    await plant(dir, "r1.lineage.jsonl", `${JSON.stringify(row)}\n`);

    const manifest = await ledgerAt(dir).manifest("r1");

    expect(manifest.failures.map((failure) => failure.reason)).toEqual([
      LEDGER_ROW_MISSING_RESPONSE_ID,
    ]);
  });
});

describe("stampRows", () => {
  it("stamps rows with a staging key and no capture key with the source key", () => {
    const rows = [
      custodyRow("c1", "r"),
      custodyRow("c2", "r", { capture_key: null }),
      custodyRow("c3", "r-a1", { capture_key: "r" }),
      failureRow("c4", "worker_capture_failed"),
      lineageOnlyRow("c5"),
    ];

    const stamped = stampRows(rows, "r-a1");

    expect(stamped.map((row) => row.capture_key)).toEqual([
      "r-a1",
      "r-a1",
      "r",
      undefined,
      undefined,
    ]);
    expect(stamped[3]).toBe(rows[3]);
    expect(stamped[4]).toBe(rows[4]);
    expect(rows[0]).not.toHaveProperty("capture_key");
  });
});
