import { afterEach, describe, expect, it, vi } from "vitest";
import { episodeId, type EpisodeId } from "#sdk/identity/episode-id.js";
import { GymError } from "#sdk/errors.js";
import {
  ResourcesParticipant,
  type ResourcesRecord,
} from "#sdk/participants/resources/resources-participant.js";

const prepare = { checkpoint_id: "c1", deadline_ts: 0 };
const signal = () => new AbortController().signal;

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

function recordingHooks() {
  const retired: string[] = [];
  return {
    retired,
    hooks: {
      exportSessionStates: ({ sessionIds }: { sessionIds: readonly string[] }) =>
        Promise.resolve(Object.fromEntries(sessionIds.map((id) => [id, { id }]))),
      restoreSessionStates: () => Promise.resolve(),
      retireSessionState: ({ sessionId }: { sessionId: string }) => {
        retired.push(sessionId);
        return Promise.resolve();
      },
    },
  };
}

/**
 * Records the size of every Map or Set iterated while `work` runs: a scan of every session
 * shows up as an iteration of a collection at least as large as the session count.
 */
async function largestIterated(work: () => Promise<void> | void): Promise<number> {
  const sizes: number[] = [];
  const spies = [Map.prototype, Set.prototype].flatMap((proto) =>
    (["entries", "keys", "values", "forEach", Symbol.iterator] as const).map((name) => {
      const original = (proto as unknown as Record<PropertyKey, (...a: unknown[]) => unknown>)[
        name
      ] as (...a: unknown[]) => unknown;
      return vi
        .spyOn(proto as unknown as Record<PropertyKey, (...a: unknown[]) => unknown>, name as never)
        .mockImplementation(function (
          this: Map<unknown, unknown> | Set<unknown>,
          ...args: unknown[]
        ) {
          sizes.push(this.size);
          return original.apply(this, args);
        } as never);
    }),
  );
  try {
    await work();
  } finally {
    for (const spy of spies) spy.mockRestore();
  }
  return Math.max(0, ...sizes);
}

afterEach(() => {
  vi.restoreAllMocks();
});

const MANY = 500;

describe("retire and delete cost as much as the rollout's own sessions", () => {
  it("retiring one rollout calls the hook only for its sessions and scans no other", async () => {
    const h = recordingHooks();
    const p = new ResourcesParticipant({ mode: "exported", hooks: h.hooks });
    for (let i = 0; i < MANY; i++) await seed(p, `s${i}`, episodeId(`r${i}`));
    await seed(p, "mine-1", episodeId("target"));
    await seed(p, "mine-2", episodeId("target"));
    await seed(p, "later", episodeId("target", 2));
    const target = episodeId("target", 1);
    const largest = await largestIterated(async () => {
      p.markRetired([target]);
      await p.retire(target, signal());
      p.checkForget(["target"]);
    });
    expect(h.retired.sort()).toEqual(["mine-1", "mine-2"]);
    expect(largest).toBeLessThan(MANY);
    expect(p.isOpen("later")).toBe(true);
  });

  it("deleting one rollout's restored sessions does not scan every restored session", async () => {
    const h = recordingHooks();
    const p = new ResourcesParticipant({ mode: "exported", hooks: h.hooks });
    const records: ResourcesRecord[] = [];
    for (let i = 0; i < MANY; i++) {
      records.push({
        episode_id: episodeId(`r${i}`, 0),
        session_id: `s${i}`,
        state: { i },
        owner: null,
      });
    }
    await p.install(records, [], signal());
    const largest = await largestIterated(() => p.deleteRestored(episodeId("r7", 1), signal()));
    expect(h.retired).toEqual(["s7"]);
    expect(largest).toBeLessThan(MANY);
    expect(p.restoredPending()).toHaveLength(MANY - 1);
  });

  it("ready() answers without building the readiness report", async () => {
    const p = new ResourcesParticipant({ mode: "stateless" });
    for (let i = 0; i < 10; i++) await seed(p, `s${i}`, episodeId(`r${i}`));
    p.closeAdmission(prepare);
    const readiness = vi.spyOn(p, "readiness");
    expect(p.ready()).toBe(true);
    expect(readiness).not.toHaveBeenCalled();
  });
});

describe("carried restarts", () => {
  it("a seed in flight under a carried attempt does not hold up prepare, whatever its cookie held", async () => {
    const p = new ResourcesParticipant({ mode: "stateless" });
    await seed(p, "s", episodeId("r", 0));
    // The same client seeds again as the next attempt: the request is that attempt's.
    const reseed = await p.admit({
      sessionId: "s",
      path: "/seed_session",
      episode: episodeId("r", 1),
    });
    p.closeAdmission({ ...prepare, restarts: ["r-a1"] });
    expect(p.ready()).toBe(true);
    expect(p.readiness().ready).toBe(true);
    reseed.finish();
  });

  it("carried restarts are neither blockers nor exported, and are cleared at resume", async () => {
    const h = recordingHooks();
    const p = new ResourcesParticipant({ mode: "exported", hooks: h.hooks });
    await seed(p, "a", episodeId("a"));
    await seed(p, "b", episodeId("b"));
    const t = await p.admit({ sessionId: "a", path: "/tool", episode: null });
    p.closeAdmission({ ...prepare, restarts: ["a"] });
    expect(p.ready()).toBe(true);
    expect((await p.export(null, signal())).map((r) => r.session_id)).toEqual(["b"]);
    p.openAdmission();
    p.closeAdmission(prepare);
    expect(p.ready()).toBe(false);
    t.finish();
    expect(p.ready()).toBe(true);
  });
});

describe("isOpen", () => {
  it("is true for a tracked session and false once it is fenced, ended or unknown", async () => {
    const p = new ResourcesParticipant({ mode: "exported", hooks: recordingHooks().hooks });
    await seed(p, "s", episodeId("r"));
    await seed(p, "t", episodeId("q"));
    expect(p.isOpen("s")).toBe(true);
    expect(p.isOpen("nobody")).toBe(false);
    p.markRetired([episodeId("r")]);
    expect(p.isOpen("s")).toBe(false);
    expect(p.sessionEpisode("s")).toEqual(episodeId("r"));
    p.sessionEnded("t");
    expect(p.isOpen("t")).toBe(false);
  });
});

describe("restore refusals", () => {
  const record: ResourcesRecord = {
    episode_id: episodeId("r", 0),
    session_id: "s",
    state: {},
    owner: null,
  };

  it("a restore into a process with a request in flight is refused, even a replayable one", async () => {
    const p = new ResourcesParticipant({ mode: "stateless", verify: "replay" });
    const t = await p.admit({ sessionId: "x", path: "/verify", episode: episodeId("q") });
    expect(await code(p.install([record], [], signal()))).toBe("checkpoint_error");
    t.finish();
    expect(await code(p.install([record], [], signal()))).toBe("ok");
  });
});

describe("admission never refuses for an open checkpoint", () => {
  it("a waiting request is admitted after resume even when it was signalled to wait twice", async () => {
    const p = new ResourcesParticipant({ mode: "exported", hooks: recordingHooks().hooks });
    p.closeAdmission(prepare);
    const waiting = p.admit({ sessionId: "s", path: "/tool", episode: null });
    p.openAdmission();
    p.closeAdmission({ ...prepare, checkpoint_id: "c2" });
    let admitted = false;
    void waiting.then(() => {
      admitted = true;
    });
    await Promise.resolve();
    await Promise.resolve();
    expect(admitted).toBe(false);
    p.openAdmission();
    (await waiting).finish();
    expect(p.readiness().counts.inflight).toBe(0);
  });
});
