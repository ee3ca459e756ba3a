/**
 * A model server with several workers, in one process: real worker links and a real
 * coordinator over Unix sockets, each worker with its own gate and ledger instance on the one
 * shared ledger directory, driven through the coordinator's control plane as a controller
 * would. One cut round covers every worker's calls; a commit exports the shared ledger once
 * without any worker's undelivered calls; a restore imports once, holds the restored cuts at the
 * coordinator for whichever worker's call claims them, and writes a restored ledger before any
 * worker reads it; a retire stops every worker's calls before fencing the ledger.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { CaptureLedger } from "#sdk/capture/ledger/capture-ledger.js";
import { conversationDigest } from "#sdk/capture/fingerprints.js";
import { WorkerLink } from "#sdk/workers/worker-link.js";
import { WorkerPool } from "#sdk/workers/worker-pool.js";
import { coordinate } from "#sdk/workers/coordinate.js";
import { GymError } from "#sdk/errors.js";
import { episodeId } from "#sdk/identity/episode-id.js";
import type { CutService } from "#sdk/participants/model/cut-service.js";
import { PolicyParticipant } from "#sdk/participants/model/policy-participant.js";
import type { CutRecord } from "#sdk/participants/model/restored-cuts.js";
import { custodyRow } from "../capture-ledger/helpers.js";
import { cutOf, cutRound, itemsOf, onWorker } from "../../support/policy-calls.js";
import {
  commitReq,
  inSeconds,
  makeTempDir,
  removeTempDir,
  req,
  restoreReq,
} from "../../support/test-participant.js";

const r0 = episodeId("r", 0);
const q0 = episodeId("q", 0);

/** A worker's cut service before its participant replaces it with the coordinator's round. */
const UNUSED_CUTS: CutService = {
  cut: () => Promise.reject(new Error("a worker's calls are cut by its coordinator")),
};

let ledgerDir: string;
let ckptDir: string;
const cleanups: (() => void | Promise<void>)[] = [];

beforeEach(async () => {
  ledgerDir = await makeTempDir();
  ckptDir = await makeTempDir();
});

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  await removeTempDir(ledgerDir);
  await removeTempDir(ckptDir);
});

interface PolicyWorker {
  readonly participant: PolicyParticipant;
  readonly ledger: CaptureLedger;
}

/** A model server of `count` workers on the shared ledger directory, cut by `cuts`. */
async function modelServer(count: number, cuts: CutService) {
  const socketDir = mkdtempSync(path.join(tmpdir(), "ng-pw-"));
  const socket = path.join(socketDir, "c.sock");
  const pool = new WorkerPool(count);
  const coordinatorLedger = new CaptureLedger(ledgerDir);
  const prototype = new PolicyParticipant({ ledger: coordinatorLedger, cuts });
  const { participant: coordinated, controlPlane: plane } = coordinate(pool, prototype, {
    instance: "policy",
    leaseGraceSeconds: 100,
  });
  const server: Server = createServer((s) => pool.accept(s));
  await new Promise<void>((resolve) => server.listen(socket, resolve));
  const workers: PolicyWorker[] = [];
  const links: WorkerLink[] = [];
  for (let index = 0; index < count; index++) {
    const link = await WorkerLink.connect({ coordinator: socket, index, count, socketDir });
    const participant = new PolicyParticipant({
      ledger: null,
      cuts: UNUSED_CUTS,
      worker: link.policyWorker(),
    });
    // As the policy server makes a worker's ledger: the coordinator owns the fence lists.
    const ledger = new CaptureLedger(ledgerDir, {
      beforeUse: participant.ledgerHook!.beforeUse,
      recoverFenceLists: false,
    });
    participant.attachLedger(ledger);
    await link.register(participant);
    await link.listening();
    workers.push({ participant, ledger });
    links.push(link);
  }
  cleanups.push(async () => {
    plane.close();
    for (const link of links) link.close();
    pool.shutdown();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await coordinatorLedger.settleInBackground();
    rmSync(socketDir, { recursive: true, force: true });
  });
  return { plane, coordinated, workers, ledger: coordinatorLedger };
}

