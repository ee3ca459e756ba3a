/**
 * The policy model participant, transport-free (see docs/policy-model.md): readiness,
 * export and the commit reply, install, restored attempts (`delete_restored`, started markers),
 * retire, and restored generation cuts. Ledgers are real file ledgers in a temporary directory;
 * some cases drive the participant through the generic control plane.
 */
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import path from "node:path";
import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { CaptureLedger, type LedgerRemoval } from "#sdk/capture/ledger/capture-ledger.js";
import { RolloutRetiredError } from "#sdk/capture/ledger/errors.js";
import type { LedgerRow } from "#sdk/capture/ledger/row-codec.js";
import { conversationDigest } from "#sdk/capture/fingerprints.js";
import { ControlPlane } from "#sdk/control/control-plane.js";
import { GymError } from "#sdk/errors.js";
import { RecordsWriter } from "#sdk/store/records-writer.js";
import { episodeId, type EpisodeId } from "#sdk/identity/episode-id.js";
import type { Ticket } from "#sdk/participants/model/policy-gate.js";
import {
  PolicyParticipant,
  UNTAGGED_BLOCKER,
  type ModelRecord,
  type PolicyParticipantOptions,
} from "#sdk/participants/model/policy-participant.js";
import type { CutRecord } from "#sdk/participants/model/restored-cuts.js";
import { deferred } from "#sdk/util/deferred.js";
import type { PrepareRequest } from "#sdk/wire/control.js";
import { custodyRow, listDir, plant } from "../capture-ledger/helpers.js";
import { capture, cutOf, cutRound, itemsOf, onWorker } from "../../support/policy-calls.js";
import {
  commitReq,
  eps,
  flush,
  inSeconds,
  makeTempDir,
  removeTempDir,
  req,
  restoreReq,
} from "../../support/test-participant.js";

const r0 = episodeId("r", 0);
const r1 = episodeId("r", 1);
const r2 = episodeId("r", 2);
const q0 = episodeId("q", 0);

let dir: string;
let ckptDir: string;
const planes: ControlPlane<ModelRecord>[] = [];
const cleanups: (() => void)[] = [];

/** Every ledger a test made, so that disk checks see the files an import deferred. */
const ledgers: CaptureLedger[] = [];

beforeEach(async () => {
  ledgers.length = 0;
  dir = await makeTempDir();
  ckptDir = await makeTempDir();
});

afterEach(async () => {
  vi.useRealTimers();
  for (const cleanup of cleanups.splice(0)) cleanup();
  for (const cp of planes.splice(0)) cp.close();
  // A resume settles a restore's deferred ledger files in the background: let it end first.
  await Promise.all(ledgers.map((ledger) => ledger.settleInBackground()));
  await removeTempDir(dir);
  await removeTempDir(ckptDir);
});

// ------------------------------------------------------------------------------------ helpers

function participant(
  options: Partial<PolicyParticipantOptions> & { ledgerDir?: string } = {},
): PolicyParticipant {
  const ledger =
    options.ledger === undefined ? newLedger(options.ledgerDir ?? dir) : options.ledger;
  return new PolicyParticipant({ ...options, ledger });
}

function plane(p: PolicyParticipant): ControlPlane<ModelRecord> {
  const cp = new ControlPlane<ModelRecord>(p, { instance: "policy", leaseGraceSeconds: 100 });
  planes.push(cp);
  return cp;
}

function prepareReq(id = "c1"): PrepareRequest {
  return { checkpoint_id: id, deadline_ts: inSeconds(30) };
}

function record(e: EpisodeId, rows: LedgerRow[], cuts: CutRecord[] = []): ModelRecord {
  return { episode_id: e, rows, generation_cuts: cuts } as unknown as ModelRecord;
}

function failureRow(id: string): LedgerRow {
  return { model_call_id: id, failure_reason: "worker_capture_failed" } as LedgerRow;
}

/** A cut round stub: each ticket on a worker gets the cut `cuts[model call ID]`, if any. */
/** Runs a call to the end: delivers its response, then leaves. */
async function finish(p: PolicyParticipant, t: Ticket): Promise<void> {
  await p.gate.deliver(t);
  p.gate.exit(t);
}

/** Tracks a promise's outcome without awaiting it. */
function watch<T>(promise: Promise<T>) {
  const state = { settled: false, value: undefined as T | undefined, error: null as unknown };
  promise.then(
    (value) => {
      state.settled = true;
      state.value = value;
    },
    (error: unknown) => {
      state.settled = true;
      state.error = error;
    },
  );
  return state;
}

/** Polls until `check` holds, yielding to I/O between checks; gives up after 5 s. */
async function until(check: () => boolean): Promise<void> {
  const giveUp = Date.now() + 5000;
  while (!check() && Date.now() < giveUp) await flush(1);
  expect(check()).toBe(true);
}

async function code(work: Promise<unknown>): Promise<string> {
  try {
    await work;
  } catch (error) {
    if (error instanceof GymError) return error.code;
    throw error;
  }
  return "ok";
}

function newLedger(ledgerDir: string): CaptureLedger {
  const ledger = new CaptureLedger(ledgerDir);
  ledgers.push(ledger);
  return ledger;
}

/** Whether `name` is in the ledger directory once every deferred import write has run. */
async function has(name: string): Promise<boolean> {
  for (const ledger of ledgers) await ledger.settleDeferred();
  return existsSync(path.join(dir, name));
}

const signal = (): AbortSignal => new AbortController().signal;

// --------------------------------------------------------------------------------- readiness

