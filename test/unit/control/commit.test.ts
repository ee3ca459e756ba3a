/**
 * Commit (see docs/control-plane.md): the export, the write, the cleanup of unscoped restored
 * state, `stop`, and the one-export-per-checkpoint rules. Real temporary directories.
 */
import { readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ControlPlane } from "#sdk/control/control-plane.js";
import { STOP_CONCURRENCY } from "#sdk/control/rollout-stops.js";
import { episodeId, type EpisodeId } from "#sdk/identity/episode-id.js";
import { captureKeySet } from "#sdk/identity/scope-keys.js";
import { decodeJson } from "#sdk/json/json-decode.js";
import {
  InjectedError,
  TestParticipant,
  commitReq,
  exists,
  expectCode,
  flush,
  harness,
  listDir,
  makeTempDir,
  participantPath,
  prepareReady,
  removeTempDir,
  req,
  type Harness,
  type TestRecord,
} from "../../support/test-participant.js";

let h: Harness;
let dir: string;

beforeEach(async () => {
  h = harness({ leaseGraceSeconds: 100 });
  dir = await makeTempDir();
});

afterEach(async () => {
  h.cp.close();
  await removeTempDir(dir);
});

function parked(entries: Record<string, unknown>): void {
  for (const [key, payload] of Object.entries(entries)) {
    h.participant.start(key);
    h.participant.park(key, payload as never);
  }
}

async function storedRecords(checkpointDir = dir): Promise<unknown[]> {
  const pdir = participantPath(checkpointDir);
  const manifest = JSON.parse(await readFile(path.join(pdir, "manifest.json"), "utf8")) as {
    records_file: string;
  };
  const text = await readFile(path.join(pdir, manifest.records_file), "utf8");
  return text
    .split("\n")
    .filter((line) => line.length > 0)
    .map((line) => decodeJson(line));
}

describe("a successful commit", () => {
  it("writes the records then the manifest and replies with the exported keys and extras", async () => {
    parked({ b: { step: 2 }, a: [1, "x"] });
    h.participant.start("r", { restart: true });
    h.participant.commitExtras = { staging_keys: ["k"] };
    await prepareReady(h.cp, "k1");
    const request = commitReq("k1", dir, null);
    const reply = await h.cp.commit(request);
    const pdir = participantPath(dir);
    const onDisk = JSON.parse(await readFile(path.join(pdir, "manifest.json"), "utf8")) as unknown;
    expect(reply).toEqual({
      staging_keys: ["k"],
      phase: "committed",
      manifest: onDisk,
      episode_ids: ["a", "b"],
    });
    expect(reply.manifest).toMatchObject({
      schema_version: 1,
      kind: "resources",
      instance: "inst",
      checkpoint_id: "k1",
      record_count: 2,
    });
    expect(await listDir(pdir)).toEqual(["manifest.json", reply.manifest.records_file].sort());
    expect(await storedRecords()).toEqual([
      { episode_id: { rollout_id: "a", attempt: 0 }, payload: [1, "x"] },
      { episode_id: { rollout_id: "b", attempt: 0 }, payload: { step: 2 } },
    ]);
    expect(h.cp.phase).toBe("committed");
    expect(h.cp.leaseExpiresAt).toBe(request.deadline_ts + 100);
    expect(h.participant.detailsOf("export")).toEqual(["null"]);
    expect(h.participant.callsOf("parkExported")).toHaveLength(0);
  });

  it("lists in episode_ids what was exported, not the request scope", async () => {
    parked({ a: 1, b: 2 });
    await prepareReady(h.cp, "k1");
    const reply = await h.cp.commit(commitReq("k1", dir, ["zz", "a"]));
    expect(reply.episode_ids).toEqual(["a"]);
    expect(h.participant.detailsOf("export")).toEqual([JSON.stringify(["zz", "a"])]);
  });

  it("renews the lease after fencing and never shrinks it", async () => {
    parked({ a: 1 });
    const prepare = req("k1", 500);
    await h.cp.prepare(prepare);
    await h.cp.commit(commitReq("k1", dir, null, { seconds: 30 }));
    expect(h.cp.leaseExpiresAt).toBe(prepare.deadline_ts + 100);
  });

  it("commits the new state under a new checkpoint after a resume", async () => {
    parked({ a: "old" });
    await prepareReady(h.cp, "k1");
    await h.cp.commit(commitReq("k1", dir, null));
    await h.cp.resume(req("k1"));
    h.participant.unpark("a");
    h.participant.park("a", "new");
    await prepareReady(h.cp, "k2");
    const dir2 = path.join(dir, "second");
    await h.cp.commit(commitReq("k2", dir2, null));
    expect(await storedRecords(dir2)).toEqual([
      { episode_id: { rollout_id: "a", attempt: 0 }, payload: "new" },
    ]);
    expect(h.participant.callsOf("export")).toHaveLength(2);
  });
});

