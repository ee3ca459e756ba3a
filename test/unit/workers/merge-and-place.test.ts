import { describe, expect, it } from "vitest";
import { mergeReports, mergeStatusExtras } from "#sdk/workers/merge-reports.js";
import { placeOwners } from "#sdk/workers/owner-placement.js";
import { prepareReport } from "#sdk/wire/control.js";

const facts = { blockerPrefix: "resources", expected: 2, lost: false };

describe("mergeReports", () => {
  it("is ready only when every expected worker reported ready", () => {
    const ready = prepareReport({ ready: true, counts: { sessions: 2 } });
    expect(mergeReports([ready, ready], facts).ready).toBe(true);
    const one = mergeReports([ready], facts);
    expect(one.ready).toBe(false);
    expect(one.blockers).toEqual(["resources-workers-unreported:1"]);
  });

  it("unions blockers (synthetic first, capped with the full count), sums counts, keeps every restart", () => {
    const a = prepareReport({
      ready: false,
      blockers: Array.from({ length: 150 }, (_, i) => `a-${i}`),
      counts: { inflight: 150 },
      restarts: Array.from({ length: 120 }, (_, i) => `ra-${i}`),
    });
    const b = prepareReport({
      ready: false,
      blockers: ["b-1"],
      counts: { inflight: 1, sessions: 4 },
      restarts: ["rb"],
    });
    const merged = mergeReports([a, b], { ...facts, lost: true });
    expect(merged.ready).toBe(false);
    expect(merged.blockers[0]).toBe("resources-worker-lost");
    expect(merged.blockers).toHaveLength(100);
    expect(merged.blocker_count).toBe(1 + 150 + 1);
    expect(merged.counts).toEqual({ inflight: 151, sessions: 4, workers: 2 });
    expect(merged.restarts).toHaveLength(121);
  });

  it("merges status extras: sums, ands, sorted unique lists, first value otherwise", () => {
    expect(
      mergeStatusExtras([
        { mode: "exported", retired_sessions: 2, accepting: true, restored_pending: ["b", "a"] },
        { mode: "exported", retired_sessions: 3, accepting: false, restored_pending: ["a", "c"] },
      ]),
    ).toEqual({
      mode: "exported",
      retired_sessions: 5,
      accepting: false,
      restored_pending: ["a", "b", "c"],
    });
  });
});

describe("placeOwners", () => {
  it("keeps each owner whole and spreads owners by record count", () => {
    const aliases = placeOwners(
      new Map([
        ["w1", 8],
        ["w2", 8],
        ["w3", 1],
        ["w4", 1],
      ]),
      ["n1", "n2"],
    );
    const load = new Map<string, number>();
    for (const [owner, worker] of aliases) {
      load.set(
        worker,
        (load.get(worker) ?? 0) + ({ w1: 8, w2: 8, w3: 1, w4: 1 } as const)[owner as "w1"],
      );
    }
    expect(aliases.size).toBe(4);
    expect(load).toEqual(
      new Map([
        ["n1", 9],
        ["n2", 9],
      ]),
    );
  });

  it("gives owners with no records a worker too, and merges owners when workers are fewer", () => {
    const aliases = placeOwners(
      new Map([
        ["a", 3],
        ["b", 0],
        ["c", 2],
      ]),
      ["only"],
    );
    expect([...aliases.values()]).toEqual(["only", "only", "only"]);
    const spread = placeOwners(
      new Map([
        ["", 5],
        ["x", 0],
      ]),
      ["n1", "n2"],
    );
    expect(spread.get("")).toBe("n1");
    expect(spread.get("x")).toBe("n2");
  });
});
