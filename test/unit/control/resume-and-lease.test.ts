/**
 * Resume (stopping the write, cancelling the export, waiting for the cleanup) and the lease
 * (renewal, expiry, the 30 s retry); see docs/control-plane.md.
 */
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { LEASE_REOPEN_SECONDS } from "#sdk/control/checkpoint-lease.js";
import {
  InjectedError,
  commitReq,
  exists,
  expectCode,
  flush,
  harness,
  inSeconds,
  listDir,
  makeTempDir,
  participantPath,
  prepareReady,
  removeTempDir,
  req,
  type Harness,
} from "../../support/test-participant.js";

let h: Harness;
let dir: string;

beforeEach(async () => {
  h = harness({ leaseGraceSeconds: 10 });
  dir = await makeTempDir();
});

afterEach(async () => {
  vi.useRealTimers();
  h.cp.close();
  await removeTempDir(dir);
});

function track<T>(promise: Promise<T>): { done: boolean; value: T | null; error: unknown } {
  const state: { done: boolean; value: T | null; error: unknown } = {
    done: false,
    value: null,
    error: null,
  };
  promise.then(
    (value) => {
      state.done = true;
      state.value = value;
    },
    (error: unknown) => {
      state.done = true;
      state.error = error;
    },
  );
  return state;
}

function fakeClock(): void {
  vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
}

describe("resume", () => {
  it("remembers an unknown ID resumed in idle, so a delayed prepare of it is stale", async () => {
    expect(await h.cp.resume(req("aborted"))).toEqual({ phase: "idle", idempotent: true });
    expect(h.participant.calls).toEqual([]);
    await expectCode(h.cp.prepare(req("aborted")), "stale_checkpoint");
  });

  it("reopens admission, forgets the checkpoint, clears the lease and notifies", async () => {
    h.participant.start("r");
    await h.cp.prepare(req("a", -1));
    const changed = h.participant.nextChange();
    expect(await h.cp.resume(req("a"))).toEqual({ phase: "idle", idempotent: false });
    await changed;
    expect(h.participant.admissionOpen).toBe(true);
    expect(h.cp.phase).toBe("idle");
    expect(h.cp.checkpointId).toBeNull();
    expect(h.cp.leaseExpiresAt).toBeNull();
    expect(h.cp.status()).toMatchObject({ checkpoint_id: null, lease_expires_at: null });
  });

  it("resumes from every open phase", async () => {
    h.participant.start("a");
    h.participant.park("a", 1);
    await prepareReady(h.cp, "p1");
    await h.cp.resume(req("p1"));
    await prepareReady(h.cp, "p2");
    await h.cp.commit(commitReq("p2", dir, null));
    expect(await h.cp.resume(req("p2"))).toEqual({ phase: "idle", idempotent: false });
    expect(h.participant.callsOf("openAdmission")).toHaveLength(2);
  });

  it("stops the write: no manifest appears after resume returned, and no temporary file stays", async () => {
    h.participant.start("a");
    h.participant.park("a", 1);
    await prepareReady(h.cp, "k");
    // An export that ignores cancellation and hands its records over after the resume.
    const gate = h.participant.hold("export", { abortable: false });
    const commit = h.cp.commit(commitReq("k", dir, null));
    commit.catch(() => undefined);
    await gate.entered();
    await h.cp.resume(req("k"));
    const manifest = path.join(participantPath(dir), "manifest.json");
    expect(await exists(manifest)).toBe(false);
    gate.release();
    await expect(commit).rejects.toMatchObject({ code: "invalid_checkpoint_state" });
    expect(await exists(manifest)).toBe(false);
    expect(await listDir(participantPath(dir))).toEqual([]);
  });

  it("cancels a running export: its signal aborts and nothing is written", async () => {
    h.participant.start("a");
    h.participant.park("a", 1);
    await prepareReady(h.cp, "k");
    const gate = h.participant.hold("export");
    const commit = h.cp.commit(commitReq("k", dir, null));
    commit.catch(() => undefined);
    const [call] = await gate.entered();
    expect(call?.signal?.aborted).toBe(false);
    await h.cp.resume(req("k"));
    expect(call?.signal?.aborted).toBe(true);
    await expect(commit).rejects.toMatchObject({ code: "export_failed" });
    expect(await exists(path.join(dir, "gym"))).toBe(false);
  });

  it("waits for a running cleanup of restored state before reopening admission", async () => {
    h.participant.addPending("p-a1");
    await prepareReady(h.cp, "k");
    const gate = h.participant.hold("deleteRestored");
    const commit = h.cp.commit(commitReq("k", dir, []));
    commit.catch(() => undefined);
    await gate.entered();
    const resume = track(h.cp.resume(req("k")));
    await flush(5);
    expect(resume.done).toBe(false);
    expect(h.participant.callsOf("openAdmission")).toHaveLength(0);
    gate.release();
    await flush(5);
    expect(resume.value).toEqual({ phase: "idle", idempotent: false });
    const events = h.participant.events;
    expect(events.indexOf("deleteRestored:done")).toBeLessThan(events.indexOf("openAdmission"));
  });

  it("changes nothing when the cleanup outlives its deadline, so a later resume succeeds", async () => {
    h.participant.addPending("p-a1");
    await prepareReady(h.cp, "k");
    const gate = h.participant.hold("deleteRestored");
    const commit = h.cp.commit(commitReq("k", dir, []));
    await gate.entered();
    const lease = h.cp.leaseExpiresAt;
    await expectCode(h.cp.resume(req("k", -1)), "deadline_exceeded");
    expect(h.cp.phase).toBe("prepared");
    expect(h.cp.checkpointId).toBe("k");
    expect(h.cp.leaseExpiresAt).toBe(lease);
    expect(h.participant.admissionOpen).toBe(false);
    expect(h.participant.callsOf("openAdmission")).toHaveLength(0);
    // Not remembered: the checkpoint is still this one.
    await h.cp.renew(req("k"));
    gate.release();
    await commit;
    expect(await h.cp.resume(req("k"))).toEqual({ phase: "idle", idempotent: false });
  });

  it("refuses another ID while a checkpoint is active", async () => {
    await prepareReady(h.cp, "a");
    await expectCode(h.cp.resume(req("b")), "checkpoint_conflict");
    expect(h.cp.phase).toBe("prepared");
  });
});