describe("export_failed", () => {
  it("refuses for good a checkpoint whose readiness regressed after prepare, writing nothing", async () => {
    parked({ a: 1 });
    h.participant.start("rr", { restart: true });
    await prepareReady(h.cp, "k1");
    h.participant.unpark("a");
    const error = await expectCode(h.cp.commit(commitReq("k1", dir, null)), "export_failed");
    expect(error.message).toContain("no longer ready");
    h.participant.park("a", 2);
    await expectCode(h.cp.commit(commitReq("k1", dir, null)), "export_failed");
    await expectCode(h.cp.commit(commitReq("k1", dir, ["a"])), "export_failed");
    // Final before the other checks: even a scope naming a restart gets export_failed.
    await expectCode(h.cp.commit(commitReq("k1", dir, ["a", "rr"])), "export_failed");
    expect(h.participant.callsOf("export")).toHaveLength(0);
    expect(await exists(path.join(dir, "gym"))).toBe(false);
    expect(h.cp.phase).toBe("prepared");
  });

  it("ends the checkpoint when its export fails: every later commit is export_failed", async () => {
    parked({ a: 1 });
    await prepareReady(h.cp, "k1");
    h.participant.fail("export");
    await expectCode(h.cp.commit(commitReq("k1", dir, null)), "export_failed");
    await expectCode(h.cp.commit(commitReq("k1", dir, null)), "export_failed");
    expect(h.participant.callsOf("export")).toHaveLength(1);
    expect(await exists(path.join(participantPath(dir), "manifest.json"))).toBe(false);
  });

  it("ends the checkpoint, with a typed refusal, when the participant's manifest extras throw", async () => {
    parked({ a: 1 });
    await prepareReady(h.cp, "k1");
    h.participant.manifestExtra = () => {
      throw new InjectedError("extras broke");
    };
    const error = await expectCode(h.cp.commit(commitReq("k1", dir, null)), "export_failed");
    expect(error.message).toContain("extras broke");
    await expectCode(h.cp.commit(commitReq("k1", dir, null)), "export_failed");
    expect(h.participant.callsOf("export")).toHaveLength(0);
  });

  it("ends the checkpoint when its export fails after the commit's deadline passed", async () => {
    parked({ a: 1 });
    await prepareReady(h.cp, "k1");
    const gate = h.participant.hold("export");
    await expectCode(h.cp.commit(commitReq("k1", dir, null, { seconds: -1 })), "deadline_exceeded");
    gate.fail(new InjectedError("export broke"));
    await flush();
    await expectCode(h.cp.commit(commitReq("k1", dir, null)), "export_failed");
    expect(h.participant.callsOf("export")).toHaveLength(1);
  });
});

