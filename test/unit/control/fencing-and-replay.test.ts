/**
 * Fencing (fencing order, remembered resumed IDs) and idempotent replay; see
 * docs/control-plane.md.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { REMEMBERED_RESUMED_IDS } from "#sdk/control/resumed-ids.js";
import {
  commitReq,
  expectCode,
  harness,
  makeTempDir,
  prepareReady,
  removeTempDir,
  req,
  restoreReq,
  writeCheckpoint,
  type Harness,
} from "../../support/test-participant.js";

let h: Harness;
let dir: string;

beforeEach(async () => {
  h = harness();
  dir = await makeTempDir();
});

afterEach(async () => {
  h.cp.close();
  await removeTempDir(dir);
});

describe("fencing order", () => {
  it("refuses a resumed ID as stale before reporting a conflict with the active checkpoint", async () => {
    await h.cp.resume(req("old"));
    await prepareReady(h.cp, "active");
    await expectCode(h.cp.prepare(req("old")), "stale_checkpoint");
    await expectCode(h.cp.renew(req("old")), "stale_checkpoint");
    await expectCode(h.cp.commit(commitReq("old", dir, null)), "stale_checkpoint");
    await expectCode(h.cp.restore(restoreReq("old", dir, [])), "stale_checkpoint");
  });

  it("refuses another active ID as a conflict before checking the phase", async () => {
    await prepareReady(h.cp, "active");
    // restore is only allowed in idle and renew/commit are allowed in prepared: the conflict wins.
    await expectCode(h.cp.restore(restoreReq("other", dir, [])), "checkpoint_conflict");
    await expectCode(h.cp.renew(req("other")), "checkpoint_conflict");
    await expectCode(h.cp.commit(commitReq("other", dir, null)), "checkpoint_conflict");
    await expectCode(h.cp.prepare(req("other")), "checkpoint_conflict");
    await expectCode(h.cp.resume(req("other")), "checkpoint_conflict");
    expect(h.cp.checkpointId).toBe("active");
  });

  it("refuses a stale ID before checking the phase", async () => {
    await h.cp.resume(req("old"));
    // renew is not allowed in idle, but the ID is stale first.
    await expectCode(h.cp.renew(req("old")), "stale_checkpoint");
  });

  it("refuses an operation outside its phases with invalid_phase", async () => {
    await expectCode(h.cp.renew(req("a")), "invalid_phase");
    await expectCode(h.cp.commit(commitReq("a", dir, null)), "invalid_phase");
    h.participant.start("r");
    await h.cp.prepare(req("a", -1)); // stays preparing
    await expectCode(h.cp.commit(commitReq("a", dir, null)), "invalid_phase");
    await expectCode(h.cp.restore(restoreReq("a", dir, [])), "invalid_phase");
    h.participant.park("r", 1);
    await prepareReady(h.cp, "a");
    await expectCode(h.cp.restore(restoreReq("a", dir, [])), "invalid_phase");
  });

  it("refuses a prepare of the restored checkpoint's own ID with invalid_phase", async () => {
    await writeCheckpoint(dir, {});
    await h.cp.restore(restoreReq("r1", dir, []));
    await expectCode(h.cp.prepare(req("r1")), "invalid_phase");
    await expectCode(h.cp.commit(commitReq("r1", dir, null)), "invalid_phase");
  });
});

describe("remembered resumed IDs", () => {
  it(`remembers the last ${REMEMBERED_RESUMED_IDS} resumed IDs and evicts the oldest`, async () => {
    expect(REMEMBERED_RESUMED_IDS).toBe(64);
    for (let i = 0; i <= 64; i++) {
      expect(await h.cp.resume(req(`c${i}`))).toEqual({ phase: "idle", idempotent: true });
    }
    // c0 was evicted by the 65th: renew in idle now fails on the phase, not as stale.
    await expectCode(h.cp.renew(req("c0")), "invalid_phase");
    for (let i = 1; i <= 64; i++) await expectCode(h.cp.renew(req(`c${i}`)), "stale_checkpoint");
    await prepareReady(h.cp, "c0");
    expect(h.participant.detailsOf("closeAdmission")).toEqual(["c0"]);
  });

  it("answers a resume of a remembered ID as idempotent without touching the participant", async () => {
    await prepareReady(h.cp, "a");
    expect(await h.cp.resume(req("a"))).toEqual({ phase: "idle", idempotent: false });
    const calls = h.participant.calls.length;
    expect(await h.cp.resume(req("a"))).toEqual({ phase: "idle", idempotent: true });
    await prepareReady(h.cp, "b");
    // Even while another checkpoint is active: step 1 of resume comes before fencing.
    expect(await h.cp.resume(req("a"))).toEqual({ phase: "idle", idempotent: true });
    expect(h.cp.checkpointId).toBe("b");
    expect(h.participant.calls.length).toBe(calls + 1); // only b's closeAdmission
  });

  it("discards the stored results of a resumed ID: a later prepare is stale, not a replay", async () => {
    await prepareReady(h.cp, "a");
    await h.cp.resume(req("a"));
    await expectCode(h.cp.prepare(req("a")), "stale_checkpoint");
  });
});

describe("prepare replay", () => {
  it("replays a completed prepare verbatim without closing admission again", async () => {
    h.participant.start("r");
    h.participant.park("r", { step: 1 });
    const first = await prepareReady(h.cp, "a");
    // The state changes; the replay still answers with the stored reply.
    h.participant.start("late");
    const again = await h.cp.prepare(req("a", -5));
    expect(again).toStrictEqual(first);
    expect(again.report.ready).toBe(true);
    expect(h.participant.callsOf("closeAdmission")).toHaveLength(1);
  });

  it("replays the prepared reply even once the participant is committed", async () => {
    const first = await prepareReady(h.cp, "a");
    await h.cp.commit(commitReq("a", dir, null));
    expect(h.cp.phase).toBe("committed");
    expect(await h.cp.prepare(req("a"))).toStrictEqual(first);
    expect(h.cp.phase).toBe("committed");
  });

  it("does not store a prepare that ended in preparing: a retry prepares again", async () => {
    h.participant.start("r");
    const first = await h.cp.prepare(req("a", -1));
    expect(first.phase).toBe("preparing");
    h.participant.park("r", 0);
    expect((await h.cp.prepare(req("a"))).phase).toBe("prepared");
  });
});

describe("commit replay", () => {
  beforeEach(() => {
    for (const key of ["a", "b", "c"]) {
      h.participant.start(key);
      h.participant.park(key, key);
    }
  });

  it("replays a commit retried with the scope in any order", async () => {
    await prepareReady(h.cp, "k");
    const first = await h.cp.commit(commitReq("k", dir, ["b", "a"]));
    const again = await h.cp.commit(commitReq("k", dir, ["a", "b", "a"], { seconds: -1 }));
    expect(again).toStrictEqual(first);
    expect(h.participant.callsOf("export")).toHaveLength(1);
  });

  it("refuses a commit retried with another directory or scope as a conflict", async () => {
    await prepareReady(h.cp, "k");
    await h.cp.commit(commitReq("k", dir, ["a", "b"]));
    await expectCode(
      h.cp.commit(commitReq("k", `${dir}/elsewhere`, ["a", "b"])),
      "checkpoint_conflict",
    );
    await expectCode(h.cp.commit(commitReq("k", dir, ["a"])), "checkpoint_conflict");
    await expectCode(h.cp.commit(commitReq("k", dir, null)), "checkpoint_conflict");
    await expectCode(h.cp.commit(commitReq("k", dir, [])), "checkpoint_conflict");
    expect(h.participant.callsOf("export")).toHaveLength(1);
  });

  it("stores no failure: a commit that failed can be retried and succeed", async () => {
    await prepareReady(h.cp, "k");
    const gate = h.participant.hold("export");
    await expectCode(h.cp.commit(commitReq("k", dir, null, { seconds: -1 })), "deadline_exceeded");
    gate.release();
    const reply = await h.cp.commit(commitReq("k", dir, null));
    expect(reply.phase).toBe("committed");
  });
});

describe("restore replay", () => {
  beforeEach(async () => {
    await writeCheckpoint(dir, { a: 1, b: 2, c: 3 });
  });

  it("replays a restore retried with the scope in any order", async () => {
    const first = await h.cp.restore(restoreReq("r", dir, ["b", "a"]));
    const again = await h.cp.restore(restoreReq("r", dir, ["a", "b"], { seconds: -1 }));
    expect(again).toStrictEqual(first);
    expect(h.participant.callsOf("install")).toHaveLength(1);
  });

  it("refuses a restore retried with another directory or scope as a conflict", async () => {
    await h.cp.restore(restoreReq("r", dir, ["a", "b"]));
    await expectCode(h.cp.restore(restoreReq("r", `${dir}/x`, ["a", "b"])), "checkpoint_conflict");
    await expectCode(h.cp.restore(restoreReq("r", dir, ["a"])), "checkpoint_conflict");
    await expectCode(h.cp.restore(restoreReq("r", dir, ["a", "b", "c"])), "checkpoint_conflict");
    expect(h.participant.callsOf("install")).toHaveLength(1);
  });

  it("stores no failure: a restore whose read failed can be retried", async () => {
    const empty = `${dir}/nothing-here`;
    await expectCode(h.cp.restore(restoreReq("r", empty, ["a"])), "invalid_checkpoint_state");
    const reply = await h.cp.restore(restoreReq("r", dir, ["a"]));
    expect(reply.restored).toEqual(["a-a1"]);
  });
});
