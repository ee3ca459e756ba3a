/**
 * Restore (see docs/control-plane.md): retired marks, the scoped read, install as next attempts,
 * and the reopen rules after a failed restore. Real temporary directories.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { RestoreReply } from "#sdk/wire/storage.js";
import {
  InjectedError,
  ep,
  expectCode,
  flush,
  harness,
  makeTempDir,
  removeTempDir,
  req,
  restoreReq,
  writeCheckpoint,
  type Harness,
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

function track(promise: Promise<unknown>): { done: boolean; error: unknown } {
  const state: { done: boolean; error: unknown } = { done: false, error: null };
  promise.then(
    () => (state.done = true),
    (error: unknown) => {
      state.done = true;
      state.error = error;
    },
  );
  return state;
}

/** Fakes only the clock and timeouts: file I/O keeps running for real. */
function fakeClock(): void {
  vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
}

describe("a successful restore", () => {
  it("installs the scoped records as next attempts and replies with their sorted keys", async () => {
    await writeCheckpoint(dir, { b: { step: 3 }, "a-a1": [1, 2], c: null }, "src");
    const request = restoreReq("r1", dir, ["b", "a-a1"]);
    const reply = await h.cp.restore(request);
    expect(reply).toEqual<RestoreReply>({
      phase: "restored",
      source_checkpoint_id: "src",
      restored: ["a-a2", "b-a1"],
    });
    expect(Object.fromEntries(h.participant.pending)).toEqual({
      "a-a2": { episode: ep("a", 2), payload: [1, 2] },
      "b-a1": { episode: ep("b", 1), payload: { step: 3 } },
    });
    expect(h.cp.phase).toBe("restored");
    expect(h.cp.checkpointId).toBe("r1");
    expect(h.cp.leaseExpiresAt).toBe(request.deadline_ts + 100);
    expect(h.participant.restoredManifests.map((m) => m.checkpoint_id)).toEqual(["src"]);
    expect(h.participant.events.filter((e) => !e.includes(":"))).toEqual([
      "closeAdmission r1",
      `install ${JSON.stringify(["a-a1", "b"])}`,
    ]);
  });

  it("reads only scoped records; scope entries without a record are absent, and install gets the full scope", async () => {
    await writeCheckpoint(dir, { a: 1, b: 2, c: 3 });
    const reply = await h.cp.restore(restoreReq("r1", dir, ["zz", "a"]));
    expect(reply.restored).toEqual(["a-a1"]);
    const [install] = h.participant.callsOf("install");
    expect(install?.detail).toBe(JSON.stringify(["a"]));
    expect(install?.args[1]).toEqual([ep("zz"), ep("a")]);
  });

  it("marks every scope attempt retired, so retired_rollouts counts the distinct rollouts", async () => {
    await writeCheckpoint(dir, { a: 1, "b-a2": 2 });
    await h.cp.restore(restoreReq("r1", dir, ["a", "b-a2", "b-a1"]));
    expect(h.cp.status().retired_rollouts).toBe(2);
    expect(h.participant.retired.isRetired(ep("b", 2))).toBe(true);
    expect(h.participant.retired.isRetired(ep("b", 3))).toBe(false);
    expect(h.participant.retired.isRetired(ep("a", 1))).toBe(false);
  });

  it("keeps admission closed until resume", async () => {
    await writeCheckpoint(dir, { a: 1 });
    await h.cp.restore(restoreReq("r1", dir, ["a"]));
    expect(h.participant.admissionOpen).toBe(false);
    expect(await h.cp.resume(req("r1"))).toEqual({ phase: "idle", idempotent: false });
    expect(h.participant.admissionOpen).toBe(true);
    expect(h.cp.phase).toBe("idle");
    expect(h.cp.leaseExpiresAt).toBeNull();
  });

  it("is refused outside idle", async () => {
    await writeCheckpoint(dir, { a: 1 });
    await h.cp.restore(restoreReq("r1", dir, ["a"]));
    // The same ID with other arguments is a replay conflict; another ID conflicts with it.
    await expectCode(h.cp.restore(restoreReq("r1", dir, ["b"])), "checkpoint_conflict");
    await expectCode(h.cp.restore(restoreReq("r2", dir, ["a"])), "checkpoint_conflict");
    await h.cp.resume(req("r1"));
    await h.cp.prepare(req("p"));
    await expectCode(h.cp.restore(restoreReq("p", dir, ["a"])), "invalid_phase");
  });
});