describe("PolicyParticipant readiness", () => {
  it("is kind model; readiness mirrors the gate, and ready() equals readiness().ready", async () => {
    const p = participant();
    expect(p.kind).toBe("model");
    expect(p.ready()).toBe(p.readiness().ready);
    expect(p.readiness()).toEqual({
      ready: true,
      blockers: [],
      blocker_count: 0,
      counts: { inflight: 0, held: 0, cut: 0, cut_failed: 0, cut_skipped: 0 },
      restarts: [],
    });
    const streaming = await p.gate.admit(r1);
    await p.gate.deliver(streaming);
    const untagged = await p.gate.admit(null);
    await p.gate.deliver(untagged);
    const held = capture(await p.gate.admit(q0), "c-q");
    held.restartReason = "tool_choice:required";
    await p.closeAdmission(prepareReq());
    expect(p.readiness()).toEqual({
      ready: false,
      blockers: [UNTAGGED_BLOCKER, "r-a1"].sort(),
      blocker_count: 2,
      counts: { inflight: 3, held: 1, cut: 0, cut_failed: 0, cut_skipped: 1 },
      restarts: [],
    });
    expect(UNTAGGED_BLOCKER).not.toBe("");
    expect(p.ready()).toBe(false);
    p.gate.exit(streaming);
    expect(p.ready()).toBe(p.readiness().ready);
    expect(p.ready()).toBe(false);
    p.gate.exit(untagged);
    expect(p.ready()).toBe(true);
    expect(p.readiness().ready).toBe(true);
    expect(p.readiness().counts).toMatchObject({ inflight: 1, held: 1 });
  });

  it("counts cut, cut_failed and cut_skipped from the tickets of a cut round", async () => {
    const round = cutRound({ "c-a": cutOf("c-a", "a") });
    const p = participant({ cuts: round.service });
    await onWorker(p, episodeId("a", 0), "c-a");
    await onWorker(p, episodeId("b", 0), "c-b");
    const constrained = await onWorker(p, episodeId("c", 0), "c-c");
    constrained.restartReason = "response_format:json_schema";
    await p.closeAdmission(prepareReq());
    expect(round.rounds).toEqual([["c-a", "c-b"]]);
    expect(p.readiness().counts).toEqual({
      inflight: 3,
      held: 3,
      cut: 1,
      cut_failed: 1,
      cut_skipped: 1,
    });
    expect(p.readiness().ready).toBe(true);
  });

  it("tells onCheckpoint the checkpoint ID of a prepare before its cut round", async () => {
    const seen: string[] = [];
    const p = participant({
      onCheckpoint: (id) => seen.push(`checkpoint ${id}`),
      cuts: {
        cut: async () => {
          seen.push("cut round");
          return new Map();
        },
      },
    });
    await onWorker(p, r0, "c1");
    await p.closeAdmission(prepareReq("ck-7"));
    expect(seen).toEqual(["checkpoint ck-7", "cut round"]);
  });

  it("through the control plane, prepare waits only for streaming responses; held and waiting calls never block", async () => {
    const p = participant();
    const cp = plane(p);
    const streaming = await p.gate.admit(r0);
    await p.gate.deliver(streaming);
    const held = capture(await p.gate.admit(q0), "c-held");
    const preparing = watch(cp.prepare(prepareReq("ck")));
    await until(() => !p.gate.accepting);
    const waiting = watch(p.gate.admit(episodeId("w", 0)));
    const heldDelivery = watch(p.gate.deliver(held));
    await flush();
    expect(preparing.settled).toBe(false);
    expect(waiting.settled).toBe(false);
    p.gate.exit(streaming);
    await until(() => preparing.settled);
    expect(preparing.error).toBeNull();
    expect(preparing.value).toMatchObject({
      phase: "prepared",
      report: { ready: true, blockers: [], counts: { inflight: 1, held: 1 } },
    });
    expect(heldDelivery.settled).toBe(false);
    expect(waiting.settled).toBe(false);
    expect(p.gate.waitingCount).toBe(1);
    await cp.resume(req("ck"));
    await until(() => heldDelivery.settled && waiting.settled);
    expect(held.responseStarted).toBe(true);
    expect((waiting.value as Ticket).captureKey).toBe("w");
  });
});

// ---------------------------------------------------------------------------- export & reply

