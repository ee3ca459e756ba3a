/** The term grace's wait: until the participant's checkpoint commits, the grace passes, or SIGINT. */
import { describe, expect, it } from "vitest";
import { TERM_GRACE_ENV, drainBeforeStop, termGraceOf } from "#sdk/cli/term-grace.js";

describe("drainBeforeStop", () => {
  it("ends when the participant's phase reads committed", async () => {
    let phase = "prepared";
    const waiting = drainBeforeStop(
      () => ({ phase, checkpointId: "c2" }),
      60_000,
      new AbortController().signal,
      5,
    );
    setTimeout(() => (phase = "committed"), 30);
    expect(await waiting).toBe("committed");
  });

  it("waits past a checkpoint already committed at the signal, for the next one", async () => {
    let state: { phase: string; checkpointId: string | null } = {
      phase: "committed",
      checkpointId: "c1",
    };
    let ended: string | null = null;
    const waiting = drainBeforeStop(() => state, 60_000, new AbortController().signal, 5).then(
      (end) => (ended = end),
    );
    setTimeout(() => (state = { phase: "idle", checkpointId: null }), 20);
    setTimeout(() => {
      // Still serving: c1 was committed before the signal.
      expect(ended).toBeNull();
      state = { phase: "committed", checkpointId: "c2" };
    }, 60);
    await waiting;
    expect(ended).toBe("committed");
  });

  it("waits out the grace for a server that takes no part in checkpoints", async () => {
    const started = Date.now();
    expect(await drainBeforeStop(null, 60, new AbortController().signal, 5)).toBe("grace passed");
    expect(Date.now() - started).toBeGreaterThanOrEqual(55);
  });

  it("ends at once when interrupted", async () => {
    const interrupt = new AbortController();
    const waiting = drainBeforeStop(
      () => ({ phase: "idle", checkpointId: null }),
      60_000,
      interrupt.signal,
      10_000,
    );
    interrupt.abort();
    expect(await waiting).toBe("interrupted");
  });

  it("reads the grace gym serve sets, and none otherwise", () => {
    expect(termGraceOf({ [TERM_GRACE_ENV]: "90000" })).toBe(90_000);
    expect(termGraceOf({})).toBe(0);
    expect(termGraceOf({ [TERM_GRACE_ENV]: "soon" })).toBe(0);
  });
});
