/**
 * Shared helpers of the capture-ledger tests: rows shaped like the ones a policy model server
 * writes, a ledger over a fresh temporary directory, and a logger that keeps its warnings.
 */
import { readdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { expect } from "vitest";
import { CaptureLedger } from "#sdk/capture/ledger/capture-ledger.js";
import type { LedgerRow } from "#sdk/capture/ledger/row-codec.js";

export { makeTempDir, removeTempDir } from "../../support/test-participant.js";

/** A custody row of call `id` staged under `key`, as the capture middleware writes it. */
export function custodyRow(
  id: string,
  key = "r1",
  overrides: Record<string, unknown> = {},
): LedgerRow {
  return {
    model_call_id: id,
    fingerprint: "f".repeat(64),
    context_len: 1,
    context_digest: "d".repeat(64),
    digest: "c".repeat(64),
    parent_call_id: null,
    staging_key: `${key}/${id}`,
    weight_version: 17,
    prev_len: 0,
    delta_len: 900,
    cum_len: 900,
    staging_digest: "a".repeat(64),
    extras_digest: "e".repeat(64),
    mode: "text",
    admitted_at: 1_755_600_000.25,
    staging_chain: [`${key}/${id}`],
    chain_hash: "1".repeat(64),
    cumulative_hash: "c".repeat(64),
    response_id: `chatcmpl-${id}`,
    output_fingerprint: null,
    continuation_fingerprint: null,
    fingerprint_version: 3,
    ...overrides,
  } as LedgerRow;
}

/** A warn-only logger that keeps what it was given. */
export function warnings(): {
  logger: { warn: (obj: unknown, msg?: string) => void };
  logged: { obj: unknown; msg: string }[];
} {
  const logged: { obj: unknown; msg: string }[] = [];
  return { logger: { warn: (obj, msg = "") => logged.push({ obj, msg }) }, logged };
}

/** The sorted entry names of `dir`. */
export async function listDir(dir: string): Promise<string[]> {
  // The writer registry is how the ledger knows it is alone, not one of its files.
  return (await readdir(dir)).filter((name) => name !== "writers").sort();
}

/** The text of `name` in `dir`. */
export async function readText(dir: string, name: string): Promise<string> {
  return await readFile(path.join(dir, name), "utf8");
}

/** Creates `name` in `dir` with `text` (a file a dead execution or a crash left). */
export async function plant(dir: string, name: string, text = ""): Promise<void> {
  await writeFile(path.join(dir, name), text);
}

/** A ledger over `dir`. */
export function ledgerAt(dir: string, logger?: { warn: (obj: unknown, msg?: string) => void }) {
  return new CaptureLedger(dir, logger === undefined ? {} : { logger });
}

/** Asserts that `promise` rejects with an instance of `type` and returns the error. */
export async function rejectsWith<E extends Error>(
  promise: Promise<unknown>,
  type: abstract new (...args: never[]) => E,
): Promise<E>;
export async function rejectsWith(
  promise: Promise<unknown>,
  type: abstract new (...args: never[]) => Error,
): Promise<Error>;
export async function rejectsWith(
  promise: Promise<unknown>,
  type: abstract new (...args: never[]) => Error,
): Promise<Error> {
  const error = await promise.then(
    () => null,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(type);
  return error as Error;
}