describe("PolicyParticipant export", () => {
  it("refuses an export without a scope with checkpoint_error", async () => {
    const p = participant();
    await p.closeAdmission(prepareReq());
    expect(await code(p.export(null))).toBe("checkpoint_error");
  });

  it("exports nothing without a capture ledger", async () => {
    const p = participant({ ledger: null });
    const t = await p.gate.admit(r0);
    t.cutRecord = cutOf("c1", "r");
    capture(t, "c1");
    await p.closeAdmission(prepareReq());
    expect(await p.export([r0])).toEqual([]);
  });

  it("leaves out the rows of undelivered calls (any key), keeps delivered and failure rows, omits empty episodes", async () => {
    const ledger = newLedger(dir);
    const p = participant({ ledger });
    // c1 was delivered and left; c2 is held (its row is there only as the guard case);
    // c3's response is streaming; c4 failed; q's held call c5 also names a row under r.
    await ledger.record("r-a1", custodyRow("c1", "r-a1"));
    const c2 = capture(await p.gate.admit(r1), "c2");
    await ledger.record("r-a1", custodyRow("c2", "r-a1"));
    const c3 = capture(await p.gate.admit(r1), "c3");
    await p.gate.deliver(c3);
    await ledger.record("r-a1", custodyRow("c3", "r-a1"));
    await ledger.recordFailure("r-a1", "c4", "worker_capture_failed");
    capture(await p.gate.admit(q0), "c5");
    await ledger.record("r-a1", custodyRow("c5", "r-a1"));
    await ledger.record("q", custodyRow("q1", "q"));
    const untagged = capture(await p.gate.admit(null), "c-untagged");
    untagged.cutRecord = cutOf("c-untagged", "");
    await p.closeAdmission(prepareReq());
    p.gate.exit(c3);
    const records = await p.export([r1, episodeId("empty", 0), q0, r1]);
    // In capture-key order, each attempt once, whatever the scope's order and repeats.
    expect(records.map((rec) => rec.episode_id)).toEqual([q0, r1]);
    expect(records[1]?.rows.map((row) => row.model_call_id)).toEqual(["c1", "c3", "c4"]);
    expect(records[0]?.rows.map((row) => row.model_call_id)).toEqual(["q1"]);
    expect(records[0]?.generation_cuts).toEqual([]);
    expect(Object.isFrozen(records[0])).toBe(true);
    expect(c2.responseStarted).toBe(false);
  });

  it("a call that waited at closed admission leaves no trace in the export", async () => {
    const p = participant();
    await p.closeAdmission(prepareReq());
    const waiting = watch(p.gate.admit(r0));
    await flush();
    expect(await p.export([r0])).toEqual([]);
    expect(p.readiness().counts).toMatchObject({ inflight: 0, held: 0 });
    p.openAdmission();
    await until(() => waiting.settled);
  });

  it("exports the cut of the latest admitted undelivered call per key, by admission time", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const round = cutRound({
      old: cutOf("old", "r"),
      new: cutOf("new", "r"),
      late: cutOf("late", "q"),
      early: cutOf("early", "q"),
      done: cutOf("done", "s"),
    });
    const p = participant({ cuts: round.service });
    vi.setSystemTime(1_000_000);
    await onWorker(p, r0, "old");
    vi.setSystemTime(2_000_000);
    await onWorker(p, r0, "new");
    // q: the clock went back, so the call admitted second has the earlier admission time.
    vi.setSystemTime(5_000_000);
    await onWorker(p, q0, "late");
    vi.setSystemTime(4_000_000);
    await onWorker(p, q0, "early");
    const done = await onWorker(p, episodeId("s", 0), "done");
    await p.closeAdmission(prepareReq());
    // A delivered call's cut is never exported (it is held here only to test the rule).
    done.responseStarted = true;
    const records = await p.export([r0, q0, episodeId("s", 0)]);
    expect(records.map((rec) => [rec.episode_id.rollout_id, rec.generation_cuts])).toEqual([
      ["q", [cutOf("late", "q")]],
      ["r", [cutOf("new", "r")]],
    ]);
  });

  it("exports a restored cut nobody consumed, unless a live cut of the key replaces it", async () => {
    const round = cutRound({ live: cutOf("live", "q-a1") });
    const p = participant({ cuts: round.service });
    await p.install(
      [record(r0, [], [cutOf("restored-r", "r")]), record(q0, [], [cutOf("restored-q", "q")])],
      [r0, q0],
    );
    await onWorker(p, episodeId("q", 1), "live");
    await p.closeAdmission(prepareReq());
    const records = await p.export([r1, episodeId("q", 1)]);
    expect(records).toEqual([
      record(episodeId("q", 1), [], [cutOf("live", "q-a1")]),
      record(r1, [], [cutOf("restored-r", "r")]),
    ]);
  });
});

describe("PolicyParticipant commit reply", () => {
  it("lists the staged keys of rows and cuts, sorted and de-duplicated, overall and per episode", () => {
    const p = participant();
    const records = [
      record(
        r1,
        [
          custodyRow("c1", "r"),
          custodyRow("c2", "r-a1"),
          failureRow("f1"),
          custodyRow("c3", "r-a1", { staging_key: "" }),
          custodyRow("c4", "r-a1", { staging_key: null }),
        ],
        [cutOf("c5", "r-a1", ["__generation_cut__/c5", "r/c1"])],
      ),
      record(q0, [custodyRow("q1", "q"), custodyRow("c1", "r")]),
      record(episodeId("z", 0), [failureRow("f2")]),
    ];
    expect(p.commitReply(records)).toEqual({
      staging_keys: ["__generation_cut__/c5", "q/q1", "r-a1/c2", "r/c1"],
      staging_keys_by_episode: {
        "r-a1": ["__generation_cut__/c5", "r-a1/c2", "r/c1"],
        q: ["q/q1", "r/c1"],
        z: [],
      },
    });
    expect(p.commitReply([])).toEqual({ staging_keys: [], staging_keys_by_episode: {} });
  });

  it("sorts by code unit and drops repeats whether the keys arrive in order or not", () => {
    const p = participant();
    // In order already (the usual commit), then the same keys shuffled, repeated within one
    // episode (a row and a cut naming one key) and across episodes.
    const ordered = [
      record(q0, [custodyRow("a", "q"), custodyRow("b", "q")]),
      record(r0, [custodyRow("a", "r"), custodyRow("b", "r")]),
    ];
    const shuffled = [
      record(
        r0,
        [custodyRow("b", "r"), custodyRow("a", "r"), custodyRow("B", "r")],
        [cutOf("b", "r", ["r/b", "r/é"])],
      ),
      record(q0, [
        custodyRow("b", "q"),
        custodyRow("a", "q"),
        custodyRow("a2", "r", { staging_key: "r/a" }),
      ]),
    ];
    expect(p.commitReply(ordered)).toEqual({
      staging_keys: ["q/a", "q/b", "r/a", "r/b"],
      staging_keys_by_episode: { q: ["q/a", "q/b"], r: ["r/a", "r/b"] },
    });
    expect(p.commitReply(shuffled)).toEqual({
      staging_keys: ["q/a", "q/b", "r/B", "r/a", "r/b", "r/é"],
      staging_keys_by_episode: { r: ["r/B", "r/a", "r/b", "r/é"], q: ["q/a", "q/b", "r/a"] },
    });
  });

  it("lists every staging key once, sorted, whatever the records hold and their order", () => {
    const p = participant();
    const keyArb = fc.constantFrom("a", "b", "r/1", "r/2", "q/1", "__g/r/1", "__g/q/2", "é", "Z");
    const recordArb = fc.record({
      rollout: fc.constantFrom("r", "q", "s", "t"),
      attempt: fc.nat(2),
      rows: fc.array(keyArb, { maxLength: 3 }),
      cuts: fc.array(fc.uniqueArray(keyArb, { minLength: 1, maxLength: 3 }), { maxLength: 2 }),
    });
    fc.assert(
      fc.property(fc.array(recordArb, { maxLength: 6 }), (drawn) => {
        const records = drawn.map((d, i) =>
          record(
            episodeId(d.rollout, d.attempt),
            d.rows.map((key, j) => custodyRow(`c${i}-${j}`, d.rollout, { staging_key: key })),
            d.cuts.map((keys, j) => cutOf(`k${i}-${j}`, d.rollout, keys)),
          ),
        );
        const every = drawn.flatMap((d) => [...d.rows, ...d.cuts.flat()]);
        const reply = p.commitReply(records) as { staging_keys: string[] };
        expect(reply.staging_keys).toEqual([...new Set(every)].sort());
      }),
      { numRuns: 300 },
    );
  });
});

