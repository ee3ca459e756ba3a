/**
 * Started markers and `deleteUnstarted`: the marker is
 * created exclusively, survives a new instance over the same directory, is shared by every
 * server on it, keeps a started attempt's ledger, and goes with the attempt's ledger.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { custodyRow, ledgerAt, listDir, makeTempDir, removeTempDir } from "./helpers.js";

let dir: string;

beforeEach(async () => {
  dir = await makeTempDir();
});

afterEach(async () => {
  await removeTempDir(dir);
});

describe("markStarted", () => {
  it("creates <k>.lineage.started and reports whether this call created it", async () => {
    const ledger = ledgerAt(dir);
    expect(await ledger.isStarted("r-a1")).toBe(false);

    expect(await ledger.markStarted("r-a1")).toBe(true);
    expect(await ledger.markStarted("r-a1")).toBe(false);

    expect(await listDir(dir)).toEqual(["r-a1.lineage.started"]);
    expect(await ledger.isStarted("r-a1")).toBe(true);
  });

  it("exactly one of many racing servers creates the marker", async () => {
    const servers = Array.from({ length: 8 }, () => ledgerAt(dir));
    const created = await Promise.all(servers.map((server) => server.markStarted("r-a1")));
    expect(created.filter(Boolean)).toHaveLength(1);
  });

  it("never marks a retired attempt", async () => {
    const ledger = ledgerAt(dir);
    await ledger.retire(["r-a1"]);

    expect(await ledger.markStarted("r-a1")).toBe(false);
    expect(await ledger.isStarted("r-a1")).toBe(false);
  });

  it("survives a new instance over the same directory", async () => {
    await ledgerAt(dir).markStarted("r-a1");
    const restarted = ledgerAt(dir);

    expect(await restarted.isStarted("r-a1")).toBe(true);
    expect(await restarted.markStarted("r-a1")).toBe(false);
  });
});

describe("deleteUnstarted", () => {
  it("deletes ledger and fence of an attempt nothing started, leaving no marker or fence", async () => {
    const ledger = ledgerAt(dir);
    await ledger.record("r-a1", custodyRow("c1", "r-a1"));
    await ledger.record("r-a2", custodyRow("c1", "r-a2"));

    expect(await ledger.deleteUnstarted("r-a1")).toBe(true);

    expect(await listDir(dir)).toEqual(["r-a2.lineage.jsonl"]);
    expect(await ledger.hasRows("r-a1")).toBe(false);
    expect(await ledger.record("r-a1", custodyRow("c2", "r-a1"))).toBe("appended");
  });

  it("removes a fence so the controller can still run the attempt", async () => {
    const ledger = ledgerAt(dir);
    await ledger.retire(["r-a1"]);

    expect(await ledger.deleteUnstarted("r-a1")).toBe(true);

    expect(await listDir(dir)).toEqual([]);
  });

  it("is a no-op for an attempt any server sharing the directory started", async () => {
    const commitServer = ledgerAt(dir);
    const otherServer = ledgerAt(dir);
    await commitServer.record("r-a1", custodyRow("c1", "r-a1"));
    await otherServer.markStarted("r-a1");

    expect(await commitServer.deleteUnstarted("r-a1")).toBe(false);

    expect(await listDir(dir)).toEqual(["r-a1.lineage.jsonl", "r-a1.lineage.started"]);
    expect(await commitServer.hasRows("r-a1")).toBe(true);
  });

  it("keeps a started attempt whose call has no row yet", async () => {
    const ledger = ledgerAt(dir);
    await ledger.markStarted("r-a1");

    expect(await ledger.deleteUnstarted("r-a1")).toBe(false);
    expect(await ledger.isStarted("r-a1")).toBe(true);
  });

  it("a marker from before a restart still keeps the ledger", async () => {
    const before = ledgerAt(dir);
    await before.markStarted("r-a1");
    await before.record("r-a1", custodyRow("c1", "r-a1"));

    expect(await ledgerAt(dir).deleteUnstarted("r-a1")).toBe(false);
    expect(await ledgerAt(dir).hasRows("r-a1")).toBe(true);
  });

  it("and markStarted on one key are serialized: the call that marks first wins", async () => {
    const ledger = ledgerAt(dir);
    await ledger.record("r-a1", custodyRow("c1", "r-a1"));

    const [marked, deleted] = await Promise.all([
      ledger.markStarted("r-a1"),
      ledger.deleteUnstarted("r-a1"),
    ]);

    expect([marked, deleted]).toEqual([true, false]);
    expect(await ledger.hasRows("r-a1")).toBe(true);
  });
});

describe("the marker ends with the attempt's ledger", () => {
  it.each(["retire", "delete"] as const)("%s removes it", async (op) => {
    const ledger = ledgerAt(dir);
    await ledger.markStarted("r-a1");

    await ledger[op](["r-a1"]);

    expect(await ledger.isStarted("r-a1")).toBe(false);
  });
});