describe("renew", () => {
  it("extends the lease to deadline + grace and never shrinks it, even with a past deadline", async () => {
    h.participant.start("r");
    const first = req("a", -1);
    await h.cp.prepare(first);
    expect(h.cp.leaseExpiresAt).toBe(first.deadline_ts + 10);
    const later = req("a", 100);
    expect(await h.cp.renew(later)).toEqual({ lease_expires_at: later.deadline_ts + 10 });
    expect(await h.cp.renew(req("a", -50))).toEqual({ lease_expires_at: later.deadline_ts + 10 });
    expect(h.cp.leaseExpiresAt).toBe(later.deadline_ts + 10);
  });

  it("is refused in idle", async () => {
    await expectCode(h.cp.renew(req("a")), "invalid_phase");
  });

  it("is not done by status or a failed resume", async () => {
    h.participant.start("r");
    const prepare = req("a", -1);
    await h.cp.prepare(prepare);
    h.cp.status();
    await expectCode(h.cp.resume(req("b", 1000)), "checkpoint_conflict");
    expect(h.cp.leaseExpiresAt).toBe(prepare.deadline_ts + 10);
  });
});

describe("lease expiry", () => {
  it("resumes on its own at expiry and remembers the ID", async () => {
    fakeClock();
    h.participant.start("r");
    await h.cp.prepare(req("a", 0));
    await vi.advanceTimersByTimeAsync(9_999);
    expect(h.cp.phase).toBe("preparing");
    await vi.advanceTimersByTimeAsync(1);
    await flush();
    expect(h.cp.phase).toBe("idle");
    expect(h.cp.checkpointId).toBeNull();
    expect(h.cp.leaseExpiresAt).toBeNull();
    expect(h.participant.admissionOpen).toBe(true);
    await expectCode(h.cp.renew(req("a")), "stale_checkpoint");
    await expectCode(h.cp.prepare(req("a")), "stale_checkpoint");
    expect(await h.cp.resume(req("a"))).toEqual({ phase: "idle", idempotent: true });
  });

  it("follows renewals: a renewed lease does not expire at the old time", async () => {
    fakeClock();
    h.participant.start("r");
    await h.cp.prepare(req("a", 0));
    await vi.advanceTimersByTimeAsync(5_000);
    await h.cp.renew(req("a", 20)); // now expires 30 s from here
    await vi.advanceTimersByTimeAsync(29_000);
    expect(h.cp.phase).toBe("preparing");
    await vi.advanceTimersByTimeAsync(1_000);
    await flush();
    expect(h.cp.phase).toBe("idle");
  });

  it("ends a prepare waiting for readiness, which replies with the current phase", async () => {
    fakeClock();
    h.participant.start("r");
    const prepare = track(h.cp.prepare(req("a", 60)));
    await vi.advanceTimersByTimeAsync(59_000);
    expect(prepare.done).toBe(false);
    // The wait ends at the deadline (preparing); the lease expires 10 s later.
    await vi.advanceTimersByTimeAsync(1_000);
    await flush();
    expect(prepare.value?.phase).toBe("preparing");
    await vi.advanceTimersByTimeAsync(10_000);
    await flush();
    expect(h.cp.phase).toBe("idle");
  });

  it(`retries every ${LEASE_REOPEN_SECONDS} s after any error until it reopens`, async () => {
    expect(LEASE_REOPEN_SECONDS).toBe(30);
    fakeClock();
    h.participant.start("r");
    await h.cp.prepare(req("a", 0));
    h.participant.fail("openAdmission", new InjectedError("not a deadline"), 2);
    await vi.advanceTimersByTimeAsync(10_000);
    await flush();
    expect(h.participant.callsOf("openAdmission")).toHaveLength(1);
    expect(h.cp.phase).toBe("preparing");
    await vi.advanceTimersByTimeAsync(29_999);
    expect(h.participant.callsOf("openAdmission")).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    await flush();
    expect(h.participant.callsOf("openAdmission")).toHaveLength(2);
    expect(h.cp.phase).toBe("preparing");
    await vi.advanceTimersByTimeAsync(30_000);
    await flush();
    expect(h.participant.callsOf("openAdmission")).toHaveLength(3);
    expect(h.cp.phase).toBe("idle");
    await vi.advanceTimersByTimeAsync(600_000);
    expect(h.participant.callsOf("openAdmission")).toHaveLength(3);
  });

  it("lets a controller's resume in while it waits to retry, and then stops", async () => {
    fakeClock();
    h.participant.start("r");
    await h.cp.prepare(req("a", 0));
    h.participant.fail("openAdmission");
    await vi.advanceTimersByTimeAsync(10_000);
    await flush();
    expect(h.cp.phase).toBe("preparing");
    expect(await h.cp.resume(req("a"))).toEqual({ phase: "idle", idempotent: false });
    await vi.advanceTimersByTimeAsync(120_000);
    expect(h.participant.callsOf("openAdmission")).toHaveLength(2);
  });

  it(`gives up after ${LEASE_REOPEN_SECONDS} s on a running cleanup, keeps the phase, and retries`, async () => {
    fakeClock();
    h.participant.addPending("p-a1");
    await h.cp.prepare(req("k", 0)); // ready at once; lease in 10 s
    const gate = h.participant.hold("deleteRestored");
    const commit = track(h.cp.commit(commitReq("k", dir, [], { deadline: inSeconds(5) })));
    await gate.entered();
    await vi.advanceTimersByTimeAsync(5_000);
    await flush();
    expect(commit.error).toMatchObject({ code: "deadline_exceeded" });
    expect(h.cp.leaseExpiresAt).toBeCloseTo(Date.now() / 1000 + 10, 6); // renewed by the commit
    await vi.advanceTimersByTimeAsync(10_000); // the lease expires
    await flush();
    await vi.advanceTimersByTimeAsync(LEASE_REOPEN_SECONDS * 1000); // its reopen gives up
    await flush();
    expect(h.cp.phase).toBe("prepared");
    expect(h.participant.callsOf("openAdmission")).toHaveLength(0);
    gate.release();
    await flush();
    expect(h.cp.phase).toBe("prepared");
    await vi.advanceTimersByTimeAsync(LEASE_REOPEN_SECONDS * 1000);
    await flush();
    expect(h.cp.phase).toBe("idle");
    expect(h.participant.callsOf("openAdmission")).toHaveLength(1);
  });

  it("is not watched once the checkpoint is resumed, nor after close()", async () => {
    fakeClock();
    h.participant.start("r");
    await h.cp.prepare(req("a", 0));
    await h.cp.resume(req("a"));
    await h.cp.prepare(req("b", 0));
    h.cp.close();
    await vi.advanceTimersByTimeAsync(600_000);
    expect(h.cp.phase).toBe("preparing");
    expect(h.participant.callsOf("openAdmission")).toHaveLength(1);
  });
});