describe("one export per checkpoint", () => {
  it("shares one export between concurrent commits, whatever the order of their scopes", async () => {
    parked({ a: 1, b: 2 });
    await prepareReady(h.cp, "k1");
    const gate = h.participant.hold("export");
    const first = h.cp.commit(commitReq("k1", dir, ["a", "b"]));
    const second = h.cp.commit(commitReq("k1", dir, ["b", "a"]));
    await gate.entered();
    await flush();
    gate.release();
    const [one, two] = await Promise.all([first, second]);
    expect(two).toEqual(one);
    expect(h.participant.callsOf("export")).toHaveLength(1);
  });

  it("fails with deadline_exceeded when the deadline passes during the export, and the retry joins it", async () => {
    parked({ a: 1 });
    await prepareReady(h.cp, "k1");
    const gate = h.participant.hold("export");
    await expectCode(h.cp.commit(commitReq("k1", dir, null, { seconds: -1 })), "deadline_exceeded");
    const retry = h.cp.commit(commitReq("k1", dir, null));
    await flush();
    gate.release();
    expect((await retry).episode_ids).toEqual(["a"]);
    expect(h.participant.callsOf("export")).toHaveLength(1);
  });

  it("does not repeat the readiness check once the export has started", async () => {
    parked({ a: 1 });
    await prepareReady(h.cp, "k1");
    const gate = h.participant.hold("export");
    await expectCode(h.cp.commit(commitReq("k1", dir, null, { seconds: -1 })), "deadline_exceeded");
    h.participant.unpark("a");
    const retry = h.cp.commit(commitReq("k1", dir, null));
    gate.release();
    expect((await retry).phase).toBe("committed");
  });

  it("writes the same records again after a failed write, without re-exporting; later changes are not written", async () => {
    parked({ a: "cut" });
    await prepareReady(h.cp, "k1");
    const target = path.join(dir, "ck");
    await writeFile(target, "a regular file cannot hold state");
    await expectCode(h.cp.commit(commitReq("k1", target, null)), "invalid_checkpoint_state");
    h.participant.setPayload("a", "changed after the export");
    await removeTempDir(target);
    const reply = await h.cp.commit(commitReq("k1", target, null));
    expect(reply.episode_ids).toEqual(["a"]);
    expect(await storedRecords(target)).toEqual([
      { episode_id: { rollout_id: "a", attempt: 0 }, payload: "cut" },
    ]);
    expect(h.participant.callsOf("export")).toHaveLength(1);
    expect(await listDir(participantPath(target))).toHaveLength(2); // no temporary files
  });

  it("refuses a commit naming another directory or scope while the write exists", async () => {
    parked({ a: 1 });
    await prepareReady(h.cp, "k1");
    const gate = h.participant.hold("export");
    await expectCode(
      h.cp.commit(commitReq("k1", dir, ["a"], { seconds: -1 })),
      "deadline_exceeded",
    );
    await expectCode(h.cp.commit(commitReq("k1", `${dir}/x`, ["a"])), "checkpoint_conflict");
    await expectCode(h.cp.commit(commitReq("k1", dir, null)), "checkpoint_conflict");
    await expectCode(h.cp.commit(commitReq("k1", dir, [])), "checkpoint_conflict");
    gate.release();
    expect((await h.cp.commit(commitReq("k1", dir, ["a"]))).phase).toBe("committed");
  });
});

describe("a directory that holds another checkpoint's commit", () => {
  it("is refused before anything is exported, so the same ID can commit to a fresh directory", async () => {
    parked({ a: 1 });
    await prepareReady(h.cp, "old");
    await h.cp.commit(commitReq("old", dir, ["a"]));
    await h.cp.resume(req("old"));

    await prepareReady(h.cp, "k1");
    const refused = await expectCode(
      h.cp.commit(commitReq("k1", dir, ["a"])),
      "invalid_checkpoint_state",
    );
    expect(refused.status).toBe(422);
    expect(refused.message).toMatch(
      /already holds a different commit \(manifest of checkpoint "old"\)/,
    );
    expect(h.participant.callsOf("export")).toHaveLength(1); // the old commit's only

    const fresh = path.join(dir, "fresh");
    const reply = await h.cp.commit(commitReq("k1", fresh, ["a"]));
    expect(reply.phase).toBe("committed");
    expect(reply.manifest.checkpoint_id).toBe("k1");
    expect(await storedRecords(fresh)).toHaveLength(1);
  });
});

