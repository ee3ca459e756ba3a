/**
 * The file work an import defers: target ledgers are
 * written and fenced source ledgers deleted after the import returns, yet every operation on a
 * key behaves as if that work had run inside the import, and `settleDeferred` leaves exactly the
 * files an eager import would have.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { CaptureLedger } from "#sdk/capture/ledger/capture-ledger.js";
import { CorruptLedgerError, RolloutRetiredError } from "#sdk/capture/ledger/errors.js";
import { DeferredFileWork } from "#sdk/capture/ledger/deferred-file-work.js";
import {
  custodyRow,
  ledgerAt,
  listDir,
  makeTempDir,
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

/** A dead attempt 0 of `rollout` that made one call and was started; then a fresh ledger. */
async function deadSource(rollout: string) {
  const dead = ledgerAt(dir);
  await dead.record(rollout, custodyRow("c0", rollout));
  await dead.markStarted(rollout);
  return ledgerAt(dir);
}

const stamped = (rollout: string) => ({ ...custodyRow("c0", rollout), capture_key: rollout });

describe("an import defers its ledger writes and source deletions", () => {
  it("returns with the clearing done and the fences durable as one list, no fence file, target ledger or deletion yet", async () => {
    const ledger = await deadSource("r");
    await ledgerAt(dir).record("r-a1", custodyRow("dead", "r-a1"));

    await ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r")] },
      { targetKey: "s-a2", sourceKey: "s-a1", rows: [] },
    ]);

    expect(await listDir(dir)).toEqual(["r.lineage.jsonl", "r.lineage.started", "restore-fences"]);
    const lists = path.join(dir, "restore-fences");
    const [list] = await listDir(lists);
    expect(await readFile(path.join(lists, list as string), "utf8")).toBe("r\ns\ns-a1\n");
    expect(ledger.deferredKeyCount).toBe(4);
  });

  it("a process started after a crash that left a fence list fences its keys before its first operation, then removes the list", async () => {
    const crashed = await deadSource("r");
    await crashed.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r")] },
    ]);

    const fresh = ledgerAt(dir);
    expect(await fresh.record("r", custodyRow("late", "r"))).toBe("discarded");

    // The source's fence written, its ledger and marker deleted, the list gone; the target's
    // ledger is the next restore's to write (the checkpoint holds its rows).
    expect(await listDir(dir)).toEqual(["r.lineage.retired"]);
  });

  it("a fence list naming an invalid key is a corrupt ledger, not a refused key, and fences nothing", async () => {
    await mkdir(path.join(dir, "restore-fences"));
    await writeFile(path.join(dir, "restore-fences", "1-1-aa.keys"), "r\n../x\n");

    const failure = await ledgerAt(dir)
      .hasRows("q")
      .catch((error: unknown) => error);

    expect(failure).toBeInstanceOf(CorruptLedgerError);
    expect((failure as Error).message).toContain("remove the list");
    expect(await listDir(dir)).toEqual(["restore-fences"]);
  });

  it("a ledger told not to recover fence lists (a worker's) leaves another's list to its writer", async () => {
    const coordinator = await deadSource("r");
    await coordinator.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r")] },
    ]);

    const worker = new CaptureLedger(dir, { recoverFenceLists: false });
    expect(await worker.hasRows("q")).toBe(false);

    expect(await listDir(dir)).toEqual(["r.lineage.jsonl", "r.lineage.started", "restore-fences"]);
    await coordinator.settleDeferred();
    expect(await listDir(dir)).toEqual(["r-a1.lineage.jsonl", "r.lineage.retired"]);
  });

  it("deleting a key a fence list names finishes the list first: after a crash the key is not fenced again", async () => {
    const ledger = await deadSource("r");
    await ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r")] },
      { targetKey: "s-a1", sourceKey: "s", rows: [] },
    ]);

    expect(await ledger.delete(["r"])).toEqual({ removed: [], absent: ["r"] });

    expect(await listDir(dir)).toEqual(["r-a1.lineage.jsonl", "s.lineage.retired"]);
    const afterCrash = ledgerAt(dir);
    expect(await afterCrash.record("r", custodyRow("reused", "r"))).toBe("appended");
    expect(await afterCrash.record("s", custodyRow("late", "s"))).toBe("discarded");
  });

  it("settles running side by side, and beside the next import, remove a fence list once and lose none", async () => {
    for (let round = 0; round < 10; round++) {
      const rollout = `r${round}`;
      const ledger = await deadSource(rollout);
      await ledger.importRecords([
        { targetKey: `${rollout}-a1`, sourceKey: rollout, rows: [custodyRow("c0", rollout)] },
      ]);

      await Promise.all([
        ledger.settleDeferred(),
        ledger.settleDeferred(),
        ledger.importRecords([{ targetKey: `q${round}-a1`, sourceKey: `q${round}`, rows: [] }]),
        ledger.settleInBackground(),
      ]);
      await ledger.settleDeferred();

      expect(await listDir(dir)).not.toContain("restore-fences");
      expect(await listDir(dir)).toEqual(
        expect.arrayContaining([`${rollout}.lineage.retired`, `q${round}.lineage.retired`]),
      );
    }
  });

  it("another server sharing the directory sees the source retired as soon as the import returns", async () => {
    const ledger = await deadSource("r");
    const other = ledgerAt(dir);

    await ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r")] },
    ]);

    await rejectsWith(other.manifest("r"), RolloutRetiredError);
  });

  it("two imports of the same target at once leave the later one's rows, as one after the other would", async () => {
    const ledger = await deadSource("r");

    const first = ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("x", "r")] },
    ]);
    const second = ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("y", "r")] },
    ]);
    await Promise.all([first, second]);

    expect((await ledger.rows("r-a1")).map((row) => row.model_call_id)).toEqual(["y"]);
  });

  it("settleDeferred leaves exactly the files an eager import would", async () => {
    const ledger = await deadSource("r");
    await ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r")] },
    ]);

    await ledger.settleDeferred();

    expect(await listDir(dir)).toEqual(["r-a1.lineage.jsonl", "r.lineage.retired"]);
    expect(ledger.deferredKeyCount).toBe(0);
    expect(await ledgerAt(dir).rows("r-a1")).toEqual([stamped("r")]);
  });

  it("every read of a target sees its imported rows before the settle", async () => {
    const ledger = await deadSource("r");
    await ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r")] },
      { targetKey: "s-a1", sourceKey: "s", rows: [custodyRow("c0", "s")] },
      { targetKey: "t-a1", sourceKey: "t", rows: [custodyRow("c0", "t")] },
    ]);

    expect(await ledger.rows("r-a1")).toEqual([stamped("r")]);
    expect(await ledger.hasRows("s-a1")).toBe(true);
    expect((await ledger.manifest("t-a1")).records.map((r) => r.capture_key)).toEqual(["t"]);
    expect(await ledger.exportRowsOf(["r-a1", "s-a1"], new Set())).toEqual([
      [stamped("r")],
      [stamped("s")],
    ]);
  });

  it("a row recorded before the settle lands after the imported rows, in the file too", async () => {
    const ledger = await deadSource("r");
    await ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r")] },
    ]);

    expect(await ledger.record("r-a1", custodyRow("c1", "r-a1"))).toBe("appended");
    await ledger.settleDeferred();

    const lines = (await readFile(path.join(dir, "r-a1.lineage.jsonl"), "utf8")).split("\n");
    expect(lines.filter(Boolean).map((line) => JSON.parse(line).model_call_id)).toEqual([
      "c0",
      "c1",
    ]);
  });

  it("a source is retired at once: no rows, no started marker, late rows discarded", async () => {
    const ledger = await deadSource("r");
    await ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r")] },
    ]);

    await rejectsWith(ledger.hasRows("r"), RolloutRetiredError);
    expect(await ledger.isStarted("r")).toBe(false);
    expect(await ledger.rows("r")).toEqual([]);
    expect(await ledger.record("r", custodyRow("late", "r"))).toBe("discarded");
  });

  it("retiring or deleting a target before the settle acts on its imported ledger", async () => {
    const ledger = await deadSource("r");
    await ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r")] },
      { targetKey: "s-a1", sourceKey: "s", rows: [custodyRow("c0", "s")] },
    ]);

    expect(await ledger.retire(["r-a1"])).toEqual({ removed: ["r-a1"], absent: [] });
    expect(await ledger.delete(["s-a1"])).toEqual({ removed: ["s-a1"], absent: [] });
    await ledger.settleDeferred();

    const names = await listDir(dir);
    expect(names).toContain("r-a1.lineage.retired");
    expect(names).not.toContain("r-a1.lineage.jsonl");
    expect(names).not.toContain("s-a1.lineage.jsonl");
  });

  it("deleteUnstarted of an untouched target removes its imported rows", async () => {
    const ledger = await deadSource("r");
    await ledger.importRecords([
      { targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r")] },
    ]);

    expect(await ledger.deleteUnstarted("r-a1")).toBe(true);
    await ledger.settleDeferred();

    expect(await ledger.rows("r-a1")).toEqual([]);
    expect(await listDir(dir)).toEqual(["r.lineage.retired"]);
  });

  it("a second import settles the first one's work before listing, so it clears that target", async () => {
    const ledger = await deadSource("r");
    const records = [{ targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r")] }];
    await ledger.importRecords(records);
    await ledger.record("r-a1", custodyRow("c1", "r-a1"));

    const again = await ledger.importRecords(records);

    expect(again.cleared).toEqual(["r-a1.lineage.jsonl"]);
    expect(await ledger.rows("r-a1")).toEqual([stamped("r")]);
  });

  it("a deferred write never clobbers the ledger another server sharing the directory wrote since", async () => {
    const records = [{ targetKey: "r-a1", sourceKey: "r", rows: [custodyRow("c0", "r")] }];
    const a = await deadSource("r");
    const b = ledgerAt(dir);
    await a.importRecords(records);
    await b.importRecords(records);
    // The replacement starts on B, which writes its ledger and appends to it.
    await b.record("r-a1", custodyRow("c1", "r-a1"));

    await a.settleDeferred();

    expect((await ledgerAt(dir).rows("r-a1")).map((row) => row.model_call_id)).toEqual([
      "c0",
      "c1",
    ]);
  });

  it("settleInBackground writes everything and resolves; a second call while it runs joins it", async () => {
    const ledger = await deadSource("r");
    const targets = Array.from({ length: 30 }, (_, i) => ({
      targetKey: `t${i}-a1`,
      sourceKey: `t${i}`,
      rows: [custodyRow("c0", `t${i}`)],
    }));
    await ledger.importRecords(targets);

    const first = ledger.settleInBackground();
    const second = ledger.settleInBackground();
    expect(second).toBe(first);
    await first;

    expect(ledger.deferredKeyCount).toBe(0);
    expect((await listDir(dir)).filter((name) => name.endsWith("-a1.lineage.jsonl"))).toHaveLength(
      30,
    );
  });
});

describe("settleDeferred with a key whose work fails", () => {
  it("settles every other key, leaves that one waiting, and rejects with its failure", async () => {
    const ledger = ledgerAt(dir);
    // A source whose "ledger" is a directory: the deferred deletion of that source's ledger
    // fails (unlink of a directory), every other piece of work succeeds.
    await mkdir(path.join(dir, "bad.lineage.jsonl"), { recursive: true });
    const targets = [
      ...Array.from({ length: 10 }, (_, i) => `t${i}`),
      "bad",
      ...Array.from({ length: 10 }, (_, i) => `u${i}`),
    ].map((source) => ({
      targetKey: `${source}-a1`,
      sourceKey: source,
      rows: [custodyRow("c0", source)],
    }));
    await ledger.importRecords(targets);

    const failure = await ledger.settleDeferred().then(
      () => null,
      (error: unknown) => error as NodeJS.ErrnoException,
    );

    expect(["EISDIR", "EPERM"]).toContain(failure?.code);
    expect(ledger.deferredKeyCount).toBe(1);
    const written = (await listDir(dir)).filter((name) => name.endsWith("-a1.lineage.jsonl"));
    expect(written).toHaveLength(21);
    // The background settle logs the failure instead and still leaves the key to its next use.
    await ledger.settleInBackground();
    expect(ledger.deferredKeyCount).toBe(1);
  });
});

describe("DeferredFileWork", () => {
  it("keeps a key's work until it is marked done; work deferred again runs after the earlier", () => {
    const ran: string[] = [];
    const work = new DeferredFileWork();
    work.defer("k", { run: () => ran.push("delete"), creates: false });
    work.defer("k", { run: () => ran.push("write"), creates: true });

    work.get("k")?.run();
    expect(work.size).toBe(1);
    work.done("k");

    expect(ran).toEqual(["delete", "write"]);
    expect(work.size).toBe(0);
    expect(work.get("k")).toBeUndefined();
    expect(work.takeUnsynced("k")).toBe(true);
    expect(work.takeUnsynced("k")).toBe(false);
  });

  it("a directory fsync covers the files settled work created", () => {
    const work = new DeferredFileWork();
    work.defer("a", { run: () => undefined, creates: true });
    work.defer("b", { run: () => undefined, creates: false });
    work.done("a");
    work.done("b");

    work.synced(["a"]);

    expect(work.takeUnsynced("a")).toBe(false);
    expect(work.takeUnsynced("b")).toBe(false);
  });
});