// ----------------------------------------------------------------------------------- install

describe("PolicyParticipant install", () => {
  it("refuses a checkpoint holding one episode twice; nothing is written", async () => {
    const p = participant();
    const before = await listDir(dir);
    const twice = [record(r0, [custodyRow("c1", "r")]), record(r0, [custodyRow("c2", "r")])];
    const refused = await p.install(twice, [r0]).catch((error: unknown) => error);
    expect((refused as GymError).code).toBe("invalid_checkpoint_state");
    expect((refused as Error).message).toContain("episode 'r' twice");
    expect(await listDir(dir)).toEqual(before);
    expect(p.restoredCuts.size).toBe(0);
  });

  it("is refused once the process served any call, even an untagged one that left; nothing is written", async () => {
    const p = participant();
    await plant(dir, "r-a1.lineage.jsonl", "dead execution\n");
    const u = await p.gate.admit(null);
    p.gate.exit(u);
    const before = await listDir(dir);
    expect(await code(p.install([record(r0, [custodyRow("c1", "r")])], [r0]))).toBe(
      "checkpoint_error",
    );
    expect(await listDir(dir)).toEqual(before);
    expect(p.restoredPending()).toEqual([]);
    expect(p.restoredCuts.size).toBe(0);
  });

  it("imports rows stamped with the source key, clears the target and later attempts but not look-alikes, retires the sources", async () => {
    const ledger = newLedger(dir);
    const p = participant({ ledger });
    // The live attempts the checkpoint continues.
    await ledger.record("r", custodyRow("live", "r"));
    await ledger.record("p-a1", custodyRow("live", "p-a1"));
    // What dead executions left for the targets (r-a1, p-a2) and later attempts.
    for (const name of [
      "r-a1.lineage.jsonl",
      "r-a1.lineage.retired",
      "r-a1.lineage.started",
      "r-a1.tokens.jsonl",
      "r-a2.lineage.jsonl",
      "r-a3.tokens.incomplete",
      "p-a2.lineage.retired",
      "p-a4.lineage.jsonl",
    ]) {
      await plant(dir, name, "{}\n");
    }
    // Look-alikes of other rollouts, and an earlier attempt of p that is not a target.
    const lookAlikes = [
      "r1-a2.lineage.jsonl",
      "r-a1x-a3.lineage.jsonl",
      "rx.lineage.jsonl",
      "pp-a2.lineage.retired",
    ];
    for (const name of lookAlikes) await plant(dir, name, "{}\n");

    const rRows = [custodyRow("c1", "r"), failureRow("f1"), custodyRow("c2", "r")];
    // p-a1 carries a row a previous restore stamped: it keeps its stamp.
    const pRows = [custodyRow("old", "p", { capture_key: "p" }), custodyRow("c3", "p-a1")];
    await p.install([record(r0, rRows), record(episodeId("p", 1), pRows)], [r0, episodeId("p", 1)]);

    expect(await ledger.rows("r-a1")).toEqual([
      { ...custodyRow("c1", "r"), capture_key: "r" },
      failureRow("f1"),
      { ...custodyRow("c2", "r"), capture_key: "r" },
    ]);
    expect(await ledger.rows("p-a2")).toEqual([
      custodyRow("old", "p", { capture_key: "p" }),
      { ...custodyRow("c3", "p-a1"), capture_key: "p-a1" },
    ]);
    await ledger.settleDeferred();
    const files = await listDir(dir);
    expect(files).toEqual(
      [
        ...lookAlikes,
        // targets: exactly the imported ledgers, unfenced and unmarked
        "r-a1.lineage.jsonl",
        "p-a2.lineage.jsonl",
        // sources: attempts 0..N retired
        "r.lineage.retired",
        "p.lineage.retired",
        "p-a1.lineage.retired",
      ].sort(),
    );
    for (const name of lookAlikes) expect(await readFileText(name)).toBe("{}\n");
    expect(await ledger.hasRows("r-a1")).toBe(true);
    await expect(ledger.hasRows("r")).rejects.toBeInstanceOf(RolloutRetiredError);
  });

  it("holds restored cuts and restored targets for every scope episode, and clears dead executions without a record", async () => {
    const ledger = newLedger(dir);
    const p = participant({ ledger });
    await plant(dir, "s-a3.lineage.jsonl", "{}\n"); // a dead execution of s's target
    await plant(dir, "s-a3.lineage.retired");
    const cut = cutOf("c9", "r");
    await p.install([record(r0, [custodyRow("c1", "r")], [cut])], [r0, episodeId("s", 2)]);
    expect(p.restoredPending()).toEqual([r1, episodeId("s", 3)]);
    expect(p.restoredCuts.keys()).toEqual(["r-a1"]);
    expect(p.restoredCuts.get("r-a1")).toEqual(cut);
    expect(p.statusExtra()).toEqual({ restored_generation_cuts: ["r-a1"] });
    expect((await has("s-a3.lineage.jsonl")) || (await has("s-a3.lineage.retired"))).toBe(false);
    for (const key of ["s", "s-a1", "s-a2", "r"]) {
      expect(await has(`${key}.lineage.retired`)).toBe(true);
    }
    expect(await has("s-a3.lineage.retired")).toBe(false);
    expect(p.gate.served).toBe(false);
  });

  it("refuses a record with two cuts before anything is written", async () => {
    const p = participant();
    await plant(dir, "r-a1.lineage.jsonl", "{}\n");
    await plant(dir, "r.lineage.jsonl", "{}\n");
    const before = await listDir(dir);
    const twoCuts = record(r0, [], [cutOf("a", "r"), cutOf("b", "r")]);
    const error = await p.install([record(q0, [custodyRow("q1", "q")]), twoCuts], [q0, r0]).then(
      () => null,
      (caught: unknown) => caught,
    );
    expect(error).toMatchObject({ code: "checkpoint_error" });
    expect(String((error as Error).message)).toContain("episode r has more than one");
    expect(await listDir(dir)).toEqual(before);
    expect(p.restoredPending()).toEqual([]);
    expect(p.restoredCuts.size).toBe(0);
  });

  it("refuses records without a capture ledger; a scope alone installs its targets", async () => {
    const p = participant({ ledger: null });
    expect(await code(p.install([record(r0, [custodyRow("c1", "r")])], [r0]))).toBe(
      "checkpoint_error",
    );
    expect(p.restoredPending()).toEqual([]);
    const fresh = participant({ ledger: null });
    await fresh.install([], [r0]);
    expect(fresh.restoredPending()).toEqual([r1]);
  });

  it("turns a ledger's refusal into checkpoint_error", async () => {
    const p = participant();
    const bad = record(r0, [{ model_call_id: "" } as LedgerRow]);
    expect(await code(p.install([bad], [r0]))).toBe("checkpoint_error");
    expect(p.restoredPending()).toEqual([]);
  });
});

