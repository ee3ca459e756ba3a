/**
 * Request-scoped records at the coordinator of a multi-worker server: an environment episode
 * restored while no worker runs it waits there until the worker receiving its replacement
 * claims it. Workers here are channels answering like a worker that holds nothing.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { connect, createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { CoordinatedParticipant } from "#sdk/workers/coordinated-participant.js";
import { encodeExport } from "#sdk/workers/encoded-export.js";
import { FrameChannel } from "#sdk/workers/frame-channel.js";
import { WorkerPool } from "#sdk/workers/worker-pool.js";
import { GymError } from "#sdk/errors.js";
import { episodeId } from "#sdk/identity/episode-id.js";
import {
  EnvironmentParticipant,
  EnvironmentRecordSchema,
} from "#sdk/participants/environment/environment-participant.js";
import { taskDigest } from "#sdk/participants/environment/task-digest.js";
import { prepareReport } from "#sdk/wire/control.js";

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

const TASK = { task_id: { taskset: "t", task_id: "1" }, task_input: {} };

/** A coordinator with `count` registered workers that answer every call as empty workers do. */
async function coordinator(count: number): Promise<{
  participant: CoordinatedParticipant;
  workers: FrameChannel[];
}> {
  const dir = mkdtempSync(path.join(tmpdir(), "ng-claims-"));
  const file = path.join(dir, "c.sock");
  const pool = new WorkerPool(count);
  const participant = new CoordinatedParticipant(pool, new EnvironmentParticipant(), () =>
    Promise.resolve(null),
  );
  const server: Server = createServer((socket) => pool.accept(socket));
  await new Promise<void>((resolve) => server.listen(file, resolve));
  const workers: FrameChannel[] = [];
  for (let index = 0; index < count; index++) {
    const socket = connect(file);
    await new Promise<void>((resolve) => socket.once("connect", resolve));
    const channel = new FrameChannel(socket, (kind) =>
      kind === "close" || kind === "open"
        ? prepareReport({ ready: true })
        : kind === "export"
          ? encodeExport([])
          : kind === "restored_pending"
            ? []
            : null,
    );
    await channel.call("register", { index, pid: 1000 + index, routing_id: `w${index}` });
    await channel.call("listening");
    workers.push(channel);
    cleanups.push(() => socket.destroy());
  }
  cleanups.push(() => {
    server.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { participant, workers };
}

const stored = EnvironmentRecordSchema.parse({
  episode_id: { rollout_id: "r", attempt: 0 },
  task_digest: taskDigest(TASK),
  boundary: { stage: 2 },
});

describe("claims of request-scoped records", () => {
  it("hands the record to exactly one of two workers claiming it at once", async () => {
    const { participant, workers } = await coordinator(2);
    await participant.install([stored], [episodeId("r", 0)], new AbortController().signal);
    expect(await participant.restoredPending()).toEqual([episodeId("r", 1)]);
    const claims = await Promise.allSettled(
      workers.map((worker) => worker.call("claim", { key: "r-a1" })),
    );
    const won = claims.filter((claim) => claim.status === "fulfilled");
    const lost = claims.filter((claim) => claim.status === "rejected");
    expect(won).toHaveLength(1);
    expect((won[0] as PromiseFulfilledResult<unknown>).value).toEqual(stored);
    expect(lost).toHaveLength(1);
    expect(((lost[0] as PromiseRejectedResult).reason as GymError).code).toBe("checkpoint_error");
    // Claimed: the coordinator no longer holds or exports it.
    expect(await participant.restoredPending()).toEqual([]);
    await participant.closeAdmission({ checkpoint_id: "c", deadline_ts: Date.now() / 1000 + 30 });
    expect(await participant.export(null, new AbortController().signal)).toEqual([]);
  });

  it("refuses claims while a checkpoint is open and exports the unclaimed record as its replacement's", async () => {
    const { participant, workers } = await coordinator(2);
    await participant.install([stored], [episodeId("r", 0)], new AbortController().signal);
    await participant.closeAdmission({ checkpoint_id: "c", deadline_ts: Date.now() / 1000 + 30 });
    const refused = await workers[0]!.call("claim", { key: "r-a1" }).catch((e: unknown) => e);
    expect((refused as GymError).code).toBe("admission_closed");
    expect(await participant.export(null, new AbortController().signal)).toEqual([
      { ...stored, episode_id: { rollout_id: "r", attempt: 1 } },
    ]);
    // Reopened, the same claim wins; a key nobody holds answers null (a fresh episode).
    await participant.openAdmission();
    expect(await workers[1]!.call("claim", { key: "r-a1" })).toEqual(stored);
    expect(await workers[1]!.call("claim", { key: "other" })).toBeNull();
  });

  it("drops held records a retire covers", async () => {
    const { participant } = await coordinator(1);
    await participant.install([stored], [episodeId("r", 0)], new AbortController().signal);
    await participant.retire(episodeId("r", 1), new AbortController().signal);
    expect(await participant.restoredPending()).toEqual([]);
  });
});
