/**
 * A restore on a multi-worker server: the coordinator reads the checkpoint's lines without
 * validating them and hands each worker its share as stored; each worker validates its own.
 * A bad record is still refused as one process refuses it (422 `invalid_checkpoint_state`
 * naming the episode), and good ones land on the worker their owner is placed on.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { WorkerLink } from "#sdk/workers/worker-link.js";
import { WorkerPool } from "#sdk/workers/worker-pool.js";
import { coordinate } from "#sdk/workers/coordinate.js";
import { GymError } from "#sdk/errors.js";
import { episodeId, fromCaptureKey, type EpisodeId } from "#sdk/identity/episode-id.js";
import { captureKeysOf } from "#sdk/identity/scope-keys.js";
import { writeRecordsAs } from "../../support/craft-checkpoint.js";
import { TestParticipant, commitReq, req, restoreReq } from "../../support/test-participant.js";

const cleanups: (() => void | Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function tempDir(): string {
  const dir = mkdtempSync(path.join(tmpdir(), "ng-stored-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * A coordinator's control plane over `count` in-process workers, each a TestParticipant; the
 * coordinator's pure hooks are `prototype`'s.
 */
async function server(count: number, prototype: TestParticipant = new TestParticipant()) {
  const socketDir = tempDir();
  const socket = path.join(socketDir, "c.sock");
  const pool = new WorkerPool(count);
  const { controlPlane: plane } = coordinate(pool, prototype, {
    instance: "inst",
    leaseGraceSeconds: 100,
  });
  const listener: Server = createServer((s) => pool.accept(s));
  await new Promise<void>((resolve) => listener.listen(socket, resolve));
  const workers: TestParticipant[] = [];
  const links: WorkerLink[] = [];
  for (let index = 0; index < count; index++) {
    const link = await WorkerLink.connect({ coordinator: socket, index, count, socketDir });
    const participant = new TestParticipant();
    await link.register(participant);
    await link.listening();
    workers.push(participant);
    links.push(link);
  }
  cleanups.push(async () => {
    for (const link of links) link.close();
    plane.close();
    pool.shutdown();
    await new Promise<void>((resolve) => listener.close(() => resolve()));
  });
  return { plane, workers };
}

/** A checkpoint of `records` as stored (the writer does not validate). */
async function checkpoint(records: readonly object[]): Promise<string> {
  const dir = tempDir();
  await writeRecordsAs(dir, "inst", records);
  return dir;
}

describe("restore through a coordinator", () => {
  it("refuses a bad stored record where a worker validates it, typed as one process refuses it", async () => {
    const { plane, workers } = await server(2);
    const dir = await checkpoint([
      { episode_id: episodeId("a", 0), owner: "old-1", payload: { n: 1 } },
      { episode_id: episodeId("b", 0), owner: "old-1", payload: { n: 2 } },
      { episode_id: episodeId("c", 0), owner: "old-2", payload: { n: 3 } },
    ]);
    // The coordinator places the lines by the owner it reads; the test participant's strict
    // schema knows no `owner` field, so the workers refuse them.
    const refused = await plane
      .restore(restoreReq("c1", dir, ["a", "b", "c"]))
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(GymError);
    expect((refused as GymError).code).toBe("invalid_checkpoint_state");
    expect((refused as GymError).message).toMatch(
      /checkpoint record of episode '(a|b|c)' is invalid/,
    );
    expect(workers.every((w) => w.pending.size === 0)).toBe(true);
  });

  it("installs valid stored lines on one worker per owner group", async () => {
    const { plane, workers } = await server(2);
    const dir = await checkpoint([
      { episode_id: episodeId("a", 0), payload: { n: 1 } },
      { episode_id: episodeId("b", 0), payload: { n: 2 } },
    ]);
    const reply = await plane.restore(restoreReq("c1", dir, ["a", "b"]));
    expect(reply.restored).toEqual(["a-a1", "b-a1"]);
    // One-process records name no owner: one group, on one worker, validated there.
    const pending = workers.map((w) => [...w.pending.keys()].sort());
    expect(pending.sort((x, y) => y.length - x.length)).toEqual([["a-a1", "b-a1"], []]);
    const installed = workers.flatMap((w) => [...w.pending.values()].map((p) => p.payload));
    expect(installed).toEqual([{ n: 1 }, { n: 2 }]);
  });
});