async function readFileText(name: string): Promise<string> {
  return await readFile(path.join(dir, name), "utf8");
}

// ------------------------------------------------------ commit and restore through the plane

describe("PolicyParticipant through commit and restore", () => {
  it("refuses a checkpoint whose ledger row holds a NaN (a line not read as standard JSON is walked); nothing is installed", async () => {
    // What another writer could have stored: the store keeps NaN, the ledger takes standard JSON.
    await new RecordsWriter({
      checkpointDir: ckptDir,
      kind: "model",
      instance: "policy",
      checkpointId: "ck",
    }).write([record(r0, [{ ...custodyRow("c1", "r"), logprob: Number.NaN } as LedgerRow])]);
    const b = participant();
    const cpB = plane(b);

    const refused = await cpB.restore(restoreReq("rs", ckptDir, ["r"])).catch((e: unknown) => e);

    expect(refused).toBeInstanceOf(GymError);
    expect((refused as GymError).message).toContain("capture ledger refused the restore");
    expect(b.restoredPending()).toEqual([]);
    expect(await listDir(dir)).toEqual([]);
  });

  it("commits rows minus undelivered calls plus the latest cut, and a fresh server restores them", async () => {
    const round = cutRound({ c2: cutOf("c2", "r") });
    const a = participant({ cuts: round.service });
    const ledgerA = a.ledger as CaptureLedger;
    const cpA = plane(a);
    await ledgerA.record("r", custodyRow("c1", "r"));
    await onWorker(a, r0, "c2"); // held: its row exists only as the export's guard case
    await ledgerA.record("r", custodyRow("c2", "r"));
    await ledgerA.record("q", custodyRow("q1", "q"));
    expect((await cpA.prepare(prepareReq("ck"))).phase).toBe("prepared");
    const reply = await cpA.commit(commitReq("ck", ckptDir, ["r", "q", "x"]));
    expect(reply).toMatchObject({
      phase: "committed",
      episode_ids: ["q", "r"],
      staging_keys: ["__generation_cut__/c2", "q/q1", "r/c1"],
      staging_keys_by_episode: { r: ["__generation_cut__/c2", "r/c1"], q: ["q/q1"] },
    });

    // The process dies; a fresh one over the same capture directory restores the checkpoint.
    const b = participant();
    const cpB = plane(b);
    const restored = await cpB.restore(restoreReq("rs", ckptDir, ["r", "q", "x"]));
    expect(restored).toMatchObject({ phase: "restored", restored: ["q-a1", "r-a1"] });
    expect(await (b.ledger as CaptureLedger).rows("r-a1")).toEqual([
      { ...custodyRow("c1", "r"), capture_key: "r" },
    ]);
    expect(b.restoredCuts.get("r-a1")).toEqual(cutOf("c2", "r"));
    expect(b.restoredPending()).toEqual(eps("q-a1", "r-a1", "x-a1"));
    expect(cpB.status()).toMatchObject({ retired_rollouts: 3, restored_generation_cuts: ["r-a1"] });
    expect(await has("r.lineage.jsonl")).toBe(false);
    expect(await has("r.lineage.retired")).toBe(true);

    // The replacement makes a call, which marks it started and writes a row; then Gym dies.
    await cpB.resume(req("rs"));
    const call = await b.gate.admit(r1);
    expect(await has("r-a1.lineage.started")).toBe(true);
    await b.gate.deliver(call);
    await (b.ledger as CaptureLedger).record("r-a1", custodyRow("c3", "r-a1"));
    b.gate.exit(call);

    // Restoring the same checkpoint again yields exactly the checkpointed rows.
    const c = participant();
    await plane(c).restore(restoreReq("rs2", ckptDir, ["r", "q", "x"]));
    expect(await (c.ledger as CaptureLedger).rows("r-a1")).toEqual([
      { ...custodyRow("c1", "r"), capture_key: "r" },
    ]);
    expect(await has("r-a1.lineage.started")).toBe(false);
    expect(c.restoredPending()).toEqual(eps("q-a1", "r-a1", "x-a1"));
  });

  it("a restored cut nobody claimed is committed again for its continuing episode", async () => {
    const a = participant();
    await a.install([record(r0, [], [cutOf("c2", "r")])], [r0]);
    const cp = plane(a);
    await cp.prepare(prepareReq("ck"));
    const reply = await cp.commit(commitReq("ck", ckptDir, ["r-a1"]));
    expect(reply).toMatchObject({
      episode_ids: ["r-a1"],
      staging_keys: ["__generation_cut__/c2"],
      staging_keys_by_episode: { "r-a1": ["__generation_cut__/c2"] },
    });
    const b = participant({ ledgerDir: path.join(dir, "next") });
    await plane(b).restore(restoreReq("rs", ckptDir, ["r-a1"]));
    expect(b.restoredCuts.keys()).toEqual(["r-a2"]);
  });
});

