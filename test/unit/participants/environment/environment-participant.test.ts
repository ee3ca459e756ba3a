import { describe, expect, it, vi } from "vitest";
import { CheckpointStateError, GymError } from "#sdk/errors.js";
import { encodeRecordLine } from "#sdk/store/records-writer.js";
import { episodeId } from "#sdk/identity/episode-id.js";
import {
  EnvironmentParticipant,
  type AdmittedEpisode,
  type EnvironmentRecord,
} from "#sdk/participants/environment/environment-participant.js";
import { taskDigest } from "#sdk/participants/environment/task-digest.js";
import type { PrepareRequest } from "#sdk/wire/control.js";

const TASK = { task_id: { taskset: "t", task_id: "1" }, task_input: { n: 1 } };
const OTHER = { task_id: { taskset: "t", task_id: "2" }, task_input: { n: 2 } };
const PREPARE = { checkpoint_id: "c1", deadline_ts: 0 } as PrepareRequest;
const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

function codeOf(fn: () => unknown): string | null {
  try {
    fn();
    return null;
  } catch (error) {
    return error instanceof GymError ? error.code : String(error);
  }
}

function begin(p: EnvironmentParticipant, key: string, task: unknown = TASK, restart = false) {
  const [rollout, attempt] = key.includes("-a") ? key.split("-a") : [key, "0"];
  return p.begin({ episode: episodeId(rollout as string, Number(attempt)), task, restart });
}

