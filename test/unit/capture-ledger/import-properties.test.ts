/**
 * Property of restore import: whatever files dead executions left —
 * for the restored rollouts, their look-alikes (`r1`, `r-a1x` beside `r`) and others — after
 * one import batch each target's rows are exactly the given rows in order, stamped; no file of
 * an attempt at or after the target remains but the target's ledger; the source attempts
 * `0..N` are fenced; and every other file is as it was.
 */
import { mkdir } from "node:fs/promises";
import path from "node:path";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CAPTURE_FILE_SUFFIXES } from "#sdk/capture/ledger/files.js";
import type { LedgerRow } from "#sdk/capture/ledger/row-codec.js";
import { captureKey, episodeId } from "#sdk/identity/episode-id.js";
import { ledgerAt, listDir, makeTempDir, plant, removeTempDir } from "./helpers.js";

const ROLLOUTS = ["r", "r1", "r-a1x", "q"] as const;
const SUFFIXES = Object.values(CAPTURE_FILE_SUFFIXES);

let root: string;
let runs = 0;

beforeAll(async () => {
  root = await makeTempDir();
});

afterAll(async () => {
  await removeTempDir(root);
});

const keyOf = (rollout: string, attempt: number): string => captureKey(episodeId(rollout, attempt));

/** A file a dead execution left: rollout, attempt, suffix. */
const leftoverArb = fc.record({
  rollout: fc.constantFrom(...ROLLOUTS),
  attempt: fc.integer({ min: 0, max: 5 }),
  suffix: fc.constantFrom(...SUFFIXES),
});

const extraArb = fc.oneof(
  fc.string(),
  fc.integer(),
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.integer(), { maxLength: 3 }),
);

/** A row with a unique call ID: custody (maybe already stamped), failure or lineage-only. */
const rowArb = (index: number): fc.Arbitrary<LedgerRow> =>
  fc
    .oneof(
      fc.record({
        staging_key: fc.constant(`x/c${index}`),
        capture_key: fc.option(fc.constantFrom("r", "r-a1"), { nil: undefined }),
        extra: extraArb,
      }),
      fc.record({ failure_reason: fc.constantFrom("worker_capture_failed", "unresolved") }),
      fc.record({ fingerprint: fc.string(), extra: extraArb }),
    )
    .map((fields) => {
      const row: Record<string, unknown> = { model_call_id: `c${index}` };
      for (const [name, value] of Object.entries(fields))
        if (value !== undefined) row[name] = value;
      return row as LedgerRow;
    });

const rowsArb = fc
  .integer({ min: 0, max: 4 })
  .chain((n) => fc.tuple(...Array.from({ length: n }, (_, i) => rowArb(i))));

/** Restored rollouts: distinct, each with source attempt N and target N+1 or N+2. */
const targetsArb = fc
  .uniqueArray(fc.constantFrom(...ROLLOUTS), { minLength: 1, maxLength: ROLLOUTS.length })
  .chain((rollouts) =>
    fc.tuple(
      ...rollouts.map((rollout) =>
        fc.record({
          rollout: fc.constant(rollout),
          source: fc.integer({ min: 0, max: 3 }),
          gap: fc.integer({ min: 1, max: 2 }),
          rows: rowsArb,
        }),
      ),
    ),
  );

/** The rows an import should leave for `imported`: stamped with its source key. */
function stamp(imported: {
  sourceKey: string;
  rows: readonly Record<string, unknown>[];
}): Record<string, unknown>[] {
  return imported.rows.map((row) =>
    row.staging_key !== undefined && row.capture_key === undefined
      ? { ...row, capture_key: imported.sourceKey }
      : row,
  );
}

describe("importRecords (property)", () => {
  it("leaves exactly the stamped rows and clears attempts at or after each target", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(leftoverArb, { maxLength: 25 }),
        targetsArb,
        async (leftovers, targets) => {
          runs += 1;
          const dir = path.join(root, `run-${runs}`);
          await mkdir(dir);
          for (const { rollout, attempt, suffix } of leftovers) {
            const text = suffix === ".lineage.jsonl" ? '{"model_call_id":"dead"}\n' : "";
            await plant(dir, keyOf(rollout, attempt) + suffix, text);
          }
          const before = await listDir(dir);
          const imports = targets.map((t) => ({
            targetKey: keyOf(t.rollout, t.source + t.gap),
            sourceKey: keyOf(t.rollout, t.source),
            rows: t.rows,
          }));

          const ledger = ledgerAt(dir);
          await ledger.importRecords(imports);
          // The importing ledger sees exactly the stamped rows before its files are written.
          for (const imported of imports) {
            expect(await ledger.rows(imported.targetKey)).toEqual(stamp(imported));
          }
          await ledger.settleDeferred();

          const expected = new Set(before);
          for (const t of targets) {
            const target = t.source + t.gap;
            for (const name of before) {
              for (let attempt = target; attempt <= 5; attempt++) {
                if (SUFFIXES.some((suffix) => name === keyOf(t.rollout, attempt) + suffix)) {
                  expected.delete(name);
                }
              }
            }
            if (t.rows.length > 0) expected.add(`${keyOf(t.rollout, target)}.lineage.jsonl`);
            for (let attempt = 0; attempt <= t.source; attempt++) {
              expected.delete(`${keyOf(t.rollout, attempt)}.lineage.jsonl`);
              expected.delete(`${keyOf(t.rollout, attempt)}.lineage.started`);
              expected.add(`${keyOf(t.rollout, attempt)}.lineage.retired`);
            }
          }
          expect(await listDir(dir)).toEqual([...expected].sort());

          const reader = ledgerAt(dir);
          for (const imported of imports) {
            expect(await reader.rows(imported.targetKey)).toEqual(stamp(imported));
          }
        },
      ),
      { numRuns: 60 },
    );
  });
});
