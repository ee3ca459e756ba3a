/**
 * A ledger's rows as a `RolloutManifest`: failure rows and custody rows
 * that cannot anchor verification become `failures`, the other custody rows `records`, and
 * lineage-only rows are left out.
 */
import type { JsonValue } from "../../json/json-value.js";
import type { LedgerRow } from "./row-codec.js";

/** Failure reason of a custody row without the response ID the client was served. */
export const LEDGER_ROW_MISSING_RESPONSE_ID = "ledger_row_missing_response_id";

/**
 * Failure reason of a custody row without `chain_hash` or `cumulative_hash`. It follows the
 * pattern of its sibling {@link LEDGER_ROW_MISSING_RESPONSE_ID}.
 */
export const LEDGER_ROW_MISSING_CHAIN_HASH = "ledger_row_missing_chain_hash";

/** One `failures` entry of a manifest. */
export interface ManifestFailure {
  readonly schema_version: 2;
  readonly model_call_id: string;
  readonly reason: string;
}

/** The token-free manifest of one capture key, with records of type `R`. */
export interface LedgerManifest<R = RowCallRecord> {
  readonly schema_version: 2;
  /** The capture key the manifest describes. */
  readonly rollout_id: string;
  readonly records: readonly R[];
  readonly failures: readonly ManifestFailure[];
}

/** A `CallRecord`-shaped object built from a custody row, not validated here. */
export type RowCallRecord = { readonly [field: string]: JsonValue };

const truthy = (value: JsonValue | undefined): boolean =>
  value !== undefined && value !== null && value !== "" && value !== 0 && value !== false;

/**
 * The `CallRecord` fields of a custody row: the ledger's `staging_digest` is the
 * record's `digest` (the row's own `digest` is the lineage digest), empty fingerprints are
 * null and an absent `fingerprint_version` is 0. Pure: validation is the caller's.
 */
export function callRecordFromRow(row: LedgerRow): RowCallRecord {
  const field = (name: string): JsonValue => row[name] ?? null;
  return {
    schema_version: 2,
    digest_version: 2,
    extras_digest_version: 1,
    model_call_id: row.model_call_id,
    parent_call_id: field("parent_call_id"),
    prev_len: field("prev_len"),
    delta_len: field("delta_len"),
    cum_len: field("cum_len"),
    weight_version: field("weight_version"),
    digest: field("staging_digest"),
    extras_digest: field("extras_digest"),
    staging_key: field("staging_key"),
    mode: row.mode ?? "token_in",
    chain_hash: field("chain_hash"),
    cumulative_hash: field("cumulative_hash"),
    response_id: field("response_id"),
    admitted_at: field("admitted_at"),
    output_fingerprint: truthy(row.output_fingerprint) ? field("output_fingerprint") : null,
    continuation_fingerprint: truthy(row.continuation_fingerprint)
      ? field("continuation_fingerprint")
      : null,
    fingerprint_version: truthy(row.fingerprint_version) ? field("fingerprint_version") : 0,
    capture_key: field("capture_key"),
  };
}

/** The kind of a row: what the manifest does with it. */
export type RowKind = "failure" | "custody" | "lineage";

/** A failure row has a `failure_reason`; a custody row a `staging_key`; the rest lineage-only. */
export function rowKind(row: LedgerRow): RowKind {
  if (row.failure_reason !== undefined && row.failure_reason !== null) return "failure";
  if (row.staging_key !== undefined && row.staging_key !== null) return "custody";
  return "lineage";
}

/**
 * Builds the manifest of `captureKey` from its rows, in row order.
 *
 * @example
 * const manifest = manifestFromRows("r-a1", rows);
 * manifest.failures.map((f) => f.reason); // e.g. ["worker_capture_failed"]
 */
export function manifestFromRows<R = RowCallRecord>(
  captureKey: string,
  rows: readonly LedgerRow[],
  toRecord: (row: LedgerRow) => R = callRecordFromRow as (row: LedgerRow) => R,
): LedgerManifest<R> {
  const records: R[] = [];
  const failures: ManifestFailure[] = [];
  const fail = (row: LedgerRow, reason: string): void => {
    failures.push({ schema_version: 2, model_call_id: row.model_call_id, reason });
  };
  for (const row of rows) {
    const kind = rowKind(row);
    switch (kind) {
      case "failure":
        fail(row, String(row.failure_reason));
        break;
      case "custody":
        // Fail closed: a row that cannot be verified poisons the rollout rather than vanishing.
        if (!truthy(row.response_id)) fail(row, LEDGER_ROW_MISSING_RESPONSE_ID);
        else if (!truthy(row.chain_hash) || !truthy(row.cumulative_hash)) {
          fail(row, LEDGER_ROW_MISSING_CHAIN_HASH);
        } else records.push(toRecord(row));
        break;
      case "lineage":
        break;
      default: {
        const unknownKind: never = kind;
        throw new Error(`unknown row kind ${String(unknownKind)}`);
      }
    }
  }
  return { schema_version: 2, rollout_id: captureKey, records, failures };
}
