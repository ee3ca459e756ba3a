/**
 * Rollout IDs have no maximum length, but file names do (255 bytes): a key whose
 * plain name would not fit gets a digest name, and every ledger operation (record, manifest,
 * retire, delete, started markers, restore import) works on it as on a short key. Short keys keep
 * their plain names.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  CAPTURE_FILE_SUFFIXES,
  MAX_FILE_NAME_BYTES,
  captureFileName,
  parseCaptureFileName,
  parseDigestFileName,
  rolloutDigestStem,
  type CaptureFileKind,
} from "#sdk/capture/ledger/files.js";
import { RolloutRetiredError } from "#sdk/capture/ledger/errors.js";
import { RolloutIndex } from "#sdk/capture/ledger/rollout-index.js";
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

/** A 300-character rollout ID: its ledger name would be 314 bytes. */
const LONG = `r${"x".repeat(299)}`;
/** Another long rollout ID sharing LONG's first 299 characters. */
const LOOK_ALIKE = `r${"x".repeat(298)}y`;
const KINDS = Object.keys(CAPTURE_FILE_SUFFIXES) as CaptureFileKind[];

let dir: string;

beforeEach(async () => {
  dir = await makeTempDir();
});

afterEach(async () => {
  await removeTempDir(dir);
});

describe("file names of long keys", () => {
  it("are digest names that fit, parse back to the rollout's digest and attempt, and never to a plain key", () => {
    for (const key of [LONG, `${LONG}-a1`, `${LONG}-a${Number.MAX_SAFE_INTEGER}`]) {
      for (const kind of KINDS) {
        const name = captureFileName(key, kind);
        expect(Buffer.byteLength(name)).toBeLessThanOrEqual(MAX_FILE_NAME_BYTES);
        expect(parseCaptureFileName(name)).toBeNull();
        expect(parseDigestFileName(name)).toMatchObject({
          stem: rolloutDigestStem(LONG),
          kind,
        });
      }
    }
    expect(parseDigestFileName(captureFileName(`${LONG}-a7`, "fence"))?.attempt).toBe(7);
    expect(captureFileName(LOOK_ALIKE, "ledger")).not.toBe(captureFileName(LONG, "ledger"));
  });

  it("keep the plain name whenever it fits, kind by kind", () => {
    // 241 characters: the ledger name (255 bytes) fits, `.tokens.incomplete` (259) does not.
    const edge = `e${"x".repeat(240)}`;
    expect(captureFileName(edge, "ledger")).toBe(`${edge}.lineage.jsonl`);
    expect(captureFileName(edge, "tokensIncomplete")).toMatch(
      /^~[0-9a-f]{64}\.tokens\.incomplete$/,
    );
    expect(captureFileName("r-a1", "fence")).toBe("r-a1.lineage.retired");
  });

  it("are found by the rollout index, plain and digest names of one rollout alike", () => {
    const edge = `e${"x".repeat(240)}`;
    const names = [
      captureFileName(edge, "ledger"),
      captureFileName(edge, "tokensIncomplete"),
      captureFileName(`${edge}-a1`, "ledger"),
      captureFileName(`${edge}-a2`, "fence"),
      captureFileName(`${LOOK_ALIKE}-a1`, "ledger"),
      "~notadigest.lineage.jsonl",
    ];
    const index = new RolloutIndex(names);
    const found = index.fromAttempt(episodeId(edge, 1));
    expect(found.map((file) => [file.key, file.kind]).sort()).toEqual([
      [`${edge}-a1`, "ledger"],
      [`${edge}-a2`, "fence"],
    ]);
    expect(index.fromAttempt(episodeId(edge, 0))).toHaveLength(4);
    expect(index.fromAttempt(episodeId(LONG, 0))).toEqual([]);
  });
});

