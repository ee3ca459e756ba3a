/**
 * The counts a multi-worker server's coordinator shows in `status`: each worker pushes its
 * readiness when it changes (at once while a checkpoint is open, at most every 250 ms
 * otherwise), so live sessions are counted while admission is open and leave the count when
 * they close, after a restore too. Workers here are in-process links with real participants.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { ControlPlane } from "#sdk/control/control-plane.js";
import type { Participant } from "#sdk/control/participant.js";
import { CoordinatedParticipant } from "#sdk/workers/coordinated-participant.js";
import { WorkerLink } from "#sdk/workers/worker-link.js";
import { WorkerPool } from "#sdk/workers/worker-pool.js";
import { coordinate } from "#sdk/workers/coordinate.js";
import { episodeId } from "#sdk/identity/episode-id.js";
import type { JsonValue } from "#sdk/json/json-value.js";
import type { AgentSessionHooks } from "#sdk/participants/agent/agent-records.js";
import { AgentSessionParticipant } from "#sdk/participants/agent/agent-session-participant.js";
import { ResourcesParticipant } from "#sdk/participants/resources/resources-participant.js";
import { commitReq, req, restoreReq } from "../../support/test-participant.js";

const cleanups: (() => void | Promise<void>)[] = [];
afterEach(async () => {
  vi.useRealTimers();
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function tempDir(): string {
  const dir = mkdtempSync(path.join(tmpdir(), "ng-worker-counts-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Agent hooks that export each session as its key and restore anything. */
const agentHooks: AgentSessionHooks = {
  exportAgentSessions: ({ sessionKeys }) =>
    Promise.resolve(new Map<string, JsonValue>(sessionKeys.map((key) => [key, { key }]))),
  restoreAgentSessions: () => Promise.resolve(),
  retireAgentSession: () => Promise.resolve(),
};