/** A participant holding each `payload.session` once, as a resources server holds sessions. */
class SessionKeyed extends TestParticipant {
  recordIdentity(record: { payload: unknown }): { what: string; key: string } | null {
    const session = (record.payload as { session?: unknown } | null)?.session;
    return typeof session === "string" ? { what: "session", key: session } : null;
  }
}

/** A participant whose records wait for the request of their replacement, as an environment's. */
class RequestScoped extends TestParticipant {
  claimKey(record: { episode_id: EpisodeId }): string {
    return `${record.episode_id.rollout_id}-a${record.episode_id.attempt + 1}`;
  }
}

describe("a checkpoint holding one thing twice, restored through a coordinator", () => {
  it.each([
    [
      "one session claimed by two episodes",
      () => new SessionKeyed(),
      [
        { episode_id: episodeId("a", 0), payload: { session: "s1", n: 1 } },
        { episode_id: episodeId("b", 0), payload: { session: "s1", n: 2 } },
      ],
      "session 's1' twice (episodes 'a' and 'b')",
    ],
    [
      "one session twice in one episode",
      () => new SessionKeyed(),
      [
        { episode_id: episodeId("a", 0), payload: { session: "s1", n: 1 } },
        { episode_id: episodeId("a", 0), payload: { session: "s1", n: 5 } },
      ],
      "session 's1' twice (episode 'a')",
    ],
    [
      "one request-scoped episode twice",
      () => new RequestScoped(),
      [
        { episode_id: episodeId("a", 0), payload: { n: 1 } },
        { episode_id: episodeId("a", 0), payload: { n: 5 } },
      ],
      "episode 'a' twice",
    ],
  ])(
    "refuses %s with 422 before any worker installs, holds nothing",
    async (_, prototype, records, named) => {
      const { plane, workers } = await server(2, prototype());
      const dir = await checkpoint(records);
      const refused = await plane
        .restore(restoreReq("c1", dir, ["a", "b"]))
        .catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(GymError);
      expect((refused as GymError).code).toBe("invalid_checkpoint_state");
      expect((refused as GymError).message).toContain(named);
      for (const worker of workers) {
        expect(worker.callsOf("install")).toEqual([]);
        expect(worker.pending.size).toBe(0);
      }
      // Nothing is held for a claim either: the coordinator lists no restored episode.
      expect(plane.status().restored_pending).toBeUndefined();
    },
  );
});

describe("scopes sent to the workers", () => {
  it("reach every worker as the request named them (order and duplicates kept), for export, install and marks", async () => {
    const { plane, workers } = await server(2);
    const dir = await checkpoint([{ episode_id: episodeId("a", 0), payload: { n: 1 } }]);
    const named = ["b", "a", "c-a2", "a"];
    await plane.restore(restoreReq("c1", dir, named));
    for (const worker of workers) {
      const [install] = worker.callsOf("install");
      const scope = install?.args[1] as readonly EpisodeId[];
      expect(scope).toEqual(named.map(fromCaptureKey));
      // Decoded from keys, the scope is keyed already: its keys are the ones sent.
      expect(captureKeysOf(scope)).toEqual(named);
      expect(worker.retired.markOf("c")).toBe(2);
      expect(worker.retired.markOf("a")).toBe(0);
    }
    await plane.resume(req("c1"));
    await plane.prepare(req("c2"));
    await plane.commit(commitReq("c2", path.join(tempDir(), "out"), ["z-a1", "a-a1", "z-a1"]));
    for (const worker of workers) {
      expect(worker.detailsOf("export")).toEqual([JSON.stringify(["z-a1", "a-a1", "z-a1"])]);
    }
  });
});