describe("a ledger of a long key", () => {
  it("records, reads and manifests rows, and leaves no file with a name too long", async () => {
    const ledger = ledgerAt(dir);
    expect(await ledger.record(LONG, custodyRow("c1", LONG))).toBe("appended");
    expect(await ledger.recordFailure(`${LONG}-a1`, "c2", "worker_capture_failed")).toBe(
      "appended",
    );
    expect((await ledger.rows(LONG)).map((row) => row.model_call_id)).toEqual(["c1"]);
    expect(await ledger.hasRows(LONG)).toBe(true);
    const manifest = await ledger.manifest(`${LONG}-a1`);
    expect(manifest.rollout_id).toBe(`${LONG}-a1`);
    expect(manifest.failures).toHaveLength(1);
    // A fresh ledger over the same directory (another process) reads the same rows.
    expect(await ledgerAt(dir).rows(LONG)).toHaveLength(1);
    for (const name of await listDir(dir)) {
      expect(Buffer.byteLength(name)).toBeLessThanOrEqual(MAX_FILE_NAME_BYTES);
    }
  });

  it("retires (fenced: reads refused, late rows discarded) and deletes", async () => {
    const ledger = ledgerAt(dir);
    await ledger.record(LONG, custodyRow("c1", LONG));
    expect(await ledger.retire([LONG, `${LONG}-a1`])).toEqual({
      removed: [LONG],
      absent: [`${LONG}-a1`],
    });
    await rejectsWith(ledger.manifest(LONG), RolloutRetiredError);
    expect(await ledger.record(LONG, custodyRow("late", LONG))).toBe("discarded");
    expect(await ledger.markStarted(LONG)).toBe(false);

    expect(await ledger.delete([LONG])).toEqual({ removed: [], absent: [LONG] });
    expect(await ledger.record(LONG, custodyRow("again", LONG))).toBe("appended");
    expect(await ledger.delete([LONG])).toEqual({ removed: [LONG], absent: [] });
    expect(await listDir(dir)).toEqual([captureFileName(`${LONG}-a1`, "fence")]);
  });

  it("marks an attempt started and refuses to delete it unstarted", async () => {
    const ledger = ledgerAt(dir);
    expect(await ledger.markStarted(`${LONG}-a1`)).toBe(true);
    expect(await ledger.isStarted(`${LONG}-a1`)).toBe(true);
    expect(await ledger.deleteUnstarted(`${LONG}-a1`)).toBe(false);
    expect(await ledger.deleteUnstarted(`${LONG}-a2`)).toBe(true);
  });

  it("is imported on restore: later attempts of that rollout are cleared, its sources fenced, a look-alike untouched", async () => {
    const dead = ledgerAt(dir);
    await dead.record(LONG, custodyRow("c0", LONG));
    await dead.record(`${LONG}-a1`, custodyRow("dead-1", `${LONG}-a1`));
    await dead.markStarted(`${LONG}-a1`);
    await dead.retire([`${LONG}-a2`]);
    await plant(dir, captureFileName(`${LONG}-a1`, "tokens"), "{}\n");
    await dead.record(`${LOOK_ALIKE}-a1`, custodyRow("other", `${LOOK_ALIKE}-a1`));

    const ledger = ledgerAt(dir);
    const result = await ledger.importRecords([
      { targetKey: `${LONG}-a1`, sourceKey: LONG, rows: [custodyRow("c0", LONG)] },
    ]);
    expect(result.imported).toEqual([`${LONG}-a1`]);
    expect(result.cleared).toEqual(
      [
        captureFileName(`${LONG}-a1`, "ledger"),
        captureFileName(`${LONG}-a1`, "started"),
        captureFileName(`${LONG}-a1`, "tokens"),
        captureFileName(`${LONG}-a2`, "fence"),
      ].sort(),
    );
    expect(result.retired).toEqual({ removed: [LONG], absent: [] });

    const rows = await ledger.rows(`${LONG}-a1`);
    expect(rows.map((row) => [row.model_call_id, row.capture_key])).toEqual([["c0", LONG]]);
    await rejectsWith(ledger.manifest(LONG), RolloutRetiredError);
    expect(await ledger.rows(`${LOOK_ALIKE}-a1`)).toHaveLength(1);
    await ledger.settleDeferred();
    expect(await listDir(dir)).toEqual(
      [
        captureFileName(LONG, "fence"),
        captureFileName(`${LONG}-a1`, "ledger"),
        captureFileName(`${LOOK_ALIKE}-a1`, "ledger"),
      ].sort(),
    );
  });
});