/** A coordinator's control plane over `count` in-process workers built by `make`. */
async function server<P extends Participant>(
  count: number,
  make: (owner: string | null) => P,
): Promise<{ plane: ControlPlane; coordinated: CoordinatedParticipant; workers: P[] }> {
  const socketDir = tempDir();
  const socket = path.join(socketDir, "c.sock");
  const pool = new WorkerPool(count);
  const { participant: coordinated, controlPlane: plane } = coordinate(pool, make(null), {
    instance: "inst",
    leaseGraceSeconds: 100,
  });
  const listener: Server = createServer((s) => pool.accept(s));
  await new Promise<void>((resolve) => listener.listen(socket, resolve));
  const workers: P[] = [];
  const links: WorkerLink[] = [];
  for (let index = 0; index < count; index++) {
    const link = await WorkerLink.connect({ coordinator: socket, index, count, socketDir });
    const participant = make(link.routingId);
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
  return { plane, coordinated, workers };
}

/** The status counts of the coordinator's control plane. */
function countsOf(plane: ControlPlane): Record<string, number> {
  return plane.status().report.counts;
}

/**
 * Waits, for at most `ms` of wall time, until `probe` holds; turns of the event loop, not
 * timers, so it runs under fake timers too. Returns whether it held.
 */
async function eventually(probe: () => boolean, ms = 5_000): Promise<boolean> {
  const end = Date.now() + ms;
  while (!probe()) {
    if (Date.now() > end) return false;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  return true;
}

/** How a participant of each kind opens and ends sessions. */
const kinds = [
  {
    kind: "agent",
    make: (owner: string | null) => new AgentSessionParticipant({ hooks: agentHooks, owner }),
    open: (p: AgentSessionParticipant, key: string) =>
      p.openSession(key, episodeId(`r_${key}`), { seed: false }),
    end: (p: AgentSessionParticipant, key: string) => p.dropSession(key),
  },
  {
    kind: "resources",
    make: (owner: string | null) => new ResourcesParticipant({ owner }),
    open: (p: ResourcesParticipant, key: string) => p.seeded(key, episodeId(`r_${key}`), null),
    end: (p: ResourcesParticipant, key: string) => p.sessionEnded(key),
  },
] as const;

describe.each(kinds)("a $kind server with two workers", ({ make, open, end }) => {
  it("counts live sessions while admission is open, and none once they ended", async () => {
    const { plane, workers } = await server(2, make as (owner: string | null) => Participant);
    const [w0, w1] = workers as [never, never];
    for (let i = 0; i < 3; i++) open(w0, `a${i}`);
    for (let i = 0; i < 5; i++) open(w1, `b${i}`);
    expect(await eventually(() => countsOf(plane).sessions === 8), "8 sessions counted").toBe(true);
    expect(countsOf(plane).workers).toBe(2);
    // A retire's reply comes after the workers reported what it freed: no timer runs.
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    await plane.retire({ ...req("c0"), episode_ids: [episodeId("r_b4")] });
    expect(countsOf(plane).sessions).toBe(7);
    vi.useRealTimers();
    for (let i = 0; i < 3; i++) end(w0, `a${i}`);
    for (let i = 0; i < 4; i++) end(w1, `b${i}`);
    expect(await eventually(() => countsOf(plane).sessions === 0), "no session counted").toBe(true);
  });

  it("reports a burst of changes while admission is open at most every 250 ms", async () => {
    const { plane, coordinated, workers } = await server(
      2,
      make as (owner: string | null) => Participant,
    );
    const [w0] = workers as [never];
    let reports = 0;
    coordinated.onChange = () => (reports += 1);
    const started = Date.now();
    // 200 changes over as many turns of the event loop: reported at once, each would be sent.
    for (let i = 0; i < 100; i++) {
      open(w0, `s${i}`);
      await new Promise<void>((resolve) => setImmediate(resolve));
      if (i % 2 === 1) end(w0, `s${i}`);
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    const burst = Date.now() - started;
    expect(await eventually(() => countsOf(plane).sessions === 50)).toBe(true);
    // One report per interval the burst spanned, plus the one its last change scheduled.
    expect(reports).toBeGreaterThan(0);
    expect(reports).toBeLessThanOrEqual(Math.floor(burst / 250) + 2);
  });
});

describe("a worker's report while a checkpoint is open", () => {
  it("is sent at once, even when a report throttled while open was still waiting", async () => {
    const { plane, workers } = await server(2, (owner) => new ResourcesParticipant({ owner }));
    const [w0] = workers as [ResourcesParticipant];
    // Only the link's timers are faked: the 250 ms of an open server's report never pass.
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    w0.seeded("open", episodeId("r_open"), null);
    await plane.prepare(req("c1"));
    expect(countsOf(plane).sessions).toBe(1);
    // A session seeded while closed (a seed admitted before the close): counted at once.
    w0.seeded("closed", episodeId("r_closed"), null);
    vi.advanceTimersByTime(0);
    expect(await eventually(() => countsOf(plane).sessions === 2), "reported at once").toBe(true);
  });
});

describe("an agent server with two workers, restored", () => {
  it("counts the restored sessions, and none once they closed after the resume", async () => {
    const first = await server(
      2,
      (owner) => new AgentSessionParticipant({ hooks: agentHooks, owner }),
    );
    const keys = ["k0", "k1", "k2", "k3"];
    keys.forEach((key, i) =>
      first.workers[i % 2]!.openSession(key, episodeId(key), { seed: false }),
    );
    expect(await eventually(() => countsOf(first.plane).sessions === 4)).toBe(true);
    const dir = tempDir();
    expect((await first.plane.prepare(req("c1"))).phase).toBe("prepared");
    await first.plane.commit(commitReq("c1", dir, null));

    const second = await server(
      2,
      (owner) => new AgentSessionParticipant({ hooks: agentHooks, owner }),
    );
    // The restore's reply comes after every worker reported what it installed: no timer runs.
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    await second.plane.restore(restoreReq("c1", dir, keys));
    expect(countsOf(second.plane).sessions).toBe(4);
    vi.useRealTimers();
    await second.plane.resume(req("c1"));
    expect(countsOf(second.plane).sessions).toBe(4);
    // The replacements run and close their sessions while admission is open.
    for (const worker of second.workers) {
      for (const key of keys) if (worker.has(key)) await worker.closeSession(key);
    }
    expect(
      await eventually(() => countsOf(second.plane).sessions === 0),
      "no session counted",
    ).toBe(true);
  });
});
