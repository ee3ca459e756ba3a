/**
 * The index classes the agent session participant holds: tracked phases by rollout and by
 * whether they block, seeds in progress, direct calls, and the admission cycle. Each keeps its
 * collections consistent on its own, so these check them without a participant.
 */
import { describe, expect, it } from "vitest";
import { EpisodeError } from "#sdk/errors.js";
import { captureKey, episodeId, type EpisodeId } from "#sdk/identity/episode-id.js";
import { AgentAdmission } from "#sdk/participants/agent/agent-admission.js";
import { AgentSessionEntry } from "#sdk/participants/agent/agent-session-table.js";
import { DirectCalls } from "#sdk/participants/agent/direct-calls.js";
import { SeedsInProgress } from "#sdk/participants/agent/seeds-in-progress.js";
import { SessionPhase } from "#sdk/participants/agent/session-phase.js";
import { TrackedSessions } from "#sdk/participants/agent/tracked-sessions.js";

function phase(key: string, episode: EpisodeId): SessionPhase {
  return new SessionPhase(new AgentSessionEntry<unknown>(key, episode, null, undefined));
}

describe("TrackedSessions", () => {
  it("tracks a phase on its entry, by rollout and as blocking while running, and untracks it from all three", () => {
    const restarts = new Set<string>();
    const sessions = new TrackedSessions((s) => restarts.has(s.captureKey));
    const s = phase("a", episodeId("r1", 0));
    sessions.track(s);
    expect(s.tracked).toBe(true);
    expect([...sessions]).toEqual([s]);
    expect(sessions.blockingCount).toBe(0);
    s.state = "running";
    sessions.refresh(s);
    expect([...sessions.blocking()]).toEqual([s]);
    // A running restart does not block.
    restarts.add(s.captureKey);
    sessions.refresh(s);
    expect(sessions.blockingCount).toBe(0);
    s.retired = true;
    sessions.refresh(s);
    expect(sessions.blockingCount).toBe(1);
    sessions.untrack(s);
    expect(s.tracked).toBe(false);
    expect(s.blocking).toBe(false);
    expect(sessions.size).toBe(0);
    expect(sessions.blockingCount).toBe(0);
    expect(sessions.coveredBy(episodeId("r1", 5))).toEqual([]);
    // Untracked, a refresh does not make it block again.
    sessions.refresh(s);
    expect(sessions.blockingCount).toBe(0);
  });

  it("covers an attempt and the earlier ones of its rollout only", () => {
    const sessions = new TrackedSessions(() => false);
    const early = phase("a", episodeId("r1", 0));
    const late = phase("b", episodeId("r1", 2));
    const other = phase("c", episodeId("r2", 0));
    for (const s of [early, late, other]) sessions.track(s);
    expect(sessions.coveredBy(episodeId("r1", 1))).toEqual([early]);
    expect(sessions.coveredBy(episodeId("r1", 2))).toEqual([early, late]);
  });

  it("lists a scope's phases in capture-key order, ties by session key, as the whole walk does", () => {
    const sessions = new TrackedSessions(() => false);
    const r2 = episodeId("r2", 0);
    const r1 = episodeId("r1", 0);
    const phases = [phase("z", r2), phase("y", r1), phase("x", r2), phase("w", episodeId("r3", 0))];
    for (const s of phases) sessions.track(s);
    const inScope = sessions.inScope([r2, r1], () => true).map((s) => s.key);
    expect(inScope).toEqual(["y", "x", "z"]);
    expect(sessions.inScope(null, (s) => s.key !== "w").map((s) => s.key)).toEqual(inScope);
  });
});

describe("SeedsInProgress", () => {
  it("counts seeds of one session and attempt once, each leave once, and resolves the next leave", async () => {
    const seeds = new SeedsInProgress();
    const episode = episodeId("r1", 1);
    const first = seeds.enter("s", episode);
    const second = seeds.enter("s", episode);
    expect(seeds.size).toBe(1);
    expect([...seeds.captureKeys()]).toEqual([captureKey(episode)]);
    expect(seeds.holds(episodeId("r1", 1))).toBe(true);
    expect(seeds.holds(episodeId("r1", 0))).toBe(false);
    expect(seeds.holds(episodeId("r2", 1))).toBe(false);
    const left = seeds.nextLeave;
    expect(first()).toBe(true);
    expect(first()).toBe(false);
    await left;
    expect(seeds.holds(episode)).toBe(true);
    expect(second()).toBe(true);
    expect(seeds.size).toBe(0);
    expect(seeds.holds(episode)).toBe(false);
  });
});

describe("DirectCalls", () => {
  it("stops the calls of an attempt and earlier ones once, with stale_attempt, and forgets a done call", async () => {
    const calls = new DirectCalls();
    const early = calls.track(episodeId("r1", 0));
    const late = calls.track(episodeId("r1", 3));
    const other = calls.track(episodeId("r2", 0));
    expect([...calls.keys()]).toHaveLength(3);
    const ended = calls.stop(episodeId("r1", 1));
    expect(ended).toHaveLength(1);
    expect(early.signal.reason).toBeInstanceOf(EpisodeError);
    const reason: unknown = early.signal.reason;
    calls.stop(episodeId("r1", 1));
    expect(early.signal.reason).toBe(reason);
    expect(late.signal.aborted).toBe(false);
    expect(other.signal.aborted).toBe(false);
    early.done();
    await Promise.all(ended);
    expect([...calls.keys()]).toEqual([
      captureKey(episodeId("r1", 3)),
      captureKey(episodeId("r2", 0)),
    ]);
    expect(calls.stop(episodeId("r1", 1))).toEqual([]);
  });
});

describe("AgentAdmission", () => {
  it("carries restarts only while closed, and its waiters resume once the opener releases them", async () => {
    const admission = new AgentAdmission();
    expect(admission.reopened).toBeNull();
    admission.close(["r1"]);
    expect(admission.accepting).toBe(false);
    expect(admission.carries("r1")).toBe(true);
    const reopened = admission.reopened;
    admission.close(undefined); // a later stage without restarts keeps the carried ones
    expect(admission.reopened).toBe(reopened);
    expect(admission.carries("r1")).toBe(true);
    let resumed = false;
    void reopened?.then(() => (resumed = true));
    const release = admission.open();
    expect(admission.accepting).toBe(true);
    expect(admission.carries("r1")).toBe(false);
    expect(admission.reopened).toBeNull();
    await Promise.resolve();
    expect(resumed).toBe(false);
    release();
    await reopened;
    expect(resumed).toBe(true);
  });
});
