/**
 * Prepare (see docs/control-plane.md): closing admission, the readiness wait outside the lock, the
 * reply.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ControlPlane } from "#sdk/control/control-plane.js";
import type { PrepareReply } from "#sdk/wire/control.js";
import {
  InjectedError,
  TestParticipant,
  expectCode,
  flush,
  harness,
  inSeconds,
  prepareReady,
  req,
  type Harness,
} from "../../support/test-participant.js";

let h: Harness;

beforeEach(() => {
  h = harness({ leaseGraceSeconds: 100 });
});

afterEach(() => {
  h.cp.close();
  vi.useRealTimers();
});

/** Starts a prepare and tracks its settlement without awaiting it. */
function track(promise: Promise<PrepareReply>): { reply: PrepareReply | null; error: unknown } {
  const state: { reply: PrepareReply | null; error: unknown } = { reply: null, error: null };
  promise.then(
    (reply) => (state.reply = reply),
    (error: unknown) => (state.error = error),
  );
  return state;
}

describe("prepare from idle", () => {
  it("closes admission with the request, renews the lease and replies prepared when ready", async () => {
    h.participant.start("r");
    h.participant.park("r", { next: 2 });
    const request = req("a");
    const reply = await h.cp.prepare(request);
    expect(reply).toEqual({
      phase: "prepared",
      report: {
        ready: true,
        blockers: [],
        blocker_count: 0,
        counts: { episodes: 1, pending: 0 },
        restarts: [],
      },
    });
    expect(h.participant.callsOf("closeAdmission").map((call) => call.args[0])).toEqual([request]);
    expect(h.participant.admissionOpen).toBe(false);
    expect(h.cp.phase).toBe("prepared");
    expect(h.cp.checkpointId).toBe("a");
    expect(h.cp.leaseExpiresAt).toBe(request.deadline_ts + 100);
  });

  it("replies preparing with the blockers once the deadline passed, keeping admission closed and the lease running", async () => {
    h.participant.start("r2");
    h.participant.start("r1");
    h.participant.start("x", { restart: true });
    const request = req("a", -5);
    const reply = await h.cp.prepare(request);
    expect(reply.phase).toBe("preparing");
    expect(reply.report).toMatchObject({
      ready: false,
      blockers: ["r1", "r2"],
      blocker_count: 2,
      restarts: ["x"],
    });
    expect(h.cp.phase).toBe("preparing");
    expect(h.cp.checkpointId).toBe("a");
    expect(h.participant.admissionOpen).toBe(false);
    expect(h.participant.callsOf("openAdmission")).toHaveLength(0);
    expect(h.cp.leaseExpiresAt).toBe(request.deadline_ts + 100);
  });

  it("re-entered with the same ID only renews the lease", async () => {
    h.participant.start("r");
    const first = req("a", -5);
    await h.cp.prepare(first);
    h.participant.park("r", 1);
    const second = req("a", 60);
    expect((await h.cp.prepare(second)).phase).toBe("prepared");
    expect(h.participant.callsOf("closeAdmission")).toHaveLength(1);
    expect(h.cp.leaseExpiresAt).toBe(second.deadline_ts + 100);
  });

  it("reopens admission, goes idle and does not remember the ID when closeAdmission throws", async () => {
    const error = new InjectedError("close failed on one worker");
    h.participant.intercept("closeAdmission", () => {
      h.participant.admissionOpen = false; // closed part way, then failed
      throw error;
    });
    await expect(h.cp.prepare(req("a"))).rejects.toBe(error);
    expect(h.participant.callsOf("openAdmission")).toHaveLength(1);
    expect(h.participant.admissionOpen).toBe(true);
    expect(h.cp.phase).toBe("idle");
    expect(h.cp.checkpointId).toBeNull();
    expect(h.cp.leaseExpiresAt).toBeNull();
    // Not remembered as resumed: the same ID prepares again.
    await prepareReady(h.cp, "a");
  });

  it("still goes idle when reopening after a failed close fails too", async () => {
    h.participant.fail("closeAdmission");
    h.participant.fail("openAdmission");
    await expect(h.cp.prepare(req("a"))).rejects.toBeInstanceOf(InjectedError);
    expect(h.cp.phase).toBe("idle");
    expect(h.cp.checkpointId).toBeNull();
  });

  it("reopens admission when the readiness wait itself throws", async () => {
    class Failing extends TestParticipant {
      failReady = false;
      override ready(): boolean {
        if (this.failReady) throw new InjectedError("ready failed");
        return super.ready();
      }
    }
    const participant = new Failing();
    const cp = new ControlPlane(participant, { instance: "inst" });
    participant.start("r");
    participant.failReady = true;
    await expect(cp.prepare(req("a"))).rejects.toBeInstanceOf(InjectedError);
    expect(cp.phase).toBe("idle");
    expect(cp.checkpointId).toBeNull();
    expect(participant.admissionOpen).toBe(true);
    participant.failReady = false;
    participant.park("r", 0);
    expect((await cp.prepare(req("a"))).phase).toBe("prepared");
    cp.close();
  });
});