describe("a model server with two workers", () => {
  it("cuts the undelivered calls of every worker in one round", async () => {
    const round = cutRound({ "c-a": cutOf("c-a", "r"), "c-b": cutOf("c-b", "q") });
    const { plane, workers } = await modelServer(2, round.service);
    await onWorker(workers[0]!.participant, r0, "c-a");
    await onWorker(workers[1]!.participant, q0, "c-b");
    const prepared = await plane.prepare({ checkpoint_id: "c1", deadline_ts: inSeconds(30) });
    expect(prepared.phase).toBe("prepared");
    expect(round.rounds).toEqual([["c-a", "c-b"]]);
    expect(prepared.report.counts).toMatchObject({ inflight: 2, held: 2, cut: 2, workers: 2 });
  });

  it("commits the shared ledger once: rows of both writers, no worker's undelivered call, its newest cut", async () => {
    const round = cutRound({ c2: cutOf("c2", "r") });
    const { plane, workers } = await modelServer(2, round.service);
    // Calls of one rollout land on either worker: both append to its ledger.
    await workers[0]!.ledger.record("r", custodyRow("c1", "r"));
    await workers[1]!.ledger.record("r", custodyRow("c3", "r", { parent_call_id: "c1" }));
    const held = await onWorker(workers[1]!.participant, r0, "c2");
    await workers[1]!.ledger.record("r", custodyRow("c2", "r")); // its response never started
    await plane.prepare({ checkpoint_id: "c1", deadline_ts: inSeconds(30) });
    const reply = await plane.commit(commitReq("c1", ckptDir, ["r"]));
    expect(reply.episode_ids).toEqual(["r"]);
    expect(reply).toMatchObject({
      staging_keys: ["__generation_cut__/c2", "r/c1", "r/c3"],
    });
    await plane.resume(req("c1"));
    workers[1]!.participant.gate.exit(held);
  });

  it("restores once into fresh workers: the restored ledger is written before a worker reads it, and the cut goes to one claiming call", async () => {
    const round = cutRound({ c2: cutOf("c2", "r") });
    const before = await modelServer(1, round.service);
    await before.workers[0]!.ledger.record("r", custodyRow("c1", "r"));
    await onWorker(before.workers[0]!.participant, r0, "c2");
    await before.plane.prepare({ checkpoint_id: "c1", deadline_ts: inSeconds(30) });
    await before.plane.commit(commitReq("c1", ckptDir, ["r"]));

    const after = await modelServer(2, cutRound({}).service);
    await after.plane.restore(restoreReq("c1", ckptDir, ["r"]));
    // The coordinator deferred the target's ledger file; the worker's first read has it written.
    expect(after.ledger.deferredKeyCount).toBeGreaterThan(0);
    expect((await after.workers[1]!.ledger.rows("r-a1")).map((row) => row.model_call_id)).toEqual([
      "c1",
    ]);
    expect((await after.plane.status()).restored_generation_cuts).toEqual(["r-a1"]);
    expect(await after.coordinated.restoredPending()).toEqual([episodeId("r", 1)]);
    await after.plane.resume(req("c1"));

    const digest = conversationDigest(itemsOf("c2"));
    const [w0, w1] = after.workers.map((w) => w.participant) as [
      PolicyParticipant,
      PolicyParticipant,
    ];
    expect(await w1.claimCut("r-a1", conversationDigest(itemsOf("other")), "x")).toBeNull();
    const claim = await w1.claimCut("r-a1", digest, "c2-retry");
    expect(claim?.record).toEqual(cutOf("c2", "r"));
    expect(await w0.claimCut("r-a1", digest, "c2-other")).toBeNull();
    // The claiming call leaves before its response started: the cut is claimable again.
    w1.settleCut(claim!, false);
    const again = await until(async () => await w0.claimCut("r-a1", digest, "c2-again"));
    expect((again as { record: CutRecord }).record).toEqual(cutOf("c2", "r"));
    w0.settleCut(again!, true);
    expect((await after.plane.status()).restored_generation_cuts).toEqual([]);
    // Started on one worker: no longer pending for the server.
    await w0.gate.admit(episodeId("r", 1));
    expect(await after.coordinated.restoredPending()).toEqual([]);
  });

  it("a worker finds a restored source attempt fenced before the coordinator settles it", async () => {
    const before = await modelServer(1, cutRound({}).service);
    await before.workers[0]!.ledger.record("r", custodyRow("c1", "r"));
    await before.plane.prepare({ checkpoint_id: "c1", deadline_ts: inSeconds(30) });
    await before.plane.commit(commitReq("c1", ckptDir, ["r"]));

    const after = await modelServer(2, cutRound({}).service);
    await after.plane.restore(restoreReq("c1", ckptDir, ["r"]));
    expect(after.ledger.deferredKeys()).toContain("r");

    // The source's ledger file is still there (its deletion is deferred): without its fence the
    // late row would be appended to it.
    expect(await after.workers[1]!.ledger.record("r", custodyRow("late", "r"))).toBe("discarded");
    expect(after.ledger.deferredKeys()).not.toContain("r");
  });

  it("refuses a restore once any worker has served a call", async () => {
    const round = cutRound({});
    const before = await modelServer(1, round.service);
    await before.workers[0]!.ledger.record("r", custodyRow("c1", "r"));
    await before.plane.prepare({ checkpoint_id: "c1", deadline_ts: inSeconds(30) });
    await before.plane.commit(commitReq("c1", ckptDir, ["r"]));

    const after = await modelServer(2, round.service);
    const served = await after.workers[1]!.participant.gate.admit(q0);
    after.workers[1]!.participant.gate.exit(served);
    const refused = await after.plane
      .restore(restoreReq("c1", ckptDir, ["r"]))
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(GymError);
    expect((refused as GymError).code).toBe("checkpoint_error");
    expect((refused as GymError).message).toMatch(/served calls/);
  });

  it("retires by stopping every worker's calls, then fencing the shared ledger", async () => {
    const { plane, workers } = await modelServer(2, cutRound({}).service);
    await workers[0]!.ledger.record("r", custodyRow("c1", "r"));
    const calls = await Promise.all(
      workers.map(async ({ participant }, i) => {
        const t = await onWorker(participant, r0, `c${i + 2}`);
        // The call stops when its retire cancels it, as a model server's handler does.
        t.signal.addEventListener("abort", () => participant.gate.exit(t));
        return t;
      }),
    );
    const stopped = calls.map((t) => t.signal);
    await plane.retire({
      checkpoint_id: "c1",
      deadline_ts: inSeconds(30),
      episode_ids: [r0],
    });
    expect(stopped.every((signal) => signal.aborted)).toBe(true);
    // Fenced on disk: a late row from either worker is discarded.
    expect(await workers[1]!.ledger.record("r", custodyRow("c4", "r"))).toBe("discarded");
    expect(await workers[0]!.ledger.rows("r")).toEqual([]);
  });
});

/** Polls `probe` until it returns something other than null (bounded). */
async function until<T>(probe: () => Promise<T | null>): Promise<T> {
  for (let i = 0; i < 200; i++) {
    const value = await probe();
    if (value !== null) return value;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new Error("condition not met within 1 s");
}
