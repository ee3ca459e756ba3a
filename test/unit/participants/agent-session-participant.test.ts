/**
 * The agent session participant, transport-free (see docs/agent.md): session states and parking,
 * policy calls counted at their boundary, lazy snapshots, export scope, carried restarts,
 * seeds in progress, retire and close (each cancelling once), restore and unclaimed restored
 * sessions, and notifications.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { ControlPlane } from "#sdk/control/control-plane.js";
import { episodeId, type EpisodeId } from "#sdk/identity/episode-id.js";
import type {
  AgentSessionHooks,
  AgentSessionRecord,
  RestoredAgentSession,
} from "#sdk/participants/agent/agent-records.js";
import { AgentSessionParticipant } from "#sdk/participants/agent/agent-session-participant.js";
import type { AgentActivation } from "#sdk/participants/agent/session-activation.js";
import { ActivationCancelledError } from "#sdk/participants/agent/session-phase.js";
import { untilSettledOrAborted } from "#sdk/util/abortable.js";
import { deferred, type Deferred } from "#sdk/util/deferred.js";
import type { JsonValue } from "#sdk/json/json-value.js";
import { expectCode, flush, makeTempDir, removeTempDir } from "../../support/test-participant.js";

const r1 = episodeId("r1");
const r2 = episodeId("r2");
const r3 = episodeId("r3");

/** A prepare (or restore) request that closes admission; `restarts` as prepare carries them. */
function closing(restarts?: string[]) {
  return { checkpoint_id: "c1", deadline_ts: 0, ...(restarts === undefined ? {} : { restarts }) };
}

const never = () => new AbortController().signal;

/** Hooks that log every call; the retire hook can be held on a gate. */
function make() {
  const exported: string[][] = [];
  const restored: RestoredAgentSession[][] = [];
  const retired: string[] = [];
  const omit = new Set<string>();
  let retireGate: Deferred<void> | null = null;
  const hooks: AgentSessionHooks = {
    exportAgentSessions: ({ sessionKeys }) => {
      exported.push([...sessionKeys]);
      const out = new Map<string, JsonValue>();
      for (const key of sessionKeys) if (!omit.has(key)) out.set(key, { state: `of ${key}` });
      return Promise.resolve(out);
    },
    restoreAgentSessions: ({ sessions }) => {
      restored.push([...sessions]);
      return Promise.resolve();
    },
    retireAgentSession: async ({ sessionKey, signal }) => {
      retired.push(sessionKey);
      if (retireGate !== null) await untilSettledOrAborted(retireGate.promise, [signal]);
    },
  };
  const p = new AgentSessionParticipant({ hooks });
  return {
    p,
    exported,
    restored,
    retired,
    omit,
    /** Holds every later retire hook call until the returned gate resolves. */
    holdRetire(): Deferred<void> {
      retireGate = deferred<void>();
      return retireGate;
    },
  };
}

/** Seeds `key` for `e` through the seed protocol. */
async function seeded(p: AgentSessionParticipant, key: string, e: EpisodeId): Promise<void> {
  const ticket = await p.enterSeed(key, e);
  ticket.register();
  ticket.leave();
}