// ------------------------------------------------------------------------ restored attempts

/** A ledger whose next `deleteUnstarted` calls fail. */
class FlakyDeleteLedger extends CaptureLedger {
  failures = 0;
  constructor(ledgerDir: string) {
    super(ledgerDir);
    ledgers.push(this);
  }
  override async deleteUnstarted(key: string): Promise<boolean> {
    if (this.failures > 0) {
      this.failures -= 1;
      throw new Error("EIO: delete failed");
    }
    return await super.deleteUnstarted(key);
  }
}

describe("PolicyParticipant restored attempts", () => {
  it("deletes an unstarted target's ledger without a fence and drops its cut", async () => {
    const ledger = newLedger(dir);
    const p = participant({ ledger });
    await p.install([record(r0, [custodyRow("c1", "r")], [cutOf("c2", "r")])], [r0, q0]);
    expect(await has("r-a1.lineage.jsonl")).toBe(true);
    await p.deleteRestored(r1);
    expect(await has("r-a1.lineage.jsonl")).toBe(false);
    expect(await has("r-a1.lineage.retired")).toBe(false);
    expect(await ledger.manifest("r-a1")).toMatchObject({ records: [] }); // unused, not retired
    expect(p.restoredCuts.size).toBe(0);
    expect(p.restoredPending()).toEqual([episodeId("q", 1)]);
    expect(p.retired.isRetired(r1)).toBe(false);
  });

  it("a target whose call was admitted is started: marker written before admit returns, never pending again", async () => {
    const ledger = newLedger(dir);
    const p = participant({ ledger });
    // Two policy servers sharing the run-wide ledger both restore r.
    const other = participant();
    await p.install([record(r0, [custodyRow("c1", "r")])], [r0]);
    await other.install([record(r0, [custodyRow("c1", "r")])], [r0]);
    expect(p.restoredPending()).toEqual([r1]);
    expect(await ledger.isStarted("r-a1")).toBe(false);
    const call = await p.gate.admit(r1); // admitted, not yet recorded
    expect(await ledger.isStarted("r-a1")).toBe(true);
    expect(p.restoredPending()).toEqual([]);
    // The other server never saw the call: its commit leaves r-a1 out of scope.
    expect(other.restoredPending()).toEqual([r1]);
    await other.deleteRestored(r1);
    expect(other.restoredPending()).toEqual([]);
    expect(await has("r-a1.lineage.jsonl")).toBe(true);
    expect(await has("r-a1.lineage.retired")).toBe(false);
    expect(await ledger.rows("r-a1")).toHaveLength(1);
    p.gate.exit(call);
  });

  it("a commit that leaves a started target out of scope keeps its ledger; an unstarted one is deleted unfenced", async () => {
    const p = participant();
    await p.install(
      [
        record(r0, [custodyRow("c1", "r")]),
        record(q0, [custodyRow("q1", "q")], [cutOf("q2", "q")]),
      ],
      [r0, q0],
    );
    const cp = plane(p);
    const call = await p.gate.admit(r1);
    await finish(p, call);
    await cp.prepare(prepareReq("ck"));
    const reply = await cp.commit(commitReq("ck", ckptDir, []));
    expect(reply).toMatchObject({ episode_ids: [] });
    expect(await has("r-a1.lineage.jsonl")).toBe(true);
    expect(await has("q-a1.lineage.jsonl")).toBe(false);
    expect(await has("q-a1.lineage.retired")).toBe(false);
    expect(p.restoredPending()).toEqual([]);
    expect(p.restoredCuts.size).toBe(0);
  });

  it("keeps the attempt pending, with its cut, when its delete fails; the retried commit deletes it", async () => {
    const ledger = new FlakyDeleteLedger(dir);
    const p = participant({ ledger });
    await p.install([record(r0, [custodyRow("c1", "r")], [cutOf("c2", "r")])], [r0]);
    ledger.failures = 1;
    await expect(p.deleteRestored(r1)).rejects.toThrow("EIO");
    expect(p.restoredPending()).toEqual([r1]);
    expect(p.restoredCuts.keys()).toEqual(["r-a1"]);
    expect(await has("r-a1.lineage.jsonl")).toBe(true);

    // The same through a commit: it fails, and its retry deletes the remaining rows.
    ledger.failures = 1;
    const cp = plane(p);
    await cp.prepare(prepareReq("ck"));
    await expect(cp.commit(commitReq("ck", ckptDir, []))).rejects.toThrow("EIO");
    expect(p.restoredPending()).toEqual([r1]);
    await cp.commit(commitReq("ck", ckptDir, []));
    expect(p.restoredPending()).toEqual([]);
    expect(p.restoredCuts.size).toBe(0);
    expect(await has("r-a1.lineage.jsonl")).toBe(false);
    expect(await has("r-a1.lineage.retired")).toBe(false);
  });
});

// ------------------------------------------------------------------------------------ retire

/** A ledger whose `retireLedgers` waits for `release` (and logs each batch). */
class SlowRetireLedger extends CaptureLedger {
  hold = false;
  readonly release = deferred<void>();
  readonly batches: string[][] = [];
  override async retireLedgers(episodes: Iterable<EpisodeId>): Promise<LedgerRemoval> {
    const list = [...episodes];
    this.batches.push(list.map((e) => `${e.rollout_id}:${e.attempt}`));
    if (this.hold) await this.release.promise;
    return await super.retireLedgers(list);
  }
}