describe("a failed read", () => {
  it("keeps the marks but leaves the participant idle with admission open", async () => {
    await expectCode(
      h.cp.restore(restoreReq("r1", dir, ["a", "b-a2", "b-a1"])),
      "invalid_checkpoint_state",
    );
    expect(h.cp.status().retired_rollouts).toBe(2);
    expect(h.cp.phase).toBe("idle");
    expect(h.cp.checkpointId).toBeNull();
    expect(h.participant.admissionOpen).toBe(true);
    expect(h.participant.calls).toEqual([]);
  });

  it("marks the scope even when the deadline has already passed", async () => {
    await writeCheckpoint(dir, { a: 1 });
    await expect(h.cp.restore(restoreReq("r1", dir, ["a"], { seconds: -1 }))).rejects.toThrow();
    expect(h.participant.retired.isRetired(ep("a"))).toBe(true);
    expect(h.cp.phase).toBe("idle");
  });
});

describe("a restore whose replacements are already retired here", () => {
  // What a failed restore leaves: the controller retired every replacement everywhere.
  it("is refused with stale_attempt naming them, changing nothing, and runs once they are forgotten", async () => {
    await writeCheckpoint(dir, { a: 1, b: 2 });
    h.participant.markRetired([ep("a", 1)]);
    const refused = await expectCode(
      h.cp.restore(restoreReq("r1", dir, ["a", "b"])),
      "stale_attempt",
    );
    expect(refused.status).toBe(409);
    expect(refused.message).toMatch(/'a-a1' are retired here.*forget rollout\(s\) 'a' first/);
    // Nothing changed: b was not marked, nothing was read or installed, admission is open.
    expect(h.participant.retired.isRetired(ep("b"))).toBe(false);
    expect(h.cp.status().retired_rollouts).toBe(1);
    expect(h.participant.calls).toEqual([]);
    expect(h.cp.phase).toBe("idle");
    expect(h.participant.admissionOpen).toBe(true);

    await h.cp.forget({
      checkpoint_id: "f",
      deadline_ts: Date.now() / 1000 + 30,
      rollout_ids: ["a"],
    });
    const reply = await h.cp.restore(restoreReq("r1", dir, ["a", "b"]));
    expect(reply.restored).toEqual(["a-a1", "b-a1"]);
  });
});

