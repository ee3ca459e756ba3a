import { describe, expect, it } from "vitest";
import { CheckpointError, GymError } from "#sdk/errors.js";
import { episodeId, type EpisodeId } from "#sdk/identity/episode-id.js";
import type { AgentSessionRecord } from "#sdk/participants/agent/agent-records.js";
import { RestartOnlyAgentParticipant } from "#sdk/participants/agent/restart-only-participant.js";
import { flush } from "../../support/test-participant.js";

const prepare = { checkpoint_id: "c1", deadline_ts: 0 };
const signal = () => new AbortController().signal;

const r0 = episodeId("r", 0);
const r1 = episodeId("r", 1);
const r2 = episodeId("r", 2);
const q0 = episodeId("q", 0);

/** A participant whose `freeSession` logs each key it frees (and may be made to fail). */
function make() {
  const freed: string[] = [];
  const signals: AbortSignal[] = [];
  let failNext: Error | null = null;
  const p = new RestartOnlyAgentParticipant({
    freeSession: ({ sessionKey, signal: s }) => {
      signals.push(s);
      if (failNext !== null) {
        const error = failNext;
        failNext = null;
        return Promise.reject(error);
      }
      freed.push(sessionKey);
      return Promise.resolve();
    },
  });
  return {
    p,
    freed,
    signals,
    failOnce(error: Error) {
      failNext = error;
    },
  };
}

async function code(work: Promise<unknown> | (() => unknown)): Promise<string> {
  try {
    await (typeof work === "function" ? work() : work);
  } catch (error) {
    if (error instanceof GymError) return error.code;
    throw error;
  }
  return "ok";
}

/** Tracks a promise's settlement without awaiting it. */
function watch(promise: Promise<unknown>) {
  const state = { settled: false, error: null as unknown };
  promise.then(
    () => (state.settled = true),
    (error: unknown) => {
      state.settled = true;
      state.error = error;
    },
  );
  return state;
}

async function seeded(p: RestartOnlyAgentParticipant, key: string, e: EpisodeId): Promise<void> {
  const ticket = await p.enterSeed(key, e);
  ticket.register();
  ticket.leave();
}

const record: AgentSessionRecord = {
  episode_id: r0 as AgentSessionRecord["episode_id"],
  session_key: "s",
  session: {},
  boundary: null,
  episode: null,
  owner: null,
};

describe("RestartOnlyAgentParticipant readiness", () => {
  it("is always ready and reports the distinct tracked keys, sorted, as restarts", () => {
    const { p } = make();
    expect(p.kind).toBe("agent");
    expect(p.readiness()).toEqual({
      ready: true,
      blockers: [],
      blocker_count: 0,
      counts: { inflight: 0 },
      restarts: [],
    });
    const a = p.track("r-a1", r1);
    const b = p.track("r-a1", r1);
    const c = p.track("q", q0);
    p.closeAdmission(prepare);
    expect(p.readiness()).toEqual({
      ready: true,
      blockers: [],
      blocker_count: 0,
      counts: { inflight: 2 },
      restarts: ["q", "r-a1"],
    });
    expect(p.ready()).toBe(true);
    a.done();
    a.done(); // idempotent: the key's other request keeps it tracked
    expect(p.readiness().restarts).toEqual(["q", "r-a1"]);
    b.done();
    c.done();
    expect(p.readiness().restarts).toEqual([]);
    expect(p.readiness().counts).toEqual({ inflight: 0 });
  });

  it("notifies a waiting prepare when a key starts or stops being tracked", async () => {
    const { p } = make();
    p.closeAdmission(prepare);
    const started = watch(p.nextChange());
    const t = p.track("r", r0);
    await flush();
    expect(started.settled).toBe(true);
    const stopped = watch(p.nextChange());
    t.done();
    await flush();
    expect(stopped.settled).toBe(true);
  });

  it("refuses to track a retired attempt, and admits the next one", async () => {
    const { p } = make();
    p.markRetired([r0]);
    expect(await code(() => p.track("r", r0))).toBe("stale_attempt");
    expect(p.readiness().restarts).toEqual([]);
    p.track("r-a1", r1).done();
  });
});