describe("PolicyParticipant retire", () => {
  it("cancels admitted calls of attempts ≤ N once, waits for them, then retires ledgers 0..N but not N+1", async () => {
    const ledger = newLedger(dir);
    const p = participant({ ledger });
    await p.install(
      [record(r0, [custodyRow("c1", "r")], [cutOf("c2", "r")]), record(q0, [], [cutOf("q", "q")])],
      [r0, q0, episodeId("s", 0)],
    );
    await ledger.record("r-a2", custodyRow("later", "r-a2"));
    const t0 = await p.gate.admit(r0); // a late call of the crashed attempt (no mark here)
    const t2 = await p.gate.admit(r2);
    const untagged = await p.gate.admit(null);
    let aborts = 0;
    t0.signal.addEventListener("abort", () => (aborts += 1));
    const retiring = watch(p.retire(r1, signal()));
    await flush();
    expect(aborts).toBe(1);
    expect(t0.signal.reason).toMatchObject({ code: "stale_attempt" });
    expect(t2.signal.aborted || untagged.signal.aborted).toBe(false);
    expect(retiring.settled).toBe(false);
    // Nothing is retired while a covered call still runs (no late row could recreate a file).
    expect(await has("r-a1.lineage.jsonl")).toBe(true);
    expect(await has("r-a1.lineage.retired")).toBe(false);
    p.gate.exit(t0);
    await until(() => retiring.settled);
    expect(retiring.error).toBeNull();
    expect(aborts).toBe(1);
    expect(await has("r-a1.lineage.jsonl")).toBe(false);
    expect(await has("r-a1.lineage.retired")).toBe(true);
    expect(await has("r.lineage.retired")).toBe(true);
    expect(await has("r-a2.lineage.jsonl")).toBe(true);
    expect(await has("r-a2.lineage.retired")).toBe(false);
    expect(await ledger.rows("r-a2")).toHaveLength(1);
    // Restored state of r-a1 is gone, the other episodes' stays.
    expect(p.restoredCuts.keys()).toEqual(["q-a1"]);
    expect(p.restoredPending()).toEqual([episodeId("q", 1), episodeId("s", 1)]);
    p.gate.exit(t2);
    p.gate.exit(untagged);
  });

  it("a retried retire waits for a call an earlier retire cancelled, without cancelling it again", async () => {
    const p = participant();
    const cp = plane(p);
    const t = await p.gate.admit(r0);
    let aborts = 0;
    t.signal.addEventListener("abort", () => (aborts += 1));
    const retireReq = (seconds: number) => ({
      checkpoint_id: "any",
      deadline_ts: inSeconds(seconds),
      episode_ids: [r0],
    });
    expect(await code(cp.retire(retireReq(-1)))).toBe("deadline_exceeded");
    expect(aborts).toBe(1);
    expect(p.gate.tickets.has(t)).toBe(true); // its cleanup still runs
    const first: unknown = t.signal.reason;
    const retried = watch(cp.retire(retireReq(30)));
    await flush();
    expect(retried.settled).toBe(false);
    expect(aborts).toBe(1);
    expect(t.signal.reason).toBe(first);
    expect(await has("r.lineage.retired")).toBe(false);
    p.gate.exit(t);
    await until(() => retried.settled);
    expect(retried.error).toBeNull();
    expect(aborts).toBe(1);
    expect(await has("r.lineage.retired")).toBe(true);
  });

  it("refuses a waiting call at once when its attempt is marked retired, and still after forget and reopen", async () => {
    const p = participant();
    await p.closeAdmission(prepareReq());
    const waiting = watch(p.gate.admit(r1));
    const later = watch(p.gate.admit(r2));
    await flush();
    p.markRetired([r1]);
    p.forget(["r"]);
    p.openAdmission();
    await until(() => waiting.settled && later.settled);
    expect(waiting.error).toMatchObject({ code: "stale_attempt" });
    expect(later.error).toBeNull();
    expect(p.readiness().counts).toMatchObject({ inflight: 1 });
  });

  it("a retire cut short by its deadline still refuses the waiting call; after forget and resume nothing is served", async () => {
    const ledger = new SlowRetireLedger(dir);
    const p = participant({ ledger });
    const cp = plane(p);
    // A checkpoint holding no model record, restored for 16 other rollouts and r.
    const others = Array.from({ length: 16 }, (_, i) => `o${i}`);
    const source = participant({ ledgerDir: path.join(dir, "source") });
    const cpSource = plane(source);
    await cpSource.prepare(prepareReq("src"));
    await cpSource.commit(commitReq("src", ckptDir, []));
    await cp.restore(restoreReq("rs", ckptDir, [...others, "r"]));
    expect(p.gate.accepting).toBe(false); // restored: admission stays closed until resume

    const waiting = watch(p.gate.admit(r1));
    await flush();
    expect(p.gate.waitingCount).toBe(1);
    // Every rollout's retire hangs in its ledger retire; r's turn never comes before the deadline.
    ledger.hold = true;
    cleanups.push(() => ledger.release.resolve());
    const retire = {
      checkpoint_id: "rs",
      deadline_ts: inSeconds(-1),
      episode_ids: [...others.map((o) => episodeId(o, 1)), r1],
    };
    expect(await code(cp.retire(retire))).toBe("deadline_exceeded");
    await until(() => waiting.settled);
    expect(waiting.error).toMatchObject({ code: "stale_attempt" });
    expect(ledger.batches.some((batch) => batch.includes("r:1"))).toBe(false);
    await cp.forget({ checkpoint_id: "rs", deadline_ts: inSeconds(30), rollout_ids: ["r"] });
    await cp.resume(req("rs"));
    await flush();
    expect(p.gate.accepting).toBe(true);
    expect(p.gate.served).toBe(false);
    expect(p.gate.tickets.size).toBe(0);
    expect(p.gate.waitingCount).toBe(0);
    // Let the retires that were cut short finish their ledger work.
    ledger.release.resolve();
    const allFenced = async (): Promise<boolean> => {
      for (const o of others) if (!(await has(`${o}-a1.lineage.retired`))) return false;
      return true;
    };
    const giveUp = Date.now() + 5000;
    while (!(await allFenced()) && Date.now() < giveUp) await flush(1);
    expect(await allFenced()).toBe(true);
  });
});

