/**
 * A retire of every replacement a restore installed (what a controller sends after a failed
 * restore) looks up each rollout's own attempts instead of scanning everything held: the
 * environment and policy-model participants once scanned all restored episodes per rollout
 * named (20,000 took 20 s and 33 s). Checked by what the work touches, not by how long it takes.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { AttemptMap, AttemptSet } from "#sdk/control/attempt-keys.js";
import type { Participant } from "#sdk/control/participant.js";
import { episodeId, type EpisodeId } from "#sdk/identity/episode-id.js";
import { EnvironmentParticipant } from "#sdk/participants/environment/environment-participant.js";
import { PolicyParticipant } from "#sdk/participants/model/policy-participant.js";
import { ITEMS_PER_TURN, forEachConcurrently } from "#sdk/util/deadline.js";

afterEach(() => {
  vi.restoreAllMocks();
});

const N = 3 * ITEMS_PER_TURN;
const rollouts = Array.from({ length: N }, (_, i) => `r-${i}`);

/** Marks and retires `episodes` as the control plane does (16 at a time). */
async function retireAll(p: Participant, episodes: readonly EpisodeId[]): Promise<void> {
  p.markRetired(episodes);
  const signal = new AbortController().signal;
  await forEachConcurrently(episodes, 16, (e) => p.retire(e, signal));
}

/** Spies on every way to walk a whole attempt index. */
function spyOnWholeWalks() {
  return [
    vi.spyOn(AttemptMap.prototype, Symbol.iterator),
    vi.spyOn(AttemptMap.prototype, "keys"),
    vi.spyOn(AttemptSet.prototype, Symbol.iterator),
  ];
}

describe("a retire of every restored replacement", () => {
  it("on an environment participant looks up each rollout, never walking what is held", async () => {
    const p = new EnvironmentParticipant();
    await p.install(
      rollouts.map((id) => ({
        episode_id: episodeId(id),
        task_digest: "0".repeat(64),
        boundary: { next: 1 },
      })),
      [],
      new AbortController().signal,
    );
    expect(p.restoredPending()).toHaveLength(N);
    const walks = spyOnWholeWalks();
    const lookups = vi.spyOn(AttemptMap.prototype, "covered");
    await retireAll(
      p,
      rollouts.map((id) => episodeId(id, 1)),
    );
    for (const walk of walks) expect(walk).not.toHaveBeenCalled();
    // Once for the live episodes and once for the restored records of each rollout.
    expect(lookups).toHaveBeenCalledTimes(2 * N);
    expect(p.restoredPending()).toEqual([]);
  });

  it("on a policy model participant looks up each rollout, never walking what is held", async () => {
    const p = new PolicyParticipant({ ledger: null });
    await p.install(
      [],
      rollouts.map((id) => episodeId(id)),
    );
    expect(p.restoredPending()).toHaveLength(N);
    const walks = spyOnWholeWalks();
    await retireAll(
      p,
      rollouts.map((id) => episodeId(id, 1)),
    );
    for (const walk of walks) expect(walk).not.toHaveBeenCalled();
    expect(p.restoredPending()).toEqual([]);
  });
});

describe("AttemptMap", () => {
  it("covers the attempts of one rollout up to an attempt, and drops them with their index", () => {
    const held = new AttemptMap<string>();
    held.set(episodeId("r"), "r0");
    held.set(episodeId("r", 2), "r2");
    held.set(episodeId("r", 5), "r5");
    held.set(episodeId("q", 1), "q1");
    expect(held.covered(episodeId("r", 2)).sort()).toEqual(["r", "r-a2"]);
    expect(held.covered(episodeId("x", 9))).toEqual([]);
    expect(held.deleteCovered(episodeId("r", 4)).sort()).toEqual(["r", "r-a2"]);
    expect([...held].sort()).toEqual([
      ["q-a1", "q1"],
      ["r-a5", "r5"],
    ]);
    held.delete("r-a5");
    expect(held.covered(episodeId("r", 9))).toEqual([]);
    expect(held.size).toBe(1);
    expect(held.episode("q-a1")).toEqual(episodeId("q", 1));
  });

  it("keeps rollouts named like Object.prototype members apart", () => {
    const held = new AttemptSet();
    held.add("constructor-a1");
    held.add(episodeId("toString"));
    expect(held.covered(episodeId("constructor", 1))).toEqual(["constructor-a1"]);
    expect(held.covered(episodeId("hasOwnProperty", 1))).toEqual([]);
    expect(held.has("toString")).toBe(true);
  });
});
