/**
 * Retire and forget (outside a checkpoint only) and the retire parts of restore; see
 * docs/control-plane.md.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ControlPlane } from "#sdk/control/control-plane.js";
import { STOP_CONCURRENCY } from "#sdk/control/rollout-stops.js";
import { GymError } from "#sdk/errors.js";
import type { ForgetRequest, RetireRequest } from "#sdk/wire/control.js";
import {
  InjectedError,
  TestParticipant,
  commitReq,
  ep,
  eps,
  expectCode,
  flush,
  harness,
  inSeconds,
  makeTempDir,
  prepareReady,
  removeTempDir,
  req,
  restoreReq,
  writeCheckpoint,
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
  vi.useRealTimers();
  h.cp.close();
  await removeTempDir(dir);
});

function retireReq(id: string, keys: string[], seconds = 30): RetireRequest {
  return { checkpoint_id: id, deadline_ts: inSeconds(seconds), episode_ids: eps(...keys) };
}

function forgetReq(id: string, rolloutIds: string[], seconds = 30): ForgetRequest {
  return { checkpoint_id: id, deadline_ts: inSeconds(seconds), rollout_ids: rolloutIds };
}

describe("retire admission", () => {
  it("is refused with invalid_phase while a checkpoint is open, before the conflict check, raising no mark", async () => {
    h.participant.start("r");
    await h.cp.prepare(req("a", -1));
    await expectCode(h.cp.retire(retireReq("other", ["r"])), "invalid_phase");
    await expectCode(h.cp.forget(forgetReq("other", ["r"])), "invalid_phase");
    h.participant.park("r", 1);
    await prepareReady(h.cp, "a");
    await expectCode(h.cp.retire(retireReq("a", ["r"])), "invalid_phase");
    await h.cp.commit(commitReq("a", dir, null));
    await expectCode(h.cp.retire(retireReq("a", ["r"])), "invalid_phase");
    await expectCode(h.cp.forget(forgetReq("a", ["r"])), "invalid_phase");
    expect(h.cp.status().retired_rollouts).toBe(0);
    expect(h.participant.callsOf("retire")).toHaveLength(0);
  });

  it("accepts any ID in idle, even a resumed one (no stale check)", async () => {
    await h.cp.resume(req("old"));
    h.participant.start("r");
    expect(await h.cp.retire(retireReq("old", ["r"]))).toEqual({ retired_count: 1 });
    expect(await h.cp.forget(forgetReq("old", ["r"]))).toEqual({ forgotten_count: 1 });
    expect(h.cp.leaseExpiresAt).toBeNull();
  });

  it("in restored, must name the restore's ID and renews the lease", async () => {
    await writeCheckpoint(dir, { a: 1 });
    await h.cp.restore(restoreReq("rs", dir, ["a"], { seconds: 10 }));
    await expectCode(h.cp.retire(retireReq("other", ["a-a1"])), "checkpoint_conflict");
    await expectCode(h.cp.forget(forgetReq("other", ["a"])), "checkpoint_conflict");
    const retire = retireReq("rs", ["a-a1"], 500);
    expect(await h.cp.retire(retire)).toEqual({ retired_count: 1 });
    expect(h.cp.leaseExpiresAt).toBe(retire.deadline_ts + 100);
    const forget = forgetReq("rs", ["a"], 900);
    expect(await h.cp.forget(forget)).toEqual({ forgotten_count: 1 });
    expect(h.cp.leaseExpiresAt).toBe(forget.deadline_ts + 100);
    expect(h.cp.phase).toBe("restored");
    // Retire frees what the restore installed.
    expect(h.participant.pending.size).toBe(0);
  });
});

describe("retire", () => {
  it("marks the attempts before stopping them and replies with the number of entries given", async () => {
    h.participant.start("r-a2");
    h.participant.start("s");
    const marked: boolean[] = [];
    h.participant.intercept(
      "retire",
      (call) => void marked.push(h.participant.retired.isRetired(call.args[0] as never)),
      2,
    );
    const reply = await h.cp.retire(retireReq("x", ["r", "r-a2", "r-a1", "s", "s"]));
    expect(reply).toEqual({ retired_count: 5 });
    expect(marked).toEqual([true, true]);
    expect(h.participant.episodes.size).toBe(0);
    expect(h.cp.status().retired_rollouts).toBe(2);
  });

  it("stops each rollout once, through the latest attempt named", async () => {
    await h.cp.retire(retireReq("x", ["r", "r-a2", "r-a1", "s"]));
    expect(h.participant.detailsOf("retire").sort()).toEqual(["r-a2", "s"]);
    expect(h.participant.retired.isRetired(ep("r", 2))).toBe(true);
    expect(h.participant.retired.isRetired(ep("r", 3))).toBe(false);
  });

  it("keeps the marks when the participant's retire fails, and rethrows its error", async () => {
    h.participant.start("r");
    const error = new InjectedError("could not stop");
    h.participant.fail("retire", error);
    await expect(h.cp.retire(retireReq("x", ["r"]))).rejects.toBe(error);
    expect(h.participant.retired.isRetired(ep("r"))).toBe(true);
    expect(h.cp.status().retired_rollouts).toBe(1);
    // A retry stops what is still tracked.
    await h.cp.retire(retireReq("x", ["r"]));
    expect(h.participant.episodes.size).toBe(0);
  });

  it("fails with deadline_exceeded past its deadline, aborting the stop signal but keeping the marks", async () => {
    h.participant.start("r");
    const gate = h.participant.hold("retire");
    await expectCode(h.cp.retire(retireReq("x", ["r"], -1)), "deadline_exceeded");
    const [call] = gate.calls;
    expect(call?.signal?.aborted).toBe(true);
    expect(h.participant.retired.isRetired(ep("r"))).toBe(true);
    expect(h.participant.episodes.has("r")).toBe(true);
    await h.cp.retire(retireReq("x", ["r"]));
    expect(h.participant.episodes.has("r")).toBe(false);
  });

  it("aborts the stop signal when its deadline passes while stopping", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    h.participant.start("r");
    const gate = h.participant.hold("retire", { abortable: false });
    const retire = h.cp.retire(retireReq("x", ["r"], 5));
    retire.catch(() => undefined);
    const [call] = await gate.entered();
    await vi.advanceTimersByTimeAsync(4_999);
    expect(call?.signal?.aborted).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    await expect(retire).rejects.toMatchObject({ code: "deadline_exceeded" });
    expect(call?.signal?.aborted).toBe(true);
    expect(call?.signal?.reason).toMatchObject({ code: "deadline_exceeded" });
    gate.release();
  });

  it("does not abort the stop signal early when the deadline is far away", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    const gate = h.participant.hold("retire");
    const farAway = inSeconds(40 * 24 * 3600); // beyond setTimeout's 24.8-day range
    const retire = h.cp.retire({
      checkpoint_id: "x",
      deadline_ts: farAway,
      episode_ids: eps("r"),
    });
    const [call] = await gate.entered();
    await vi.advanceTimersByTimeAsync(60_000);
    expect(call?.signal?.aborted).toBe(false);
    gate.release();
    expect(await retire).toEqual({ retired_count: 1 });
  });

  it(`runs at most ${STOP_CONCURRENCY} participant retires at once`, async () => {
    const keys = Array.from({ length: 20 }, (_, i) => `r${i}`);
    const gate = h.participant.hold("retire", { times: 20 });
    const retire = h.cp.retire(retireReq("x", keys));
    await gate.entered(STOP_CONCURRENCY);
    await flush(5);
    expect(gate.calls).toHaveLength(STOP_CONCURRENCY);
    gate.release();
    expect(await retire).toEqual({ retired_count: 20 });
    expect(h.participant.callsOf("retire")).toHaveLength(20);
  });

  it("replies only after everything stopped, then notifies a change", async () => {
    h.participant.start("r");
    const gate = h.participant.hold("retire");
    let replied = false;
    const retire = h.cp.retire(retireReq("x", ["r"])).then((reply) => {
      replied = true;
      return reply;
    });
    await gate.entered();
    const changed = h.participant.nextChange();
    await flush(5);
    expect(replied).toBe(false);
    gate.release();
    await retire;
    await changed;
    const events = h.participant.events;
    expect(events.indexOf("retire:done")).toBeGreaterThan(events.indexOf("retire r"));
  });

  it("waits for a restore's install still running before stopping anything", async () => {
    await writeCheckpoint(dir, { a: 1 });
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    const install = h.participant.hold("install");
    const restore = h.cp.restore(restoreReq("rs", dir, ["a"], { seconds: 10 }));
    restore.catch(() => undefined);
    await install.entered();
    await vi.advanceTimersByTimeAsync(10_000);
    await expect(restore).rejects.toMatchObject({ code: "deadline_exceeded" });
    let replied = false;
    const retire = h.cp.retire(retireReq("x", ["a-a1"], 100)).then(() => (replied = true));
    await flush(5);
    expect(replied).toBe(false);
    expect(h.participant.callsOf("retire")).toHaveLength(0);
    install.release();
    await retire;
    const events = h.participant.events;
    expect(events.indexOf("install:done")).toBeLessThan(events.indexOf("retire a-a1"));
    // It frees what the late install put in place.
    expect(h.participant.pending.size).toBe(0);
  });
});

describe("forget", () => {
  it("drops the marks of the named rollouts and replies with the number of entries given", async () => {
    await h.cp.retire(retireReq("x", ["a", "b-a3"]));
    expect(h.cp.status().retired_rollouts).toBe(2);
    const changed = h.participant.nextChange();
    expect(await h.cp.forget(forgetReq("x", ["b", "b", "unknown"]))).toEqual({
      forgotten_count: 3,
    });
    await changed;
    expect(h.cp.status().retired_rollouts).toBe(1);
    expect(h.participant.retired.isRetired(ep("b", 3))).toBe(false);
    expect(h.participant.retired.isRetired(ep("a"))).toBe(true);
  });

  it("changes nothing when checkForget refuses", async () => {
    class Refusing extends TestParticipant {
      override checkForget(rolloutIds: readonly string[]): void {
        if (rolloutIds.includes("held")) {
          throw new GymError("retire_incomplete", "retired state of 'held' is still held");
        }
      }
    }
    const participant = new Refusing();
    const cp = new ControlPlane<TestRecord>(participant, { instance: "inst" });
    await cp.retire(retireReq("x", ["held", "other"]));
    await expectCode(cp.forget(forgetReq("x", ["other", "held"])), "retire_incomplete");
    expect(cp.status().retired_rollouts).toBe(2);
    expect(participant.retired.isRetired(ep("other"))).toBe(true);
    cp.close();
  });

  it("drops nothing when its deadline has passed: 409 deadline_exceeded", async () => {
    await h.cp.retire(retireReq("x", ["a"]));
    await expectCode(h.cp.forget(forgetReq("x", ["a"], -1)), "deadline_exceeded");
    expect(h.participant.retired.isRetired(ep("a"))).toBe(true);
    expect(await h.cp.forget(forgetReq("x", ["a"]))).toEqual({ forgotten_count: 1 });
  });

  /**
   * A forget queued behind a retire holding the lock gives up at its deadline (fake clock);
   * then the retire lets go. `clockLags`: the wall clock reads before the deadline again by
   * then, as when Node fires a timer a millisecond early.
   */
  async function forgetTimedOutBehindRetire(clockLags: boolean): Promise<void> {
    await h.cp.retire(retireReq("x", ["a"]));
    const stuck = h.participant.hold("retire", { abortable: false });
    const retire = h.cp.retire(retireReq("x", ["b"]));
    await stuck.entered();
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    const deadline = Date.now() / 1000 + 0.2;
    const forget = expectCode(
      h.cp.forget({ checkpoint_id: "x", deadline_ts: deadline, rollout_ids: ["a"] }),
      "deadline_exceeded",
    );
    await vi.advanceTimersByTimeAsync(250);
    await forget;
    if (clockLags) vi.setSystemTime(deadline * 1000 - 5);
    stuck.release();
    await retire;
    await flush();
    vi.useRealTimers();
  }

  it("drops nothing when it gets its turn behind a retire only after its deadline", async () => {
    await forgetTimedOutBehindRetire(false);
    expect(h.participant.retired.isRetired(ep("a"))).toBe(true);
  });

  it("drops nothing when its timer fires a little before the clock reaches the deadline", async () => {
    // The forget queued behind the lock must still refuse once its caller was told
    // deadline_exceeded, even though the clock now says the deadline has not passed.
    await forgetTimedOutBehindRetire(true);
    expect(h.participant.retired.isRetired(ep("a"))).toBe(true);
  });
});