// ------------------------------------------------------------------------------ restored cuts

describe("PolicyParticipant restored cuts", () => {
  async function restoredWithCut(options: Partial<PolicyParticipantOptions> = {}) {
    const p = participant(options);
    await p.install([record(r0, [custodyRow("c1", "r")], [cutOf("c2", "r")])], [r0]);
    return p;
  }

  it("are claimed only by a call of the target key with the same request digest", async () => {
    const p = await restoredWithCut();
    const digest = conversationDigest(itemsOf("c2"));
    expect(p.restoredCuts.take("r-a1", conversationDigest(itemsOf("other")), "c2")).toBeNull();
    expect(p.restoredCuts.take("r", digest, "c2")).toBeNull();
    expect(p.restoredCuts.take("r-a2", digest, "c2")).toBeNull();
    const claim = p.restoredCuts.take("r-a1", digest, "c2");
    expect(claim).toEqual({ key: "r-a1", record: cutOf("c2", "r"), modelCallId: "c2" });
  });

  it("are consumed only when the claiming call's response started; an undelivered call leaves it for its retry", async () => {
    const p = await restoredWithCut();
    const digest = conversationDigest(itemsOf("c2"));
    const first = p.restoredCuts.take("r-a1", digest, "c2");
    expect(first).not.toBeNull();
    p.restoredCuts.settle(first!, false); // left before its response started
    expect(p.restoredCuts.keys()).toEqual(["r-a1"]);
    const retry = p.restoredCuts.take("r-a1", digest, "c2-retry");
    expect(retry?.record).toEqual(cutOf("c2", "r"));
    p.restoredCuts.settle(retry!, true);
    expect(p.restoredCuts.size).toBe(0);
    expect(p.restoredCuts.take("r-a1", digest, "c2")).toBeNull();
    expect(p.statusExtra()).toEqual({ restored_generation_cuts: [] });
  });

  it("a claimed cut whose call is still undelivered at the next checkpoint is exported again if its own cut fails", async () => {
    const round = cutRound({}); // every cut fails
    const p = await restoredWithCut({ cuts: round.service });
    const claim = p.restoredCuts.take("r-a1", conversationDigest(itemsOf("c2")), "c2");
    const call = await onWorker(p, r1, "c2");
    await p.closeAdmission(prepareReq());
    expect(round.rounds).toEqual([["c2"]]);
    const records = await p.export([r1]);
    expect(records[0]?.generation_cuts).toEqual([cutOf("c2", "r")]);
    p.openAdmission();
    p.gate.exit(call);
    p.restoredCuts.settle(claim!, false);
    expect(p.restoredCuts.keys()).toEqual(["r-a1"]);
  });

  it("after a cut round the newest cut replaces the restored cut; an undelivered call leaves the newer cut to its retry", async () => {
    const newer = cutOf("c2", "r-a1", ["__generation_cut__/r-a1/c2"]);
    const round = cutRound({ c2: newer, other: cutOf("other", "q") });
    const p = await restoredWithCut({ cuts: round.service });
    const digest = conversationDigest(itemsOf("c2"));
    const claim = p.restoredCuts.take("r-a1", digest, "c2");
    const call = await onWorker(p, r1, "c2");
    await onWorker(p, q0, "other"); // a key without a restored cut gets none
    await p.closeAdmission(prepareReq());
    expect(p.restoredCuts.get("r-a1")).toEqual(newer);
    expect(p.restoredCuts.keys()).toEqual(["r-a1"]);
    const records = await p.export([r1]);
    expect(records[0]?.generation_cuts).toEqual([newer]);
    expect(p.commitReply(records)).toMatchObject({
      staging_keys: ["__generation_cut__/r-a1/c2", "r/c1"],
    });
    p.openAdmission();
    // The call ends before its response starts: its retry continues the newer cut.
    p.gate.exit(call);
    p.restoredCuts.settle(claim!, call.responseStarted);
    expect(p.restoredCuts.take("r-a1", digest, "c2")?.record).toEqual(newer);
  });

  it("after a cut round replaced the restored cut, the claiming call's delivered response frees the newer cut", async () => {
    const newer = cutOf("c2", "r-a1", ["__generation_cut__/r-a1/c2"]);
    const round = cutRound({ c2: newer });
    const p = await restoredWithCut({ cuts: round.service });
    const claim = p.restoredCuts.take("r-a1", conversationDigest(itemsOf("c2")), "c2");
    const call = await onWorker(p, r1, "c2");
    const cp = plane(p);
    await cp.prepare(prepareReq("ck"));
    await cp.commit(commitReq("ck", ckptDir, ["r-a1"]));
    await cp.resume(req("ck"));
    // The held response is delivered after resume, and the call leaves.
    await finish(p, call);
    p.restoredCuts.settle(claim!, call.responseStarted);
    expect(p.restoredCuts.keys()).toEqual([]);
    // So the next checkpoint no longer exports a cut of a call the client received.
    await cp.prepare(prepareReq("ck2"));
    const reply = await cp.commit(commitReq("ck2", path.join(ckptDir, "2"), ["r-a1"]));
    expect(reply).toMatchObject({ staging_keys: ["r/c1"] });
  });

  it("retire drops the restored cuts it covers and delete_restored drops its key's", async () => {
    const p = participant();
    await p.install(
      [record(r0, [], [cutOf("c2", "r")]), record(q0, [], [cutOf("q2", "q")])],
      [r0, q0],
    );
    await p.retire(r0, signal()); // does not cover r-a1
    expect(p.restoredCuts.keys()).toEqual(["q-a1", "r-a1"]);
    await p.retire(r1, signal());
    expect(p.restoredCuts.keys()).toEqual(["q-a1"]);
    await p.deleteRestored(episodeId("q", 1));
    expect(p.restoredCuts.keys()).toEqual([]);
  });
});