/** Tracks a promise's outcome without awaiting it. */
function watch<T>(promise: Promise<T>) {
  const state = {
    settled: false,
    value: undefined as T | undefined,
    error: null as unknown,
    promise,
  };
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

/** Counts the times `signal` fires and keeps its reason. */
function aborts(signal: AbortSignal) {
  const seen = { count: 0, reason: undefined as unknown };
  signal.addEventListener("abort", () => {
    seen.count += 1;
    seen.reason = signal.reason;
  });
  return seen;
}

/** A policy call the test answers (or fails); it stops waiting if the activation is cancelled. */
function policyCall(activation: AgentActivation, options: { abortable?: boolean } = {}) {
  const reply = deferred<string>();
  const call = watch(
    activation.modelCall((signal) =>
      options.abortable === false ? reply.promise : untilSettledOrAborted(reply.promise, [signal]),
    ),
  );
  return { reply, call };
}

/** Every `abort` issued with an ActivationCancelledError (one per cancellation). */
function cancellations() {
  const spy = vi.spyOn(AbortController.prototype, "abort");
  return () =>
    spy.mock.calls.filter(([reason]) => reason instanceof ActivationCancelledError).length;
}

const dirs: string[] = [];
const planes: ControlPlane[] = [];
afterEach(async () => {
  vi.restoreAllMocks();
  for (const cp of planes.splice(0)) cp.close();
  await Promise.all(dirs.splice(0).map((d) => removeTempDir(d)));
});

function controlPlane(p: AgentSessionParticipant): ControlPlane {
  const cp = new ControlPlane(p as never, { instance: "agent" });
  planes.push(cp);
  return cp;
}

const soon = () => Date.now() / 1000 + 10;

describe("session states and parking", () => {
  it("a session is idle, running while its activation works, at_boundary while parked, idle after", async () => {
    const { p } = make();
    await seeded(p, "a", r1);
    expect(p.stateOf("a")).toBe("idle");
    expect(p.ready()).toBe(true);
    const act = p.startActivation("a", r1);
    expect(p.stateOf("a")).toBe("running");
    expect(p.readiness()).toMatchObject({ ready: false, blockers: ["r1"] });
    await act.boundary(() => ({ at: 0 })); // no checkpoint: a boundary does not park
    expect(p.stateOf("a")).toBe("running");
    p.closeAdmission(closing());
    const parked = watch(act.boundary(() => ({ at: 1 })));
    await flush();
    expect(parked.settled).toBe(false);
    expect(p.stateOf("a")).toBe("at_boundary");
    expect(p.readiness()).toMatchObject({
      ready: true,
      blockers: [],
      counts: { sessions: 1, at_boundary: 1 },
    });
    p.openAdmission();
    await parked.promise;
    expect(p.stateOf("a")).toBe("running");
    act.end();
    expect(p.stateOf("a")).toBe("idle");
    expect(p.readiness()).toMatchObject({ ready: true, counts: { sessions: 1, at_boundary: 0 } });
  });

  it("a running activation parks at its next boundary once prepare closes admission, and prepare becomes ready", async () => {
    const { p } = make();
    const cp = controlPlane(p);
    await seeded(p, "a", r1);
    const act = p.startActivation("a", r1);
    const prepare = watch(cp.prepare({ checkpoint_id: "c1", deadline_ts: soon() }));
    await flush();
    expect(prepare.settled).toBe(false); // the running activation holds it up
    const parked = watch(act.boundary(() => ({ at: 1 })));
    const reply = await prepare.promise;
    expect(reply).toMatchObject({ phase: "prepared", report: { ready: true, blockers: [] } });
    expect(parked.settled).toBe(false);
    await cp.resume({ checkpoint_id: "c1", deadline_ts: soon() });
    await parked.promise;
    expect(p.stateOf("a")).toBe("running");
    act.end();
  });

  it("an activation started while admission is closed parks at its first boundary", async () => {
    const { p } = make();
    await seeded(p, "a", r1);
    p.closeAdmission(closing());
    const act = p.startActivation("a", r1);
    expect(p.ready()).toBe(false); // running until it reaches the boundary
    const first = watch(act.boundary(() => ({ at: 0 })));
    await flush();
    expect(first.settled).toBe(false);
    expect(p.stateOf("a")).toBe("at_boundary");
    expect(p.ready()).toBe(true);
    p.openAdmission();
    await first.promise;
    // With admission open, the next activation's first boundary does not park.
    act.end();
    const next = p.startActivation("a", r1);
    await next.boundary(() => ({ at: 0 }));
    expect(p.stateOf("a")).toBe("running");
    next.end();
  });

  it("a policy call right after a boundary counts as parked at that boundary", async () => {
    const { p } = make();
    await seeded(p, "a", r1);
    const act = p.startActivation("a", r1);
    const { reply, call } = policyCall(act); // no boundary yet: the call is plain running work
    await flush();
    expect(p.stateOf("a")).toBe("running");
    reply.resolve("first");
    await call.promise;
    await act.boundary(() => ({ at: 1 }));
    const second = policyCall(act);
    await flush();
    expect(p.stateOf("a")).toBe("at_boundary");
    p.closeAdmission(closing());
    expect(p.ready()).toBe(true); // no further boundary needed
    expect(p.readiness()).toMatchObject({ ready: true, counts: { at_boundary: 1 } });
    p.openAdmission();
    second.reply.resolve("second");
    await second.call.promise;
    expect(p.stateOf("a")).toBe("running");
    act.end();
  });

  it("a reply arriving while the checkpoint is open is held until resume; readiness does not regress before the commit", async () => {
    const { p } = make();
    const cp = controlPlane(p);
    const dir = await makeTempDir();
    dirs.push(dir);
    await seeded(p, "a", r1);
    const act = p.startActivation("a", r1);
    const before = vi.fn(() => ({ at: "before the call" }) as JsonValue);
    await act.boundary(before);
    const { reply, call } = policyCall(act);
    await flush();
    const prepared = await cp.prepare({ checkpoint_id: "c1", deadline_ts: soon() });
    expect(prepared.phase).toBe("prepared");
    reply.resolve("the reply"); // the model delivered it before its own prepare
    await flush(10);
    expect(call.settled).toBe(false); // held at the boundary before the call
    expect(p.stateOf("a")).toBe("at_boundary");
    expect(p.ready()).toBe(true);
    const committed = await cp.commit({
      checkpoint_id: "c1",
      deadline_ts: soon(),
      checkpoint_dir: dir,
      episode_ids: null,
      stop: false,
    });
    expect(committed.episode_ids).toEqual(["r1"]);
    expect(before).toHaveBeenCalledTimes(1);
    expect(call.settled).toBe(false);
    await cp.resume({ checkpoint_id: "c1", deadline_ts: soon() });
    expect(await call.promise).toBe("the reply");
    expect(p.stateOf("a")).toBe("running");
    act.end();
  });

  it("with no checkpoint open a reply returns the session to running, and so does a failed call", async () => {
    const { p } = make();
    await seeded(p, "a", r1);
    const act = p.startActivation("a", r1);
    await act.boundary(() => ({ at: 0 }));
    const ok = policyCall(act);
    await flush();
    expect(p.stateOf("a")).toBe("at_boundary");
    ok.reply.resolve("fine");
    expect(await ok.call.promise).toBe("fine");
    expect(p.stateOf("a")).toBe("running");
    await act.boundary(() => ({ at: 1 }));
    const bad = policyCall(act);
    await flush();
    bad.reply.reject(new Error("model down"));
    await flush();
    expect(bad.call.error).toBeInstanceOf(Error);
    expect(p.stateOf("a")).toBe("running");
    expect(p.ready()).toBe(false);
    act.end();
  });
});

describe("snapshots and export", () => {
  it("snapshots are lazy: never built at the boundary, by readiness or by parking; once by the export", async () => {
    const { p } = make();
    await seeded(p, "a", r1);
    const act = p.startActivation("a", r1);
    const stale = vi.fn(() => ({ at: 0 }) as JsonValue);
    const latest = vi.fn(() => ({ at: 1 }) as JsonValue);
    await act.boundary(stale);
    p.closeAdmission(closing());
    const parked = watch(act.boundary(latest));
    await flush();
    p.ready();
    p.readiness();
    expect(stale).not.toHaveBeenCalled();
    expect(latest).not.toHaveBeenCalled();
    const records = await p.export(null, never());
    expect(records).toEqual([
      {
        episode_id: { rollout_id: "r1", attempt: 0 },
        session_key: "a",
        session: { state: "of a" },
        boundary: { at: 1 },
        episode: null,
        owner: null,
      },
    ]);
    expect(latest).toHaveBeenCalledTimes(1);
    expect(stale).not.toHaveBeenCalled();
    p.openAdmission();
    await parked.promise;
    act.end();
    // The ended activation's boundary is gone: the next export builds none.
    p.closeAdmission(closing());
    const again = await p.export(null, never());
    expect(again[0]?.boundary).toBeNull();
    expect(latest).toHaveBeenCalledTimes(1);
  });

  it("export calls the hook once with every session in scope, leaving out live sessions outside it", async () => {
    const { p, exported } = make();
    await seeded(p, "a", r1);
    await seeded(p, "b", r2);
    await seeded(p, "c", r3);
    p.closeAdmission(closing());
    const records = await p.export([r1, r2], never());
    expect(exported).toEqual([["a", "b"]]);
    expect(records.map((r) => [r.session_key, r.episode_id, r.session])).toEqual([
      ["a", { rollout_id: "r1", attempt: 0 }, { state: "of a" }],
      ["b", { rollout_id: "r2", attempt: 0 }, { state: "of b" }],
    ]);
    const all = await p.export(null, never());
    expect(exported[1]).toEqual(["a", "b", "c"]);
    expect(all).toHaveLength(3);
    // Nothing in scope: the hook is not called at all.
    expect(await p.export([episodeId("zz")], never())).toEqual([]);
    expect(exported).toHaveLength(2);
  });

  it("exports in capture-key order, sessions of one attempt by key, whatever the scope's order", async () => {
    const { p, exported } = make();
    const r10 = episodeId("r10");
    const r1a2 = episodeId("r1", 2);
    // Session keys ordered against their episodes, and two sessions of one attempt.
    await seeded(p, "a", r2);
    await seeded(p, "b", r10);
    await seeded(p, "c", r1a2);
    await seeded(p, "e", r1);
    await seeded(p, "d", r1);
    p.closeAdmission(closing());
    const expected = [
      ["d", "r1"],
      ["e", "r1"],
      ["c", "r1-a2"],
      ["b", "r10"],
      ["a", "r2"],
    ];
    const keysOf = (records: AgentSessionRecord[]) =>
      records.map((r) => [
        r.session_key,
        r.episode_id.attempt === 0 ? r.episode_id.rollout_id : `${r.episode_id.rollout_id}-a2`,
      ]);
    const scoped = await p.export([r2, r1a2, r10, r1, r2, episodeId("zz")], never());
    expect(keysOf(scoped)).toEqual(expected);
    expect(exported[0]).toEqual(["d", "e", "c", "b", "a"]);
    expect(keysOf(await p.export(null, never()))).toEqual(expected);
  });

  it("a key missing from the hook's result fails the export with checkpoint_error", async () => {
    const { p, omit } = make();
    await seeded(p, "a", r1);
    await seeded(p, "b", r2);
    omit.add("b");
    p.closeAdmission(closing());
    const error = await expectCode(p.export(null, never()), "checkpoint_error");
    expect(error.message).toMatch(/did not export sessions \[b\]/);
  });
});

describe("restarts carried from earlier prepare stages", () => {
  it("neither block prepare nor are exported, but their activation parks until resume", async () => {
    const { p, exported } = make();
    await seeded(p, "a", r1);
    await seeded(p, "b", r2);
    const actA = p.startActivation("a", r1);
    const actB = p.startActivation("b", r2);
    p.closeAdmission(closing(["r1"]));
    expect(p.readiness()).toMatchObject({ ready: false, blockers: ["r2"] });
    const parkedB = watch(actB.boundary(() => ({ b: 1 })));
    await flush();
    expect(p.ready()).toBe(true); // r1 is still running, inside a slow tool call
    const parkedA = watch(actA.boundary(() => ({ a: 1 })));
    await flush();
    expect(parkedA.settled).toBe(false); // it still parks until resume
    const records = await p.export(null, never());
    expect(exported).toEqual([["b"]]);
    expect(records.map((r) => r.session_key)).toEqual(["b"]);
    p.openAdmission();
    await parkedA.promise;
    await parkedB.promise;
    // The carried restarts end with the checkpoint: the next one waits for r1 again.
    p.closeAdmission(closing());
    expect(p.readiness()).toMatchObject({ ready: false, blockers: ["r1", "r2"] });
    p.openAdmission();
    actA.end();
    actB.end();
  });
});

describe("seeds in progress", () => {
  it("a seed arriving while a checkpoint is open waits for resume and does not block prepare", async () => {
    const { p, exported } = make();
    p.closeAdmission(closing());
    const entering = watch(p.enterSeed("a", r1));
    await flush();
    expect(entering.settled).toBe(false);
    expect(p.readiness()).toMatchObject({ ready: true, blockers: [] });
    expect(await p.export(null, never())).toEqual([]);
    expect(exported).toEqual([]);
    p.openAdmission();
    const ticket = await entering.promise;
    ticket.register();
    ticket.leave();
    expect(p.has("a")).toBe(true);
  });

  it("a seed in progress when admission closes blocks prepare until it registers, and its session is exported", async () => {
    const { p } = make();
    const ticket = await p.enterSeed("a", r1);
    p.closeAdmission(closing());
    expect(p.readiness()).toMatchObject({ ready: false, blockers: ["r1"] });
    expect(p.ready()).toBe(false);
    ticket.register(); // allowed while admission is closed
    ticket.leave();
    expect(p.ready()).toBe(true);
    const records = await p.export(null, never());
    expect(records.map((r) => r.session_key)).toEqual(["a"]);
  });

  it("overlapping seeds of one session each block until both have left", async () => {
    const { p } = make();
    const first = await p.enterSeed("a", r1);
    const retry = await p.enterSeed("a", r1);
    p.closeAdmission(closing());
    first.register();
    first.leave();
    first.leave(); // idempotent: does not count the retry out
    expect(p.readiness()).toMatchObject({ ready: false, blockers: ["r1"] });
    retry.register();
    retry.leave();
    expect(p.ready()).toBe(true);
    expect(p.seedsInProgress).toBe(0);
  });

  it("a restore is refused while a seed is in progress", async () => {
    const { p, restored } = make();
    const ticket = await p.enterSeed("a", r1);
    await expectCode(p.install([], [], never()), "checkpoint_error");
    expect(restored).toEqual([]);
    ticket.leave();
    await p.install([], [], never());
  });

  it("a retire waits for a seed in progress of its attempt, then frees what it registered", async () => {
    const { p, retired } = make();
    const ticket = await p.enterSeed("a", r1);
    const other = await p.enterSeed("b", r2); // another rollout: not waited for
    const retire = watch(p.retire(r1, never()));
    await flush();
    expect(retire.settled).toBe(false);
    expect(retired).toEqual([]);
    ticket.register();
    ticket.leave();
    await retire.promise;
    expect(retired).toEqual(["a"]);
    expect(p.has("a")).toBe(false);
    other.leave();
  });

  it("a seed of a retired attempt is refused; one retired while it builds cannot register", async () => {
    const { p } = make();
    const ticket = await p.enterSeed("a", r1);
    p.markRetired([r1]);
    expect(() => ticket.register()).toThrow(expect.objectContaining({ code: "stale_attempt" }));
    ticket.leave();
    expect(p.has("a")).toBe(false);
    await expectCode(p.enterSeed("b", r1), "stale_attempt");
    // A retired mark covers earlier attempts, not later ones.
    await seeded(p, "c", episodeId("r1", 1));
  });
});

describe("retire", () => {
  it("cancels a running activation once and waits for it to stop before the retire hook runs", async () => {
    const { p, retired } = make();
    const cancelled = cancellations();
    await seeded(p, "a", r1);
    await seeded(p, "b", r2);
    const act = p.startActivation("a", r1);
    const seen = aborts(act.signal);
    const other = p.startActivation("b", r2);
    const retire = watch(p.retire(r1, never()));
    await flush();
    expect(seen.count).toBe(1);
    expect(seen.reason).toBeInstanceOf(ActivationCancelledError);
    expect((seen.reason as ActivationCancelledError).why).toBe("retired");
    expect(other.signal.aborted).toBe(false);
    expect(retire.settled).toBe(false);
    expect(retired).toEqual([]); // the hook waits for the activation to stop
    expect(p.has("a")).toBe(true);
    act.end();
    await retire.promise;
    expect(retired).toEqual(["a"]);
    expect(p.has("a")).toBe(false);
    expect(cancelled()).toBe(1);
    other.end();
  });

  it("a retire cut short while the activation stops leaves the session blocking and unexported; a retry waits again without cancelling twice", async () => {
    const { p, retired, exported } = make();
    const cancelled = cancellations();
    await seeded(p, "a", r1);
    await seeded(p, "b", r2);
    const act = p.startActivation("a", r1);
    const deadline = new AbortController();
    const first = watch(p.retire(r1, deadline.signal));
    await flush();
    deadline.abort(new Error("deadline"));
    await flush();
    expect(first.settled).toBe(true);
    expect(first.error).toBeInstanceOf(Error);
    expect(retired).toEqual([]);
    expect(p.has("a")).toBe(true);
    p.closeAdmission(closing());
    expect(p.readiness()).toMatchObject({ ready: false, blockers: ["r1"] });
    const records = await p.export(null, never());
    expect(exported).toEqual([["b"]]);
    expect(records.map((r) => r.session_key)).toEqual(["b"]);
    p.openAdmission();
    const retry = watch(p.retire(r1, never()));
    await flush();
    expect(retry.settled).toBe(false); // waits for the activation again
    expect(cancelled()).toBe(1);
    act.end();
    await retry.promise;
    expect(retired).toEqual(["a"]);
    expect(p.has("a")).toBe(false);
    expect(cancelled()).toBe(1);
  });

  it("a retire cut short inside the retire hook leaves the session tracked; a retry frees it", async () => {
    const { p, retired, holdRetire } = make();
    await seeded(p, "a", r1);
    const gate = holdRetire();
    const deadline = new AbortController();
    const first = watch(p.retire(r1, deadline.signal));
    await flush();
    expect(retired).toEqual(["a"]);
    deadline.abort(new Error("deadline"));
    await flush();
    expect(first.error).toBeInstanceOf(Error);
    expect(p.has("a")).toBe(true);
    p.closeAdmission(closing());
    expect(p.readiness()).toMatchObject({ ready: false, blockers: ["r1"] });
    expect(await p.export(null, never())).toEqual([]);
    p.openAdmission();
    gate.resolve();
    await p.retire(r1, never());
    expect(retired).toEqual(["a", "a"]);
    expect(p.has("a")).toBe(false);
  });

  it("wakes a parked activation, which then stops as retired", async () => {
    const { p } = make();
    await seeded(p, "a", r1);
    const act = p.startActivation("a", r1);
    p.closeAdmission(closing());
    const parked = watch(act.boundary(() => ({ at: 0 })));
    await flush();
    p.openAdmission();
    p.closeAdmission(closing()); // a second checkpoint before the session ran: stays parked
    await flush();
    expect(parked.settled).toBe(false);
    p.openAdmission();
    p.closeAdmission(closing());
    const retire = watch(p.retire(r1, never()));
    await flush();
    expect(parked.settled).toBe(true);
    // The server answers either as 409 stale_attempt.
    const error = parked.error as { code?: string; why?: string };
    expect(error.code === "stale_attempt" || error.why === "retired", String(error)).toBe(true);
    act.end();
    await retire.promise;
    expect(p.has("a")).toBe(false);
  });
});

describe("close", () => {
  it("stops the activation first; the closing session blocks prepare until its activation has stopped", async () => {
    const { p } = make();
    await seeded(p, "a", r1);
    const act = p.startActivation("a", r1);
    const seen = aborts(act.signal);
    await act.boundary(() => ({ at: 0 }));
    // Inside a policy call that does not stop at once: the session counts as at its boundary.
    const slow = policyCall(act, { abortable: false });
    await flush();
    expect(p.stateOf("a")).toBe("at_boundary");
    const close = watch(p.closeSession("a"));
    await flush();
    expect(seen.count).toBe(1);
    expect((seen.reason as ActivationCancelledError).why).toBe("closing");
    expect(close.settled).toBe(false);
    p.closeAdmission(closing()); // a prepare after the close began
    expect(p.stateOf("a")).toBe("at_boundary");
    expect(p.readiness()).toMatchObject({ ready: false, blockers: ["r1"] }); // closing blocks
    expect(await p.export(null, never())).toEqual([]); // a closing session is never exported
    slow.reply.resolve("late");
    await flush();
    expect(slow.call.error).toBeInstanceOf(ActivationCancelledError); // the loop stops
    expect(p.has("a")).toBe(true); // until the activation has ended
    act.end();
    await flush();
    expect(p.has("a")).toBe(false);
    expect(p.ready()).toBe(true);
    expect(close.error).toBeNull();
    expect(close.value).toBe(true);
  });

  it("waits for resume while admission is closed, before it marks the session closing", async () => {
    const { p } = make();
    await seeded(p, "a", r1);
    p.closeAdmission(closing());
    const close = watch(p.closeSession("a"));
    await flush();
    expect(close.settled).toBe(false);
    const records = await p.export(null, never()); // still an open session: exported
    expect(records.map((r) => r.session_key)).toEqual(["a"]);
    p.openAdmission();
    expect(await close.promise).toBe(true);
    expect(p.has("a")).toBe(false);
    expect(await p.closeSession("a")).toBe(false);
  });

  it("a retire after a close does not cancel again, and waits for the activation", async () => {
    const { p, retired } = make();
    const cancelled = cancellations();
    await seeded(p, "a", r1);
    const act = p.startActivation("a", r1);
    const seen = aborts(act.signal);
    const close = watch(p.closeSession("a"));
    await flush();
    const retire = watch(p.retire(r1, never()));
    await flush();
    expect(retire.settled).toBe(false);
    expect(cancelled()).toBe(1);
    expect((seen.reason as ActivationCancelledError).why).toBe("closing");
    act.end();
    await retire.promise;
    expect(retired).toEqual(["a"]);
    await flush();
    expect(close.error).toMatchObject({ code: "stale_attempt" }); // the retire took it over
  });

  it("a close after a retire's cancel does not cancel again and is refused as stale", async () => {
    const { p } = make();
    const cancelled = cancellations();
    await seeded(p, "a", r1);
    const act = p.startActivation("a", r1);
    const retire = watch(p.retire(r1, never()));
    await flush();
    await expectCode(p.closeSession("a"), "stale_attempt");
    expect(cancelled()).toBe(1);
    act.end();
    await retire.promise;
  });

  it("a close cut short leaves the session closing and blocking; a retried close does not cancel again", async () => {
    const { p } = make();
    const cancelled = cancellations();
    await seeded(p, "a", r1);
    const act = p.startActivation("a", r1);
    const cut = new AbortController();
    const first = watch(p.closeSession("a", { signal: cut.signal }));
    await flush();
    cut.abort(new Error("client gone"));
    await flush();
    expect(first.error).toBeInstanceOf(Error);
    expect(p.has("a")).toBe(true);
    expect(() => p.startActivation("a", r1)).toThrow(
      expect.objectContaining({ code: "checkpoint_error" }),
    );
    p.closeAdmission(closing());
    expect(p.readiness()).toMatchObject({ ready: false, blockers: ["r1"] });
    p.openAdmission();
    const retry = watch(p.closeSession("a"));
    await flush();
    expect(retry.settled).toBe(false);
    expect(cancelled()).toBe(1);
    act.end();
    await flush();
    expect(p.has("a")).toBe(false);
    expect(retry.error).toBeNull();
    expect(retry.settled).toBe(true);
  });
});

describe("restore", () => {
  const record = (
    key: string,
    e: EpisodeId,
    boundary: JsonValue | null,
    episode: JsonValue | null = null,
  ): AgentSessionRecord =>
    ({
      episode_id: e,
      session_key: key,
      session: { state: `of ${key}` },
      boundary,
      episode,
      owner: null,
    }) as AgentSessionRecord;

  it("installs each record under its next attempt, with its boundary as the continuation", async () => {
    const { p, restored } = make();
    await p.install(
      [record("a", r1, { step: 2 }), record("run:r2", r2, null, { next: "verify" })],
      [r1, r2],
      never(),
    );
    expect(restored).toHaveLength(1);
    expect(restored[0]).toEqual([
      { sessionKey: "a", episodeId: { rollout_id: "r1", attempt: 1 }, session: { state: "of a" } },
      {
        sessionKey: "run:r2",
        episodeId: { rollout_id: "r2", attempt: 1 },
        session: { state: "of run:r2" },
      },
    ]);
    expect(p.episodeOf("a")).toEqual({ rollout_id: "r1", attempt: 1 });
    expect(p.stateOf("a")).toBe("idle");
    expect(p.restoredPending().map((e) => `${e.rollout_id}-a${e.attempt}`)).toEqual([
      "r1-a1",
      "r2-a1",
    ]);
    expect(() => p.startActivation("a", r1)).toThrow(
      expect.objectContaining({ code: "stale_attempt" }),
    );
    expect(p.isRestoredPending("a")).toBe(true);
    const act = p.startActivation("a", episodeId("r1", 1));
    expect(act.continuation).toEqual({ step: 2 });
    expect(p.isRestoredPending("a")).toBe(false); // the activation claimed it
    act.end();
    const next = p.startActivation("a", episodeId("r1", 1));
    expect(next.continuation).toBeNull(); // consumed once
    next.end();
  });

  it("refuses a process that holds live sessions", async () => {
    const { p, restored } = make();
    await seeded(p, "a", r1);
    await expectCode(p.install([record("b", r2, null)], [r2], never()), "checkpoint_error");
    expect(restored).toEqual([]);
  });

  it("an unclaimed restored session is exported with its continuation while in scope, and deleted without a retire mark once a commit leaves it out", async () => {
    const { p, exported, retired } = make();
    const cp = controlPlane(p);
    await p.install(
      [record("a", r1, { step: 3 }), record("b", r2, { step: 1 })],
      [r1, r2],
      never(),
    );
    p.claim("b"); // b's live episode uses it (e.g. a replayed reply)
    const r1a1 = episodeId("r1", 1);
    const r2a1 = episodeId("r2", 1);
    const dir1 = await makeTempDir();
    dirs.push(dir1);
    await cp.prepare({ checkpoint_id: "c1", deadline_ts: soon() });
    const first = await cp.commit({
      checkpoint_id: "c1",
      deadline_ts: soon(),
      checkpoint_dir: dir1,
      episode_ids: [r1a1, r2a1],
      stop: false,
    });
    expect(first.episode_ids).toEqual(["r1-a1", "r2-a1"]);
    const records = await p.export([r1a1], never());
    expect(records).toEqual([
      {
        episode_id: { rollout_id: "r1", attempt: 1 },
        session_key: "a",
        session: { state: "of a" },
        boundary: { step: 3 },
        episode: null,
        owner: null,
      },
    ]);
    await cp.resume({ checkpoint_id: "c1", deadline_ts: soon() });
    expect(retired).toEqual([]);
    const dir2 = await makeTempDir();
    dirs.push(dir2);
    exported.length = 0;
    await cp.prepare({ checkpoint_id: "c2", deadline_ts: soon() });
    const second = await cp.commit({
      checkpoint_id: "c2",
      deadline_ts: soon(),
      checkpoint_dir: dir2,
      episode_ids: [episodeId("other")],
      stop: false,
    });
    expect(second.episode_ids).toEqual([]);
    expect(exported).toEqual([]); // nothing in scope is exported
    expect(retired).toEqual(["a"]); // the unclaimed one is freed through the retire hook
    expect(p.has("a")).toBe(false);
    expect(p.has("b")).toBe(true); // claimed: the live episode still uses it
    expect(p.retired.isRetired(r1a1)).toBe(false); // no retire mark: it may start over
    await cp.resume({ checkpoint_id: "c2", deadline_ts: soon() });
  });
});

describe("readiness and notifications", () => {
  it("ready() answers without building the readiness report", async () => {
    const { p } = make();
    const report = vi.spyOn(p, "readiness");
    await seeded(p, "a", r1);
    const ticket = await p.enterSeed("b", r2);
    const act = p.startActivation("a", r1);
    expect(p.ready()).toBe(false);
    p.closeAdmission(closing());
    const parked = watch(act.boundary(() => ({})));
    await flush();
    expect(p.ready()).toBe(false); // the seed still holds it up
    ticket.register();
    ticket.leave();
    expect(p.ready()).toBe(true);
    expect(report).not.toHaveBeenCalled();
    p.openAdmission();
    await parked.promise;
    act.end();
  });

  it("nothing notifies outside a checkpoint, a worker's link hears it; changes inside one notify", async () => {
    const { p } = make();
    const notify = vi.spyOn(p, "notify");
    // A worker forwards every change to its coordinator, whose status counts the sessions.
    let forwarded = 0;
    p.onChange = () => (forwarded += 1);
    await seeded(p, "a", r1);
    const act = p.startActivation("a", r1);
    await act.boundary(() => ({}));
    const call = policyCall(act);
    await flush();
    call.reply.resolve("x");
    await call.call.promise;
    act.end();
    const legacy = p.beginLegacyRun(r2);
    await legacy.boundary({ next: "work" });
    await legacy.step("wait", () => 1);
    legacy.end();
    const direct = p.trackDirect(r3);
    direct.done();
    expect(await p.closeSession("a")).toBe(true);
    await seeded(p, "b", r1);
    await p.retire(r1, never());
    expect(notify).not.toHaveBeenCalled();
    expect(forwarded).toBeGreaterThan(0);
    await seeded(p, "c", r2);
    const inside = p.startActivation("c", r2);
    p.closeAdmission(closing());
    const atClose = notify.mock.calls.length;
    expect(atClose).toBeGreaterThan(0);
    inside.end(); // the activation's end may make prepare ready: it notifies
    expect(notify.mock.calls.length).toBeGreaterThan(atClose);
    p.openAdmission();
  });
});
