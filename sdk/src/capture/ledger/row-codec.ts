/**
 * The ledger's line format: one JSON object per line, keys sorted at every level, compact
 * separators (`,` and `:`), newline-terminated. Only standard JSON, so that any plain JSON
 * parser can read the lines.
 */
import { NotJsonError, jsonValueNeedsExtended, type JsonValue } from "../../json/json-value.js";
import { CorruptLedgerError, InvalidLedgerRowError } from "./errors.js";

/**
 * One ledger row: a custody row, a failure row (`{model_call_id, failure_reason}`) or a
 * lineage-only row. Every row names its model call.
 */
export type LedgerRow = { readonly model_call_id: string } & {
  readonly [field: string]: JsonValue;
};

/**
 * A row as callers hand it in: any object naming its model call. Its fields are checked when it
 * is encoded ({@link encodeRowLine}).
 */
export type LedgerRowInput = { readonly model_call_id: string } & {
  readonly [field: string]: unknown;
};

/** Refuses what standard JSON cannot hold: what {@link writeSorted} would refuse. */
function assertStandardJson(value: unknown): void {
  // One walk for the common row: a tree with no extended number holds no NaN, ±Infinity or
  // bigint either, so only the others are walked again to find what to refuse.
  if (jsonValueNeedsExtended(value)) assertFinite(value as JsonValue);
}

function assertFinite(value: JsonValue): void {
  if (value === null || typeof value !== "object") {
    if (typeof value === "bigint" || (typeof value === "number" && !Number.isFinite(value))) {
      throw new NotJsonError("$", `${String(value)} is not standard JSON`);
    }
    return;
  }
  for (const child of Array.isArray(value) ? value : Object.values(value)) {
    assertFinite(child as JsonValue);
  }
}

/** Compact JSON with the keys of every object sorted; refuses what standard JSON cannot hold. */
function writeSorted(value: JsonValue): string {
  if (value === null || typeof value !== "object") {
    if (typeof value === "bigint" || (typeof value === "number" && !Number.isFinite(value))) {
      throw new NotJsonError("$", `${String(value)} is not standard JSON`);
    }
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map(writeSorted).join(",")}]`;
  const keys = Object.keys(value).sort();
  return `{${keys.map((key) => `${JSON.stringify(key)}:${writeSorted(value[key] as JsonValue)}`).join(",")}}`;
}

/**
 * The stored line of a row, newline included. Two rows are the same row exactly when their
 * lines are equal (key order does not matter).
 *
 * @throws {@link InvalidLedgerRowError} when the row is not a JSON object naming its model call.
 */
export function encodeRowLine(key: string, row: unknown): string {
  checkRow(key, row);
  return writeSorted(row as JsonValue) + "\n";
}

/**
 * Checks that `row` can be stored, as {@link encodeRowLine} would, without encoding it.
 *
 * @throws {@link InvalidLedgerRowError} when the row is not a JSON object naming its model call.
 */
export function checkRow(key: string, row: unknown): void {
  const callId = checkRowShape(key, row);
  try {
    assertStandardJson(row);
  } catch (error) {
    if (!(error instanceof NotJsonError)) throw error;
    throw new InvalidLedgerRowError(key, `row of model call '${callId}': ${error.message}`, {
      cause: error,
    });
  }
}

/**
 * The part of {@link checkRow} that does not walk the row's values: a JSON object naming its
 * model call. For rows known to hold only standard JSON. Returns the call's ID.
 *
 * @throws {@link InvalidLedgerRowError} when the row is not an object naming its model call.
 */
export function checkRowShape(key: string, row: unknown): string {
  if (row === null || typeof row !== "object" || Array.isArray(row)) {
    throw new InvalidLedgerRowError(key, "a row is a JSON object");
  }
  const callId = (row as { model_call_id?: unknown }).model_call_id;
  if (typeof callId !== "string" || callId.length === 0) {
    throw new InvalidLedgerRowError(key, "a row needs a non-empty string model_call_id");
  }
  return callId;
}

/** Freezes a parsed value all the way down: cached rows are shared with every reader. */
function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === "object" && !Object.isFrozen(value)) {
    for (const child of Object.values(value)) deepFreeze(child);
    Object.freeze(value);
  }
  return value;
}

/** Parses one stored line (without its newline) into a frozen row. */
export function decodeRowLine(key: string, line: string): LedgerRow {
  let row: unknown;
  try {
    row = JSON.parse(line);
  } catch (error) {
    throw new CorruptLedgerError(key, `a line is not JSON: ${(error as Error).message}`, {
      cause: error,
    });
  }
  if (row === null || typeof row !== "object" || Array.isArray(row)) {
    throw new CorruptLedgerError(key, "a line is not a JSON object");
  }
  const callId = (row as { model_call_id?: unknown }).model_call_id;
  if (typeof callId !== "string" || callId.length === 0) {
    throw new CorruptLedgerError(key, "a row names no model_call_id");
  }
  return deepFreeze(row as LedgerRow);
}

/**
 * The rows of the complete lines in `bytes` (UTF-8), and how many bytes they span. A trailing
 * fragment without its newline is left for later: another process may be appending it.
 */
export function decodeRowBytes(key: string, bytes: Buffer): { rows: LedgerRow[]; used: number } {
  const used = bytes.lastIndexOf(0x0a) + 1;
  const rows: LedgerRow[] = [];
  for (const line of bytes.toString("utf8", 0, used).split("\n")) {
    if (line.trim().length > 0) rows.push(decodeRowLine(key, line));
  }
  return { rows, used };
}