describe("RestartOnlyAgentParticipant export and restore", () => {
  it("exports nothing, even with requests in flight", async () => {
    const { p } = make();
    const t = p.track("r", r0);
    p.closeAdmission(prepare);
    expect(await p.export(null, signal())).toEqual([]);
    expect(await p.export([r0], signal())).toEqual([]);
    t.done();
  });

  it("refuses a restore with any record and accepts an empty one", async () => {
    const { p } = make();
    await p.install([], [r0], signal());
    let error: unknown = null;
    try {
      await p.install([record], [r0], signal());
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(CheckpointError);
    expect((error as CheckpointError).code).toBe("checkpoint_error");
    expect((error as CheckpointError).message).toContain("cannot restore rollouts");
    expect(await code(() => p.install([record], [], signal()))).toBe("checkpoint_error");
  });
});

describe("RestartOnlyAgentParticipant retire of tracked requests", () => {
  it("aborts the attempt's and earlier attempts' requests once and waits until they are done", async () => {
    const { p } = make();
    const a = p.track("r", r0);
    const b = p.track("r", r0);
    const c = p.track("r-a1", r1);
    const later = p.track("r-a2", r2);
    const other = p.track("q", q0);
    let aborts = 0;
    a.signal.addEventListener("abort", () => aborts++);
    p.markRetired([r1]);
    const retire = watch(p.retire(r1, signal()));
    await flush();
    expect([a, b, c].map((t) => t.signal.aborted)).toEqual([true, true, true]);
    expect((a.signal.reason as GymError).code).toBe("stale_attempt");
    expect(later.signal.aborted).toBe(false);
    expect(other.signal.aborted).toBe(false);
    a.done();
    b.done();
    await flush();
    expect(retire.settled).toBe(false); // r-a1 still runs
    c.done();
    await flush();
    expect(retire).toEqual({ settled: true, error: null });
    expect(aborts).toBe(1);
    expect(p.readiness().restarts).toEqual(["q", "r-a2"]);
    later.done();
    other.done();
  });

  it("a retire cut short leaves the request tracked; a retry waits again without a second abort", async () => {
    const { p } = make();
    const t = p.track("r", r0);
    const reasons: unknown[] = [];
    t.signal.addEventListener("abort", () => reasons.push(t.signal.reason));
    p.markRetired([r0]);
    const deadline = new AbortController();
    const first = watch(p.retire(r0, deadline.signal));
    await flush();
    expect(t.signal.aborted).toBe(true);
    const cut = new Error("deadline");
    deadline.abort(cut);
    await flush();
    expect(first).toEqual({ settled: true, error: cut });
    expect(p.readiness().restarts).toEqual(["r"]);
    const retry = watch(p.retire(r0, signal()));
    await flush();
    expect(retry.settled).toBe(false);
    t.done();
    await flush();
    expect(retry).toEqual({ settled: true, error: null });
    expect(reasons).toHaveLength(1);
    expect(p.readiness().restarts).toEqual([]);
  });
});

describe("RestartOnlyAgentParticipant seeds", () => {
  it("a seed waits while a checkpoint is open; tracked requests do not", async () => {
    const { p } = make();
    p.closeAdmission(prepare);
    p.track("q", q0).done(); // rollouts keep running through a checkpoint
    const entered = watch(p.enterSeed("s", r0));
    await flush();
    expect(entered.settled).toBe(false);
    p.openAdmission();
    await flush();
    expect(entered).toEqual({ settled: true, error: null });
  });

  it("a seed waiting for admission can be given up through its signal", async () => {
    const { p } = make();
    p.closeAdmission(prepare);
    const abort = new AbortController();
    const entered = watch(p.enterSeed("s", r0, abort.signal));
    const gone = new Error("client went away");
    abort.abort(gone);
    await flush();
    expect(entered).toEqual({ settled: true, error: gone });
  });

  it("a seed of a retired attempt is refused, also when retired while it waited", async () => {
    const { p } = make();
    p.markRetired([r0]);
    expect(await code(p.enterSeed("s", r0))).toBe("stale_attempt");
    p.closeAdmission(prepare);
    const waiting = p.enterSeed("t", r1);
    p.markRetired([r1]);
    p.openAdmission();
    expect(await code(waiting)).toBe("stale_attempt");
    (await p.enterSeed("u", r2)).leave();
  });

  it("retire waits for a seed in progress, then frees every seeded session of its attempts", async () => {
    const { p, freed, signals } = make();
    await seeded(p, "s0", r0);
    await seeded(p, "s-later", r2);
    await seeded(p, "s-other", q0);
    const ticket = await p.enterSeed("s1", r1);
    const running = p.track("r-a1", r1);
    p.markRetired([r1]);
    const retireSignal = signal();
    const retire = watch(p.retire(r1, retireSignal));
    await flush();
    expect(running.signal.aborted).toBe(true);
    running.done();
    await flush();
    expect(retire.settled).toBe(false); // the seed is still in progress
    expect(freed).toEqual([]);
    // Registered after its attempt was retired: refused, but still freed by the retire.
    expect(await code(() => ticket.register())).toBe("stale_attempt");
    ticket.leave();
    ticket.leave(); // idempotent
    await flush();
    expect(retire).toEqual({ settled: true, error: null });
    expect([...freed].sort()).toEqual(["s0", "s1"]);
    expect(signals.every((s) => s === retireSignal)).toBe(true);
    // Freed sessions are forgotten: a second retire frees nothing.
    await p.retire(r1, signal());
    expect([...freed].sort()).toEqual(["s0", "s1"]);
    await p.retire(r2, signal());
    expect([...freed].sort()).toEqual(["s-later", "s0", "s1"]);
  });

  it("a retire cut short while a seed is in progress throws the deadline's reason", async () => {
    const { p, freed } = make();
    await seeded(p, "s0", r0);
    const ticket = await p.enterSeed("s1", r0);
    p.markRetired([r0]);
    const deadline = new AbortController();
    const first = watch(p.retire(r0, deadline.signal));
    const cut = new Error("deadline");
    deadline.abort(cut);
    await flush();
    expect(first).toEqual({ settled: true, error: cut });
    expect(freed).toEqual([]);
    ticket.leave();
    await p.retire(r0, signal());
    expect(freed).toEqual(["s0"]);
  });

  it("a session the agent closed is not freed by a retire", async () => {
    const { p, freed } = make();
    await seeded(p, "closed", r0);
    await seeded(p, "open", r0);
    p.sessionClosed("closed");
    p.sessionClosed("unknown"); // no-op
    p.markRetired([r0]);
    await p.retire(r0, signal());
    expect(freed).toEqual(["open"]);
  });

  it("a session whose free failed stays recorded, so a retried retire frees it", async () => {
    const { p, freed, failOnce } = make();
    await seeded(p, "s0", r0);
    p.markRetired([r0]);
    const boom = new Error("sandbox unreachable");
    failOnce(boom);
    await expect(p.retire(r0, signal())).rejects.toBe(boom);
    expect(freed).toEqual([]);
    await p.retire(r0, signal());
    expect(freed).toEqual(["s0"]);
  });

  it("a seeded session is freed under the attempt that seeded it last", async () => {
    const { p, freed } = make();
    await seeded(p, "s", r0);
    await seeded(p, "s", r2); // the same key re-seeded by a later attempt
    p.markRetired([r1]);
    await p.retire(r1, signal());
    expect(freed).toEqual([]);
    await p.retire(r2, signal());
    expect(freed).toEqual(["s"]);
  });
});