describe("restart_in_scope", () => {
  it("refuses a scope naming a reported restart, listing the sorted keys, and exports nothing", async () => {
    parked({ a: 1 });
    h.participant.start("r2", { restart: true });
    h.participant.start("r1", { restart: true });
    await prepareReady(h.cp, "k1");
    const error = await expectCode(
      h.cp.commit(commitReq("k1", dir, ["r2", "a", "r1"])),
      "restart_in_scope",
    );
    expect(error.message).toContain("r1, r2");
    expect(h.participant.callsOf("export")).toHaveLength(0);
    const reply = await h.cp.commit(commitReq("k1", dir, ["a"]));
    expect(reply.episode_ids).toEqual(["a"]);
  });
});

describe("cleanup of unscoped restored state", () => {
  it("frees restored episodes the scope leaves out with deleteRestored, once per rollout at the latest attempt, without marking them", async () => {
    parked({ a: 1 });
    h.participant.addPending("p-a1", "p");
    h.participant.addPending("q-a1", "q1");
    h.participant.addPending("q-a2", "q2");
    h.participant.addPending("s-a1", "s");
    await prepareReady(h.cp, "k1");
    const reply = await h.cp.commit(commitReq("k1", dir, ["a", "s-a1"]));
    expect(reply.episode_ids).toEqual(["a", "s-a1"]);
    expect(h.participant.detailsOf("deleteRestored").sort()).toEqual(["p-a1", "q-a2"]);
    expect(h.participant.callsOf("retire")).toHaveLength(0);
    expect(h.cp.status().retired_rollouts).toBe(0);
    expect([...h.participant.pending.keys()]).toEqual(["s-a1"]);
    // Deleted only after the records were written.
    const events = h.participant.events;
    expect(events.indexOf("export:done")).toBeLessThan(events.indexOf("deleteRestored p-a1"));
  });

  it("frees nothing when the commit has no scope, and exports the restored state", async () => {
    h.participant.addPending("p-a1", "p");
    await prepareReady(h.cp, "k1");
    const reply = await h.cp.commit(commitReq("k1", dir, null));
    expect(reply.episode_ids).toEqual(["p-a1"]);
    expect(h.participant.callsOf("deleteRestored")).toHaveLength(0);
  });

  it(`runs at most ${STOP_CONCURRENCY} deletions at once`, async () => {
    expect(STOP_CONCURRENCY).toBe(16);
    for (let i = 0; i < 20; i++) h.participant.addPending(`p${i}-a1`);
    await prepareReady(h.cp, "k1");
    const gate = h.participant.hold("deleteRestored", { times: 20 });
    const commit = h.cp.commit(commitReq("k1", dir, []));
    await gate.entered(16);
    await flush(5);
    expect(gate.calls).toHaveLength(16);
    gate.release();
    await commit;
    expect(h.participant.callsOf("deleteRestored")).toHaveLength(20);
    expect(h.participant.pending.size).toBe(0);
  });

  it("runs a failed cleanup again on retry, which returns the same manifest", async () => {
    h.participant.addPending("p-a1");
    h.participant.addPending("q-a1");
    await prepareReady(h.cp, "k1");
    h.participant.fail("deleteRestored");
    await expect(h.cp.commit(commitReq("k1", dir, []))).rejects.toBeInstanceOf(InjectedError);
    expect(h.cp.phase).toBe("prepared");
    const manifest = JSON.parse(
      await readFile(path.join(participantPath(dir), "manifest.json"), "utf8"),
    ) as unknown;
    const reply = await h.cp.commit(commitReq("k1", dir, []));
    expect(reply.manifest).toEqual(manifest);
    expect(h.participant.pending.size).toBe(0);
    expect(h.participant.callsOf("deleteRestored").length).toBeGreaterThanOrEqual(3);
    expect(h.participant.callsOf("export")).toHaveLength(1);
  });

  it("lets a commit retried while the cleanup runs await the same cleanup", async () => {
    h.participant.addPending("p-a1");
    await prepareReady(h.cp, "k1");
    const gate = h.participant.hold("deleteRestored");
    const first = h.cp.commit(commitReq("k1", dir, []));
    await gate.entered();
    const second = h.cp.commit(commitReq("k1", dir, []));
    await flush(5);
    gate.release();
    const [one, two] = await Promise.all([first, second]);
    expect(two).toEqual(one);
    expect(h.participant.callsOf("deleteRestored")).toHaveLength(1);
  });
});