describe("the readiness wait", () => {
  it("does not hold the lock: a resume during the wait ends the prepare, which replies idle", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    h.participant.start("r");
    const preparing = track(h.cp.prepare(req("a", 60)));
    await h.participant.called("ready");
    // The clock stands still: the resume can only get in if the wait does not hold the lock.
    let resumed: unknown = null;
    void h.cp.resume(req("a")).then((reply) => (resumed = reply));
    await flush();
    expect(resumed).toEqual({ phase: "idle", idempotent: false });
    expect(preparing.reply?.phase).toBe("idle");
    expect(preparing.reply?.report.blockers).toEqual(["r"]);
    // Nothing was stored for the ID: it is stale now.
    await expectCode(h.cp.prepare(req("a")), "stale_checkpoint");
  });

  it("wakes on a participant notification without waiting for a poll", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    h.participant.start("r");
    const state = track(h.cp.prepare(req("a", 60)));
    await h.participant.called("ready");
    await flush();
    expect(state.reply).toBeNull();
    h.participant.park("r", 1); // notifies
    await flush();
    expect(state.reply?.phase).toBe("prepared");
  });

  it("re-checks readiness at least every second without a notification", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    h.participant.start("r");
    const state = track(h.cp.prepare(req("a", 60)));
    await h.participant.called("ready");
    h.participant.park("r", 1, { notify: false });
    await vi.advanceTimersByTimeAsync(999);
    expect(state.reply).toBeNull();
    await vi.advanceTimersByTimeAsync(1);
    await flush();
    expect(state.reply?.phase).toBe("prepared");
  });

  it("ends at the deadline and replies preparing with the blockers, never deadline_exceeded", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    h.participant.start("r");
    const state = track(h.cp.prepare(req("a", 2.5)));
    await vi.advanceTimersByTimeAsync(2_000);
    expect(state.reply).toBeNull();
    await vi.advanceTimersByTimeAsync(500);
    await flush();
    expect(state.error).toBeNull();
    expect(state.reply).toMatchObject({ phase: "preparing", report: { blockers: ["r"] } });
    expect(h.cp.phase).toBe("preparing");
  });

  it("consults only ready() while waiting and builds the full report once, for the reply", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    h.participant.start("r");
    h.participant.start("s");
    const readinessBefore = h.participant.readinessCalls;
    const state = track(h.cp.prepare(req("a", 60)));
    await h.participant.called("ready");
    h.participant.park("r", 1);
    await flush();
    await vi.advanceTimersByTimeAsync(3_000);
    h.participant.park("s", 1);
    await flush();
    expect(state.reply?.phase).toBe("prepared");
    expect(h.participant.readyCalls).toBeGreaterThanOrEqual(3);
    expect(h.participant.readinessCalls - readinessBefore).toBe(1);
  });

  it("lets concurrent prepares of one ID share the checkpoint: admission closes once", async () => {
    h.participant.start("r");
    const first = h.cp.prepare(req("a"));
    const second = h.cp.prepare(req("a"));
    await h.participant.called("ready", 2);
    h.participant.park("r", 1);
    const replies = await Promise.all([first, second]);
    expect(replies.map((reply) => reply.phase)).toEqual(["prepared", "prepared"]);
    expect(h.participant.callsOf("closeAdmission")).toHaveLength(1);
  });

  it("does not wait at all when the deadline has already passed", async () => {
    h.participant.start("r");
    const before = h.participant.readyCalls;
    const reply = await h.cp.prepare({ checkpoint_id: "a", deadline_ts: inSeconds(-60) });
    expect(reply.phase).toBe("preparing");
    expect(h.participant.readyCalls - before).toBe(1);
  });
});
