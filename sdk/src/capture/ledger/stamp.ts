import { withFields } from "../../util/with-fields.js";
import type { LedgerRowInput } from "./row-codec.js";

/**
 * Stamps the rows a restore carries over with the capture key they were staged under: every row
 * with a `staging_key` and no `capture_key` gets `capture_key = sourceKey`. Rows already stamped
 * keep their stamp, so a chain of restores still names the attempt that staged each call; failure
 * and lineage-only rows have no staging key and are returned as they are. The input rows are not
 * modified.
 *
 * @example
 * stampRows([{ model_call_id: "c1", staging_key: "r/c1" }], "r");
 * // [{ model_call_id: "c1", staging_key: "r/c1", capture_key: "r" }]
 */
export function stampRows<R extends LedgerRowInput>(
  rows: readonly R[],
  sourceKey: string,
): (R | (R & { capture_key: string }))[] {
  return rows.map((row) =>
    row.staging_key !== undefined && row.staging_key !== null && row.capture_key == null
      ? (withFields(row, { capture_key: sourceKey }) as R & { capture_key: string })
      : row,
  );
}