describe("stop", () => {
  it("parks the exported records once the write is durable; a failure there is only logged", async () => {
    const logs: string[] = [];
    const participant = new TestParticipant();
    const cp = new ControlPlane<TestRecord>(participant, {
      instance: "inst",
      logger: pino({ level: "warn" }, { write: (line: string) => logs.push(line) }),
    });
    participant.start("a");
    participant.park("a", 1);
    await prepareReady(cp, "k1");
    let manifestPresent = false;
    participant.intercept("parkExported", async () => {
      manifestPresent = await exists(path.join(participantPath(dir), "manifest.json"));
      throw new InjectedError("could not free the sandbox");
    });
    const reply = await cp.commit(commitReq("k1", dir, null, { stop: true }));
    expect(reply.phase).toBe("committed");
    expect(participant.detailsOf("parkExported")).toEqual([JSON.stringify(["a"])]);
    expect(manifestPresent).toBe(true);
    expect(logs.join("\n")).toContain("park_exported failed");
    cp.close();
  });
});

describe("the scope is keyed once per request", () => {
  /** A participant holding nothing, whose export filters by the shared key set. */
  class HoldingNothing extends TestParticipant {
    override async export(scope: readonly EpisodeId[] | null): Promise<TestRecord[]> {
      if (scope !== null) captureKeySet(scope);
      return [];
    }
  }

  /** A scope of `n` episodes that counts how often its entries are read. */
  function countedScope(n: number): { scope: EpisodeId[]; reads: () => number } {
    let reads = 0;
    const listed = Array.from({ length: n }, (_, i) => episodeId(`task-${i}`));
    const scope = new Proxy(listed, {
      get(target, property, receiver) {
        if (typeof property === "string" && /^\d+$/.test(property)) reads += 1;
        return Reflect.get(target, property, receiver) as unknown;
      },
    });
    return { scope, reads: () => reads };
  }

  it("reads each scope entry once across the digest, the restart check and the participant's filter", async () => {
    const participant = new HoldingNothing();
    const cp = new ControlPlane<TestRecord>(participant, { instance: "inst" });
    try {
      await prepareReady(cp, "k1");
      const { scope, reads } = countedScope(50);
      const request = { ...commitReq("k1", dir, null), episode_ids: scope };
      const reply = await cp.commit(request);
      expect(reply.episode_ids).toEqual([]);
      expect(reads()).toBe(50);
      // A retry of the same parsed request compares the cached digest: nothing read again.
      await cp.commit(request);
      expect(reads()).toBe(50);
    } finally {
      cp.close();
    }
  });

  it("answers a retry naming the same scope in another order as the same commit", async () => {
    parked({ a: 1, b: 2 });
    await prepareReady(h.cp, "k1");
    const first = await h.cp.commit(commitReq("k1", dir, ["b", "a"]));
    const again = await h.cp.commit(commitReq("k1", dir, ["a", "b", "a"]));
    expect(again).toEqual(first);
    expect(h.participant.callsOf("export")).toHaveLength(1);
    await expectCode(h.cp.commit(commitReq("k1", dir, ["a"])), "checkpoint_conflict");
  });
});
