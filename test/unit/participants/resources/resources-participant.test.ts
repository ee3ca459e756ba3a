import { flush } from "../../../support/test-participant.js";
import { describe, expect, it } from "vitest";
import { episodeId, type EpisodeId } from "#sdk/identity/episode-id.js";
import { GymError } from "#sdk/errors.js";
import {
  ResourcesParticipant,
  type ResourcesParticipantOptions,
} from "#sdk/participants/resources/resources-participant.js";
import type { JsonValue } from "#sdk/json/json-value.js";

const prepare = { checkpoint_id: "c1", deadline_ts: 0 };
const signal = () => new AbortController().signal;

function counterHooks() {
  const counts = new Map<string, number>();
  const retired: string[] = [];
  return {
    counts,
    retired,
    hooks: {
      exportSessionStates: ({ sessionIds }: { sessionIds: readonly string[] }) => {
        const out: Record<string, JsonValue> = {};
        for (const id of sessionIds) if (counts.has(id)) out[id] = { count: counts.get(id) ?? 0 };
        return Promise.resolve(out);
      },
      restoreSessionStates: ({ states }: { states: Readonly<Record<string, JsonValue>> }) => {
        for (const [id, s] of Object.entries(states))
          counts.set(id, (s as { count: number }).count);
        return Promise.resolve();
      },
      retireSessionState: ({ sessionId }: { sessionId: string }) => {
        retired.push(sessionId);
        counts.delete(sessionId);
        return Promise.resolve();
      },
    },
  };
}