describe("a failed install", () => {
  it("reopens admission and leaves the participant idle, allowing a retry", async () => {
    await writeCheckpoint(dir, { a: 1 });
    h.participant.fail("install");
    // An untyped failure is refused as checkpoint_error naming the step, the cause kept.
    const refused = await expectCode(
      h.cp.restore(restoreReq("r1", dir, ["a"])),
      "checkpoint_error",
    );
    expect(refused.message).toContain("while installing the records");
    expect(refused.cause).toBeInstanceOf(InjectedError);
    expect(h.participant.callsOf("openAdmission")).toHaveLength(1);
    expect(h.participant.admissionOpen).toBe(true);
    expect(h.cp.phase).toBe("idle");
    expect(h.cp.checkpointId).toBeNull();
    expect(h.cp.leaseExpiresAt).toBeNull();
    expect((await h.cp.restore(restoreReq("r1", dir, ["a"]))).restored).toEqual(["a-a1"]);
  });

  it("installs nothing when one record is invalid, and names its episode", async () => {
    await writeCheckpoint(dir, { a: 1, b: "invalid" });
    const error = await expectCode(
      h.cp.restore(restoreReq("r1", dir, ["a", "b"])),
      "invalid_checkpoint_state",
    );
    expect(error.message).toContain("episode 'b'");
    expect(h.participant.pending.size).toBe(0);
    expect(h.participant.admissionOpen).toBe(true);
  });

  it("reopens admission when closeAdmission fails part way", async () => {
    await writeCheckpoint(dir, { a: 1 });
    h.participant.intercept("closeAdmission", () => {
      h.participant.admissionOpen = false;
      throw new InjectedError("one worker did not close");
    });
    const refused = await expectCode(
      h.cp.restore(restoreReq("r1", dir, ["a"])),
      "checkpoint_error",
    );
    expect(refused.cause).toBeInstanceOf(InjectedError);
    expect(h.participant.admissionOpen).toBe(true);
    expect(h.participant.callsOf("install")).toHaveLength(0);
  });

  it("leaves a failed reopen pending; the next resume retries it instead of answering as a no-op", async () => {
    await writeCheckpoint(dir, { a: 1 });
    h.participant.fail("install");
    h.participant.fail("openAdmission");
    await expect(h.cp.restore(restoreReq("r1", dir, ["a"]))).rejects.toThrow("install failed");
    expect(h.participant.admissionOpen).toBe(false);
    expect(await h.cp.resume(req("x"))).toEqual({ phase: "idle", idempotent: false });
    expect(h.participant.admissionOpen).toBe(true);
    expect(await h.cp.resume(req("y"))).toEqual({ phase: "idle", idempotent: true });
    expect(h.participant.callsOf("openAdmission")).toHaveLength(2);
  });

  it("keeps the reopen pending when the resume's retry fails too", async () => {
    await writeCheckpoint(dir, { a: 1 });
    h.participant.fail("install");
    h.participant.fail("openAdmission", undefined, 2);
    await expect(h.cp.restore(restoreReq("r1", dir, ["a"]))).rejects.toThrow();
    await expect(h.cp.resume(req("x"))).rejects.toBeInstanceOf(InjectedError);
    expect(await h.cp.resume(req("x"))).toEqual({ phase: "idle", idempotent: false });
    expect(h.participant.admissionOpen).toBe(true);
  });

  it("reopens before replying: a resume arriving while the reopen fails still retries it", async () => {
    await writeCheckpoint(dir, { a: 1 });
    h.participant.fail("install");
    const reopen = h.participant.hold("openAdmission");
    const restore = h.cp.restore(restoreReq("r1", dir, ["a"]));
    await reopen.entered();
    const resume = h.cp.resume(req("x"));
    reopen.fail(new InjectedError("reopen failed"));
    await expect(restore).rejects.toThrow("install failed");
    expect(await resume).toEqual({ phase: "idle", idempotent: false });
    expect(h.participant.admissionOpen).toBe(true);
  });

  it("clears a pending reopen once admission reopened: later resumes in idle are no-ops", async () => {
    await writeCheckpoint(dir, { a: 1 });
    h.participant.fail("install");
    h.participant.fail("openAdmission");
    await expect(h.cp.restore(restoreReq("r1", dir, ["a"]))).rejects.toThrow();
    // A successful restore, then its resume, reopen admission for good.
    await h.cp.restore(restoreReq("r2", dir, ["a"]));
    await h.cp.resume(req("r2"));
    const opens = h.participant.callsOf("openAdmission").length;
    expect(await h.cp.resume(req("later"))).toEqual({ phase: "idle", idempotent: true });
    expect(h.participant.callsOf("openAdmission")).toHaveLength(opens);
  });
});