describe("EnvironmentParticipant", () => {
  it("is kind environment and keys episodes by capture key", () => {
    const p = new EnvironmentParticipant();
    expect(p.kind).toBe("environment");
    const e = begin(p, "r-a2");
    expect(e.captureKey).toBe("r-a2");
    expect(p.steps.has("r-a2")).toBe(true);
    e.end();
    expect(p.steps.has("r-a2")).toBe(false);
  });

  it("exports boundaries without walking them: the records writer checks each once, naming the path", async () => {
    const p = new EnvironmentParticipant();
    const live = begin(p, "r-a2");
    p.closeAdmission(PREPARE);
    const turns = Array.from({ length: 50 }, (_, i) => ({ turn: i, text: `t${i}` }));
    const parked = live.boundary({ next: "verify", turns, at: new Date(0) } as never);
    await tick();
    const values = vi.spyOn(Object, "values");
    let records;
    try {
      records = await p.export(null, new AbortController().signal);
      // Not one of the boundary's 52 objects was walked at export.
      expect(values.mock.calls.length).toBe(0);
    } finally {
      values.mockRestore();
    }
    expect(records).toHaveLength(1);
    let refused: unknown;
    try {
      encodeRecordLine(records[0] as EnvironmentRecord);
    } catch (error) {
      refused = error;
    }
    expect(refused).toBeInstanceOf(CheckpointStateError);
    expect((refused as CheckpointStateError).status).toBe(422);
    expect((refused as CheckpointStateError).captureKey).toBe("r-a2");
    expect((refused as CheckpointStateError).detail).toMatch(
      /episode 'r-a2' is not JSON: \$\.boundary\.at: a Date is not JSON/,
    );
    p.openAdmission();
    await parked;
    live.end();
  });

  it("refuses a duplicate /run without touching the live episode", async () => {
    const p = new EnvironmentParticipant();
    const live = begin(p, "r");
    expect(codeOf(() => begin(p, "r"))).toBe("checkpoint_error");
    expect(live.signal.aborted).toBe(false);
    p.closeAdmission(PREPARE);
    expect(p.readiness().blockers).toEqual(["r"]);
    const parked = live.boundary({ next: "seed" });
    await tick();
    expect(p.ready()).toBe(true);
    expect(await p.export(null, new AbortController().signal)).toEqual([
      {
        episode_id: { rollout_id: "r", attempt: 0 },
        task_digest: taskDigest(TASK),
        boundary: { next: "seed" },
      },
    ]);
    p.openAdmission();
    await parked;
    live.end();
  });

  it("parks a running episode at its next boundary and exports the latest boundary", async () => {
    const p = new EnvironmentParticipant();
    const e = begin(p, "r");
    await e.boundary({ next: "seed" });
    p.closeAdmission(PREPARE);
    expect(p.ready()).toBe(false);
    let passed = false;
    const at = e.boundary({ next: "verify" }).then(() => (passed = true));
    await tick();
    expect(p.ready()).toBe(true);
    expect(passed).toBe(false);
    expect((await p.export(null, new AbortController().signal)).map((r) => r.boundary)).toEqual([
      { next: "verify" },
    ]);
    p.openAdmission();
    await at;
    expect(passed).toBe(true);
    e.end();
  });

  it("exports an episode with no boundary yet as null (start over)", async () => {
    const p = new EnvironmentParticipant();
    const e = begin(p, "r");
    let release!: () => void;
    const step = e.step("replay", () => new Promise<void>((resolve) => (release = resolve)));
    p.closeAdmission(PREPARE);
    expect(p.ready()).toBe(true);
    expect(await p.export(null, new AbortController().signal)).toEqual([
      expect.objectContaining({ episode_id: { rollout_id: "r", attempt: 0 }, boundary: null }),
    ]);
    release();
    await step;
    p.openAdmission();
    e.end();
  });

  it("builds boundary payloads lazily, and never for a restart", async () => {
    const p = new EnvironmentParticipant();
    let built = 0;
    const restart = begin(p, "x", TASK, true);
    await restart.boundary(() => (built++, { next: "seed" }));
    expect(built).toBe(0);
    const e = begin(p, "r");
    await e.boundary(() => (built++, { next: "seed" }));
    expect(built).toBe(1);
    restart.end();
    e.end();
  });

  it("lists restarts, which never block, park or export", async () => {
    const p = new EnvironmentParticipant();
    const e = begin(p, "x", TASK, true);
    p.closeAdmission(PREPARE);
    expect(p.readiness()).toMatchObject({ ready: true, restarts: ["x"] });
    await e.boundary({ next: "seed" }); // does not park
    expect(await p.export(null, new AbortController().signal)).toEqual([]);
    p.openAdmission();
    e.end();
    expect(p.readiness().restarts).toEqual([]);
  });

  it("marks an episode a restart on request once no checkpoint is open", async () => {
    const p = new EnvironmentParticipant();
    const e = begin(p, "r");
    await e.markRestart();
    expect(p.readiness().restarts).toEqual(["r"]);
    e.end();
  });

  describe("restore", () => {
    const record = (boundary: unknown) => ({
      episode_id: episodeId("r", 0),
      task_digest: taskDigest(TASK),
      boundary: boundary as never,
    });

    async function restored(boundary: unknown = { next: "verify" }) {
      const p = new EnvironmentParticipant();
      p.closeAdmission(PREPARE);
      await p.install([record(boundary)], [episodeId("r", 0)], new AbortController().signal);
      return p;
    }

    it("refuses a checkpoint holding one episode twice, installing nothing", async () => {
      const p = new EnvironmentParticipant();
      p.closeAdmission(PREPARE);
      const twice = [record({ next: "verify" }), record({ next: "done" })];
      const refused = await p
        .install(twice, [episodeId("r", 0)], new AbortController().signal)
        .catch((error: unknown) => error);
      expect((refused as GymError).code).toBe("invalid_checkpoint_state");
      expect((refused as CheckpointStateError).captureKey).toBe("r");
      expect((refused as Error).message).toContain("episode 'r' twice");
      expect(p.restoredPending()).toEqual([]);
    });

    it("installs under the next attempt and reports it pending", async () => {
      const p = await restored();
      expect(p.statusExtra()).toEqual({ restored_pending: ["r-a1"] });
      expect(p.restoredPending()).toEqual([episodeId("r", 1)]);
    });

    it("refuses the replacement with admission_closed until resume, then hands it the boundary once", async () => {
      const p = await restored();
      expect(codeOf(() => begin(p, "r-a1"))).toBe("admission_closed");
      p.openAdmission();
      const e = begin(p, "r-a1");
      expect(e.continuation()).toEqual({ next: "verify" });
      expect(e.continuation()).toBeNull();
      expect(p.restoredPending()).toEqual([]);
      e.end();
    });

    it("refuses a replacement for another task and keeps the record", async () => {
      const p = await restored();
      p.openAdmission();
      expect(codeOf(() => begin(p, "r-a1", OTHER))).toBe("checkpoint_error");
      expect(p.restoredPending()).toEqual([episodeId("r", 1)]);
    });

    it("hands out no continuation for a null boundary", async () => {
      const p = await restored(null);
      p.openAdmission();
      const e = begin(p, "r-a1");
      expect(e.continuation()).toBeNull();
      e.end();
    });

    it("admits the unclaimed replacement during a later checkpoint and parks it at its first boundary", async () => {
      const p = await restored();
      p.openAdmission();
      p.closeAdmission(PREPARE);
      expect(codeOf(() => begin(p, "other"))).toBe("admission_closed");
      const e = begin(p, "r-a1");
      expect(p.ready()).toBe(false);
      const at = e.boundary(e.continuation() as never);
      await tick();
      expect(p.ready()).toBe(true);
      expect((await p.export(null, new AbortController().signal)).map((r) => r.boundary)).toEqual([
        { next: "verify" },
      ]);
      p.openAdmission();
      await at;
      e.end();
    });

    it("exports an unclaimed restored episode again while the scope continues it", async () => {
      const p = await restored();
      p.openAdmission();
      p.closeAdmission(PREPARE);
      expect(await p.export([episodeId("r", 1)], new AbortController().signal)).toEqual([
        {
          episode_id: { rollout_id: "r", attempt: 1 },
          task_digest: taskDigest(TASK),
          boundary: { next: "verify" },
        },
      ]);
      expect(await p.export([episodeId("s", 0)], new AbortController().signal)).toEqual([]);
      await p.deleteRestored(episodeId("r", 1), new AbortController().signal);
      expect(p.restoredPending()).toEqual([]);
      // Deleting marks nothing: the rollout may start over as that very attempt.
      p.openAdmission();
      begin(p, "r-a1").end();
    });

    it("refuses to restore into a participant holding episodes", async () => {
      const p = new EnvironmentParticipant();
      const e = begin(p, "busy");
      await expect(p.install([record(null)], [], new AbortController().signal)).rejects.toThrow(
        /fresh process/,
      );
      e.end();
    });
  });

  it("exports only scoped live episodes on commit", async () => {
    const p = new EnvironmentParticipant();
    const a = begin(p, "a");
    const b = begin(p, "b");
    p.closeAdmission(PREPARE);
    const parked = [a.boundary({ s: "a" }), b.boundary({ s: "b" })];
    await tick();
    expect(
      (await p.export([episodeId("b", 0)], new AbortController().signal)).map(
        (r) => r.episode_id.rollout_id,
      ),
    ).toEqual(["b"]);
    expect(
      (await p.export(null, new AbortController().signal)).map((r) => r.episode_id.rollout_id),
    ).toEqual(["a", "b"]);
    p.openAdmission();
    await Promise.all(parked);
    a.end();
    b.end();
  });

  it("exports a scope in capture-key order, each episode once, whatever the scope's order", async () => {
    const p = new EnvironmentParticipant();
    const live = ["r2", "r10", "r1-a2", "r1", "out"].map((key) => begin(p, key));
    p.closeAdmission(PREPARE);
    const parked = live.map((e) => e.boundary({ s: e.captureKey }));
    await tick();
    const scope = ["r2", "r1-a2", "r10", "r1", "r2", "absent"].map((key) => {
      const [rollout, attempt] = key.includes("-a") ? key.split("-a") : [key, "0"];
      return episodeId(rollout as string, Number(attempt));
    });
    const records = await p.export(scope, new AbortController().signal);
    expect(records.map((r) => r.boundary)).toEqual([
      { s: "r1" },
      { s: "r1-a2" },
      { s: "r10" },
      { s: "r2" },
    ]);
    p.openAdmission();
    await Promise.all(parked);
    for (const e of live) e.end();
  });

  describe("retire", () => {
    it("aborts the episode, waits for its end, and fences late /runs until forget", async () => {
      const p = new EnvironmentParticipant();
      const e = begin(p, "r");
      let ended: AdmittedEpisode | null = null;
      e.signal.addEventListener("abort", () => {
        setImmediate(() => {
          e.end();
          ended = e;
        });
      });
      p.markRetired([episodeId("r", 0)]);
      await p.retire(episodeId("r", 0), new AbortController().signal);
      expect(ended).toBe(e);
      expect(codeOf(() => begin(p, "r"))).toBe("stale_attempt");
      expect(begin(p, "r-a1").captureKey).toBe("r-a1"); // a later attempt runs
      p.forget(["r"]);
      expect(begin(p, "r").captureKey).toBe("r"); // the mark is gone: r runs again
    });

    it("never cancels an episode whose final cleanup started, and waits for it", async () => {
      const p = new EnvironmentParticipant();
      const e = begin(p, "r");
      e.finishing();
      let done = false;
      const retire = p
        .retire(episodeId("r", 0), new AbortController().signal)
        .then(() => (done = true));
      await tick();
      expect(e.signal.aborted).toBe(false);
      expect(done).toBe(false);
      e.end();
      await retire;
    });

    it("keeps an episode whose retire was cut short tracked and blocking", async () => {
      const p = new EnvironmentParticipant();
      const e = begin(p, "r");
      const cut = new AbortController();
      const retire = p.retire(episodeId("r", 0), cut.signal);
      cut.abort(new Error("deadline"));
      await expect(retire).rejects.toThrow("deadline");
      p.closeAdmission(PREPARE);
      expect(p.readiness()).toMatchObject({ ready: false, blockers: ["r"] });
      expect(await p.export(null, new AbortController().signal)).toEqual([]);
      p.openAdmission();
      e.end();
    });

    it("drops restored records it covers", async () => {
      const p = new EnvironmentParticipant();
      p.closeAdmission(PREPARE);
      await p.install(
        [{ episode_id: episodeId("r", 0), task_digest: taskDigest(TASK), boundary: null }],
        [],
        new AbortController().signal,
      );
      p.openAdmission();
      await p.retire(episodeId("r", 1), new AbortController().signal);
      expect(p.restoredPending()).toEqual([]);
    });
  });
});