async function seed(p: ResourcesParticipant, sid: string, e: EpisodeId): Promise<void> {
  const t = await p.admit({ sessionId: sid, path: "/seed_session", episode: e });
  t.responseStarted({ status: 200, sessionId: sid, closeFollows: false });
  t.finish();
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

function make(options: ResourcesParticipantOptions = {}) {
  return new ResourcesParticipant(options);
}

const r0 = episodeId("r", 0);
const r1 = episodeId("r", 1);

describe("ResourcesParticipant admission", () => {
  it("a tool call during an open checkpoint waits for resume instead of being refused", async () => {
    const p = make({ mode: "stateless" });
    await seed(p, "s", r0);
    p.closeAdmission(prepare);
    let admitted = false;
    const pending = p.admit({ sessionId: "s", path: "/tool", episode: r0 }).then((t) => {
      admitted = true;
      return t;
    });
    await flush();
    expect(admitted).toBe(false);
    expect(p.ready()).toBe(true); // a waiting request is not in flight
    p.openAdmission();
    (await pending).finish();
    expect(admitted).toBe(true);
  });

  it("a replayable verify is admitted at once and does not count toward inflight", async () => {
    const p = make({ mode: "exported", verify: "replay", ...counterHooks() });
    await seed(p, "s", r0);
    p.closeAdmission(prepare);
    const t = await p.admit({ sessionId: "s", path: "/verify", episode: r0 });
    expect(p.readiness().ready).toBe(true);
    t.responseStarted({ status: 200, sessionId: "s", closeFollows: false });
    t.finish();
    // Ended while admission was closed: kept (and exported) until resume.
    expect(p.readiness().counts.sessions).toBe(1);
    p.openAdmission();
    expect(p.readiness().counts.sessions).toBe(0);
  });

  it("a verify with close-follows keeps the session until its close", async () => {
    const p = make({ mode: "stateless", verify: "replay" });
    await seed(p, "s", r0);
    const v = await p.admit({ sessionId: "s", path: "/verify", episode: r0 });
    v.responseStarted({ status: 200, sessionId: "s", closeFollows: true });
    v.finish();
    expect(p.isOpen("s")).toBe(true);
    const c = await p.admit({ sessionId: "s", path: "/close_session", episode: r0 });
    c.responseStarted({ status: 200, sessionId: "s", closeFollows: false });
    c.finish();
    expect(p.isOpen("s")).toBe(false);
  });

  it("a wait-mode verify ends the session at once even with close-follows", async () => {
    const p = make({ mode: "stateless" });
    await seed(p, "s", r0);
    const v = await p.admit({ sessionId: "s", path: "/verify", episode: r0 });
    v.responseStarted({ status: 200, sessionId: "s", closeFollows: true });
    v.finish();
    expect(p.isOpen("s")).toBe(false);
  });

  it("session starts, verify and close need a rollout prefix", async () => {
    const p = make();
    for (const path of ["/seed_session", "/verify", "/close_session"]) {
      expect(await code(p.admit({ sessionId: "s", path, episode: null }))).toBe(
        "rollout_id_required",
      );
    }
    expect(await code(p.admit({ sessionId: "s", path: "/tool", episode: null }))).toBe("ok");
  });

  it("a request naming another attempt than its session's is refused stale_attempt", async () => {
    const p = make();
    await seed(p, "s", r0);
    expect(await code(p.admit({ sessionId: "s", path: "/tool", episode: r1 }))).toBe(
      "stale_attempt",
    );
    expect(
      await code(p.admit({ sessionId: "s", path: "/tool", episode: episodeId("other") })),
    ).toBe("stale_attempt");
  });

  it("a seed that replaces the session ID is tracked under the new one", async () => {
    const p = make();
    const t = await p.admit({ sessionId: "old", path: "/seed_session", episode: r0 });
    t.responseStarted({ status: 200, sessionId: "new", closeFollows: false });
    t.finish();
    expect(p.isOpen("new")).toBe(true);
    expect(p.isOpen("old")).toBe(false);
  });

  it("a failed seed tracks nothing", async () => {
    const p = make();
    const t = await p.admit({ sessionId: "s", path: "/seed_session", episode: r0 });
    t.responseStarted({ status: 500, sessionId: "s", closeFollows: false });
    t.finish();
    expect(p.isOpen("s")).toBe(false);
  });
});

describe("ResourcesParticipant modes", () => {
  it("restart_only reports live sessions and seeds in flight as restarts and never blocks", async () => {
    const p = make();
    await seed(p, "a", episodeId("a"));
    const inflight = await p.admit({
      sessionId: "b",
      path: "/seed_session",
      episode: episodeId("b"),
    });
    const tool = await p.admit({ sessionId: "a", path: "/tool", episode: episodeId("a") });
    p.closeAdmission(prepare);
    const report = p.readiness();
    expect(report.ready).toBe(true);
    expect(report.restarts).toEqual(["a", "b"]);
    expect(report.counts.inflight).toBe(2);
    // Tool calls keep running; only session starts wait.
    (await p.admit({ sessionId: "a", path: "/tool", episode: episodeId("a") })).finish();
    let seeded = false;
    void p.admit({ sessionId: "c", path: "/seed_session", episode: episodeId("c") }).then((t) => {
      seeded = true;
      t.finish();
    });
    await flush();
    expect(seeded).toBe(false);
    expect(await p.export(null, signal())).toEqual([]);
    inflight.finish();
    tool.finish();
    p.openAdmission();
    await flush();
    expect(seeded).toBe(true);
  });

  it("a seed waiting for resume waits again when a new checkpoint closes admission first", async () => {
    const p = make();
    p.closeAdmission(prepare);
    let seeded = false;
    void p.admit({ sessionId: "c", path: "/seed_session", episode: r0 }).then((t) => {
      seeded = true;
      t.finish();
    });
    p.openAdmission();
    p.closeAdmission({ checkpoint_id: "c2", deadline_ts: 0 });
    await flush();
    expect(seeded).toBe(false);
    p.openAdmission();
    await flush();
    expect(seeded).toBe(true);
  });

  it("stateless and exported: a request in flight blocks readiness", async () => {
    for (const mode of ["stateless", "exported"] as const) {
      const p = make({ mode, ...counterHooks() });
      await seed(p, "s", r0);
      const t = await p.admit({ sessionId: "s", path: "/tool", episode: r0 });
      p.closeAdmission(prepare);
      expect(p.ready()).toBe(false);
      t.finish();
      expect(p.ready()).toBe(true);
    }
  });

  it("a request in flight on a restart carried from an earlier stage does not block", async () => {
    const p = make({ mode: "exported", ...counterHooks() });
    await seed(p, "s", r0);
    const t = await p.admit({ sessionId: "s", path: "/tool", episode: r0 });
    p.closeAdmission({ ...prepare, restarts: ["r"] });
    expect(p.ready()).toBe(true);
    expect(await p.export(null, signal())).toEqual([]);
    t.finish();
  });

  it("stateless exports nothing", async () => {
    const p = make({ mode: "stateless" });
    await seed(p, "s", r0);
    p.closeAdmission(prepare);
    expect(await p.export(null, signal())).toEqual([]);
  });

  it("exported: exports sessions in scope, drops one missing from the hook result", async () => {
    const c = counterHooks();
    const p = make({ mode: "exported", hooks: c.hooks });
    await seed(p, "a", episodeId("a"));
    await seed(p, "b", episodeId("b"));
    await seed(p, "gone", episodeId("g"));
    c.counts.set("a", 3);
    c.counts.set("b", 4);
    p.closeAdmission(prepare);
    const scoped = await p.export([episodeId("a"), episodeId("g")], signal());
    expect(scoped).toEqual([
      {
        episode_id: { rollout_id: "a", attempt: 0 },
        session_id: "a",
        state: { count: 3 },
        owner: null,
      },
    ]);
    expect(p.isOpen("gone")).toBe(false);
    expect((await p.export(null, signal())).map((r) => r.session_id)).toEqual(["a", "b"]);
  });

  it("exported: an export as a Map or assigned into {} keeps prototype-named sessions, and a left-out one is dropped", async () => {
    const names = ["__proto__", "constructor", "toString"];
    const exportAs = async (build: (ids: readonly string[]) => unknown) => {
      const p = make({
        mode: "exported",
        hooks: {
          exportSessionStates: ({ sessionIds }) =>
            Promise.resolve(build(sessionIds) as Record<string, JsonValue>),
        },
      });
      for (const name of names) await seed(p, name, episodeId(`r${name}`));
      p.closeAdmission(prepare);
      const records = await p.export(null, signal());
      return { p, states: records.map((r) => [r.session_id, r.state]) };
    };
    const map = await exportAs((ids) => new Map(ids.map((id) => [id, { id }])));
    expect(map.states).toEqual(names.map((id) => [id, { id }]));
    // Plain assignment: `out.__proto__ = {…}` sets the prototype; the SDK reads it back.
    const plain = await exportAs((ids) => {
      const out: Record<string, JsonValue> = {};
      for (const id of ids) if (id !== "toString") out[id] = { id };
      return out;
    });
    expect(plain.states).toEqual([
      ["__proto__", { id: "__proto__" }],
      ["constructor", { id: "constructor" }],
    ]);
    // Left out, not read as the inherited Object.prototype.toString: dropped.
    expect(plain.p.isOpen("toString")).toBe(false);
  });

  it("exported: records follow capture-key order, sessions of one attempt by session ID", async () => {
    const c = counterHooks();
    const asked: string[][] = [];
    const hooks = {
      ...c.hooks,
      exportSessionStates: (input: { sessionIds: readonly string[] }) => {
        asked.push([...input.sessionIds]);
        return c.hooks.exportSessionStates(input);
      },
    };
    const p = make({ mode: "exported", hooks });
    // Opened out of key order: "z" first, then a later attempt before an earlier rollout.
    const opened: [string, EpisodeId][] = [
      ["s-z", episodeId("z")],
      ["s-b2", episodeId("b", 2)],
      ["s-a", episodeId("a")],
      ["s-b-second", episodeId("b")],
      ["s-b-first", episodeId("b")],
    ];
    for (const [sid, e] of opened) {
      await seed(p, sid, e);
      c.counts.set(sid, 1);
    }
    p.closeAdmission(prepare);
    const inOrder = ["s-a", "s-b-first", "s-b-second", "s-b2", "s-z"];
    expect((await p.export(null, signal())).map((r) => r.session_id)).toEqual(inOrder);
    // A scope in any order, with a repeat and an episode held nowhere, walks to the same order.
    const scope = [
      episodeId("z"),
      episodeId("b"),
      episodeId("q"),
      episodeId("b", 2),
      episodeId("z"),
    ];
    const scoped = await p.export(scope, signal());
    expect(scoped.map((r) => r.session_id)).toEqual(["s-b-first", "s-b-second", "s-b2", "s-z"]);
    expect(asked).toEqual([inOrder, ["s-b-first", "s-b-second", "s-b2", "s-z"]]);
    // A held rollout whose held attempt is not in scope; a scope already in key order.
    const onlyB = await p.export([episodeId("b")], signal());
    expect(onlyB.map((r) => r.session_id)).toEqual(["s-b-first", "s-b-second"]);
    const sorted = [episodeId("a"), episodeId("b"), episodeId("b", 2)];
    const ascending = await p.export(sorted, signal());
    expect(ascending.map((r) => r.session_id)).toEqual(["s-a", "s-b-first", "s-b-second", "s-b2"]);
  });

  it("exported: a scoped export leaves out fenced sessions and restarts carried from a stage", async () => {
    const c = counterHooks();
    const p = make({ mode: "exported", hooks: c.hooks });
    for (const [sid, e] of [
      ["s-a", episodeId("a")],
      ["s-b", episodeId("b")],
      ["s-z", episodeId("z")],
    ] as const) {
      await seed(p, sid, e);
      c.counts.set(sid, 1);
    }
    p.markRetired([episodeId("b")]);
    p.closeAdmission({ ...prepare, restarts: ["z"] });
    const scope = [episodeId("a"), episodeId("b"), episodeId("z")];
    expect((await p.export(scope, signal())).map((r) => r.session_id)).toEqual(["s-a"]);
  });

  it("holding no session, exports without looking at a single scope entry", async () => {
    // Every entry read throws: a server holding nothing must answer from its own state alone.
    const untouchable = new Proxy([episodeId("a"), episodeId("b")], {
      get(target, property, receiver) {
        if (typeof property === "string" && /^\d+$/.test(property)) {
          throw new Error(`scope entry ${property} read`);
        }
        return Reflect.get(target, property, receiver) as unknown;
      },
    });
    for (const mode of ["stateless", "exported", "restart_only"] as const) {
      const p = make({ mode });
      p.closeAdmission(prepare);
      expect(await p.export(untouchable, signal())).toEqual([]);
    }
  });
});

describe("ResourcesParticipant restore", () => {
  const record = {
    episode_id: { rollout_id: "r", attempt: 0 } as EpisodeId,
    session_id: "s",
    state: { count: 2 },
    owner: null,
  };

  it("installs each session under its next attempt, pending until a request claims it", async () => {
    const c = counterHooks();
    const p = make({ mode: "exported", hooks: c.hooks });
    p.markRetired([r0]);
    p.closeAdmission({ ...prepare, checkpoint_dir: "/x", episode_ids: [r0] });
    await p.install([record], [r0], signal());
    expect(c.counts.get("s")).toBe(2);
    expect(p.restoredPending()).toEqual([r1]);
    p.openAdmission();
    // The cookie alone cannot tell the replacement from the replaced attempt.
    expect(await code(p.admit({ sessionId: "s", path: "/tool", episode: null }))).toBe(
      "rollout_id_required",
    );
    expect(await code(p.admit({ sessionId: "s", path: "/close_session", episode: r0 }))).toBe(
      "stale_attempt",
    );
    expect(p.restoredPending()).toEqual([r1]);
    (await p.admit({ sessionId: "s", path: "/tool", episode: r1 })).finish();
    expect(p.restoredPending()).toEqual([]);
  });

  it("binds every restored session, then wakes a waiting prepare once", async () => {
    const c = counterHooks();
    const p = make({ mode: "exported", hooks: c.hooks });
    const records = Array.from({ length: 50 }, (_, i) => ({
      ...record,
      episode_id: { rollout_id: `r${i}`, attempt: 0 } as EpisodeId,
      session_id: `s${i}`,
    }));
    let notified = 0;
    p.onChange = () => (notified += 1);
    await p.install(records, [], signal());
    expect(notified).toBe(1);
    expect(p.restoredPending()).toHaveLength(50);
  });

  it("refuses a restore into a process that has sessions, and records into restart_only", async () => {
    const busy = make({ mode: "exported", ...counterHooks() });
    await seed(busy, "x", r0);
    expect(await code(busy.install([record], [r0], signal()))).toBe("checkpoint_error");
    expect(await code(make().install([record], [r0], signal()))).toBe("checkpoint_error");
    expect(await code(make().install([], [r0], signal()))).toBe("ok");
  });

  it("deleteRestored frees unclaimed restored sessions without a retire mark", async () => {
    const c = counterHooks();
    const p = make({ mode: "exported", hooks: c.hooks });
    await p.install([record], [r0], signal());
    await p.deleteRestored(r1, signal());
    expect(c.retired).toEqual(["s"]);
    expect(p.restoredPending()).toEqual([]);
    p.openAdmission();
    expect(await code(seed(p, "s2", r1))).toBe("ok");
  });
});

describe("ResourcesParticipant retire and forget", () => {
  it("marking fences the attempt's sessions at once; retire drains, then frees in every mode", async () => {
    for (const mode of ["restart_only", "stateless", "exported"] as const) {
      const c = counterHooks();
      const p = make({ mode, hooks: c.hooks });
      await seed(p, "s", r0);
      const t = await p.admit({ sessionId: "s", path: "/tool", episode: r0 });
      p.markRetired([r0]);
      expect(await code(p.admit({ sessionId: "s", path: "/tool", episode: null }))).toBe(
        "stale_attempt",
      );
      expect(p.statusExtra()).toMatchObject({ retired_sessions: 1, mode });
      const retiring = p.retire(r0, signal());
      await flush();
      expect(c.retired).toEqual([]); // waits for the request in flight
      expect(await code(() => p.checkForget(["r"]))).toBe("retire_incomplete");
      t.finish();
      await retiring;
      expect(c.retired).toEqual(["s"]);
      expect(p.readiness().ready).toBe(true);
      p.checkForget(["r"]);
      p.forget(["r"]);
      expect(p.statusExtra()).toMatchObject({ retired_sessions: 0 });
    }
  });

  it("a close from the retired attempt still goes through", async () => {
    const p = make();
    await seed(p, "s", r0);
    p.markRetired([r0]);
    expect(await code(p.admit({ sessionId: "s", path: "/close_session", episode: r0 }))).toBe("ok");
  });

  it("a retire cut short leaves the session tracked, blocking and refused until a retry frees it", async () => {
    const c = counterHooks();
    let fail = true;
    const p = make({
      mode: "exported",
      hooks: {
        ...c.hooks,
        retireSessionState: async (input) => {
          if (fail) throw new Error("sandbox busy");
          await c.hooks.retireSessionState(input);
        },
      },
    });
    await seed(p, "s", r0);
    p.markRetired([r0]);
    await expect(p.retire(r0, signal())).rejects.toThrow("sandbox busy");
    expect(p.readiness()).toMatchObject({ ready: false, blockers: ["r"] });
    expect(await p.export(null, signal())).toEqual([]);
    expect(await code(() => p.checkForget(["r"]))).toBe("retire_incomplete");
    fail = false;
    await p.retire(r0, signal());
    expect(p.ready()).toBe(true);
    p.checkForget(["r"]);
  });

  it("retire waits for an admitted seed and frees the session it creates", async () => {
    const c = counterHooks();
    const p = make({ mode: "exported", hooks: c.hooks });
    const t = await p.admit({ sessionId: "s", path: "/seed_session", episode: r0 });
    p.markRetired([r0]);
    expect(await code(() => p.checkForget(["r"]))).toBe("retire_incomplete");
    const retiring = p.retire(r0, signal());
    c.counts.set("s", 0);
    t.responseStarted({ status: 200, sessionId: "s", closeFollows: false });
    expect(p.isOpen("s")).toBe(false); // registered as retired at once
    t.finish();
    await retiring;
    expect(c.retired).toEqual(["s"]);
  });

  it("a seed still waiting for resume when marked is refused once admitted", async () => {
    const p = make();
    p.closeAdmission(prepare);
    const waiting = code(p.admit({ sessionId: "s", path: "/seed_session", episode: r0 }));
    p.markRetired([r0]);
    await p.retire(r0, signal()); // not held up by the waiting seed
    p.openAdmission();
    expect(await waiting).toBe("stale_attempt");
  });
});