describe("an install that outlives its restore", () => {
  it("reopens admission only after the install finishes", async () => {
    await writeCheckpoint(dir, { a: 1 });
    fakeClock();
    const install = h.participant.hold("install");
    const restore = track(h.cp.restore(restoreReq("r1", dir, ["a"], { seconds: 10 })));
    await install.entered();
    await vi.advanceTimersByTimeAsync(10_000);
    await flush();
    expect(restore.error).toMatchObject({ code: "deadline_exceeded" });
    expect(h.participant.admissionOpen).toBe(false);
    expect(h.participant.callsOf("openAdmission")).toHaveLength(0);
    install.release();
    await flush();
    expect(h.participant.admissionOpen).toBe(true);
    expect(h.cp.phase).toBe("idle");
    const events = h.participant.events;
    expect(events.indexOf("install:done")).toBeLessThan(events.indexOf("openAdmission"));
  });

  it("is waited for by the next restore, which takes over: admission stays closed", async () => {
    await writeCheckpoint(dir, { a: 1 });
    fakeClock();
    const install = h.participant.hold("install");
    const first = track(h.cp.restore(restoreReq("r1", dir, ["a"], { seconds: 10 })));
    await install.entered();
    await vi.advanceTimersByTimeAsync(10_000);
    await flush();
    expect(first.error).toMatchObject({ code: "deadline_exceeded" });
    const second = h.cp.restore(restoreReq("r1", dir, ["a"], { seconds: 100 }));
    await flush(5);
    expect(h.participant.callsOf("closeAdmission")).toHaveLength(1);
    install.release();
    expect((await second).restored).toEqual(["a-a1"]);
    await flush(5);
    expect(h.participant.callsOf("openAdmission")).toHaveLength(0);
    expect(h.participant.admissionOpen).toBe(false);
    expect(h.cp.phase).toBe("restored");
    const events = h.participant.events;
    expect(events.lastIndexOf("install:done")).toBeGreaterThan(
      events.lastIndexOf("closeAdmission r1"),
    );
  });

  it("still reopens admission when a later restore fails before closing admission", async () => {
    await writeCheckpoint(dir, { a: 1 });
    fakeClock();
    const install = h.participant.hold("install");
    const first = track(h.cp.restore(restoreReq("r1", dir, ["a"], { seconds: 10 })));
    await install.entered();
    await vi.advanceTimersByTimeAsync(10_000);
    await flush();
    expect(first.error).toMatchObject({ code: "deadline_exceeded" });
    // A later restore whose read fails never took over.
    await expectCode(
      h.cp.restore(restoreReq("r1", `${dir}/missing`, ["a"], { seconds: 100 })),
      "invalid_checkpoint_state",
    );
    install.release();
    await flush();
    expect(h.participant.admissionOpen).toBe(true);
  });

  it("is waited for by a resume in idle, which reopens admission once it finishes", async () => {
    await writeCheckpoint(dir, { a: 1 });
    fakeClock();
    const install = h.participant.hold("install");
    const first = track(h.cp.restore(restoreReq("r1", dir, ["a"], { seconds: 10 })));
    await install.entered();
    await vi.advanceTimersByTimeAsync(10_000);
    await flush();
    expect(first.error).toMatchObject({ code: "deadline_exceeded" });
    const resume = track(h.cp.resume(req("x", 100)));
    await flush(5);
    expect(resume.done).toBe(false);
    expect(h.participant.callsOf("openAdmission")).toHaveLength(0);
    install.release();
    await flush(5);
    expect(resume.done).toBe(true);
    expect(resume.error).toBeNull();
    expect(h.participant.admissionOpen).toBe(true);
    const events = h.participant.events;
    expect(events.indexOf("install:done")).toBeLessThan(events.indexOf("openAdmission"));
    expect(h.participant.callsOf("openAdmission")).toHaveLength(1);
  });

  it("makes a resume in idle fail with deadline_exceeded, changing nothing, when it outlives the resume's deadline", async () => {
    await writeCheckpoint(dir, { a: 1 });
    fakeClock();
    const install = h.participant.hold("install");
    const first = track(h.cp.restore(restoreReq("r1", dir, ["a"], { seconds: 10 })));
    await install.entered();
    await vi.advanceTimersByTimeAsync(10_000);
    await flush();
    expect(first.error).toMatchObject({ code: "deadline_exceeded" });
    const resume = track(h.cp.resume(req("x", 5)));
    await vi.advanceTimersByTimeAsync(5_000);
    await flush();
    expect(resume.error).toMatchObject({ code: "deadline_exceeded" });
    expect(h.participant.admissionOpen).toBe(false);
    install.release();
    await flush();
    expect(h.participant.admissionOpen).toBe(true);
    // Not remembered by the failed resume.
    expect(await h.cp.resume(req("x"))).toEqual({ phase: "idle", idempotent: true });
  });
});
