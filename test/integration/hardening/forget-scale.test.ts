/**
 * A forget of many rollouts is linear in the rollouts it names and lets other work run: it once
 * copied every retired mark per rollout named (8,000 rollouts blocked a resources server for
 * seconds). A retire of many lets other work run too. Checked by what the work does, not by how
 * long it takes.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import CounterServer from "../../../reference-servers/counter/src/index.js";
import { FORGET_SLICE, type ControlPlane } from "#sdk/control/control-plane.js";
import type { Participant } from "#sdk/control/participant.js";
import { ITEMS_PER_TURN } from "#sdk/util/deadline.js";
import { episodeId } from "#sdk/identity/episode-id.js";

const started: CounterServer[] = [];
afterEach(async () => {
  for (const server of started.splice(0)) await server.close();
  vi.restoreAllMocks();
});

function counter(): { plane: ControlPlane; participant: Participant } {
  const server = new CounterServer({
    name: "counter",
    checkpoint: { enabled: true, control_auth_token: "forget-scale-token" },
    logLevel: "silent",
  });
  started.push(server);
  server.app();
  const plane = server.controlPlane as unknown as ControlPlane;
  return { plane, participant: plane.participant as Participant };
}

const deadline = () => Date.now() / 1000 + 600;

describe("retire and forget of many rollouts", () => {
  it("a forget looks up each rollout's mark once, never copying the marks per rollout", async () => {
    const { plane, participant } = counter();
    const rolloutIds = Array.from({ length: 3 * FORGET_SLICE }, (_, i) => `r-${i}`);
    await plane.retire({
      checkpoint_id: "retire-1",
      deadline_ts: deadline(),
      episode_ids: rolloutIds.map((rollout_id) => episodeId(rollout_id, 1)),
    });
    const copies = vi.spyOn(participant.retired, "marks");
    const lookups = vi.spyOn(participant.retired, "markOf");
    await plane.forget({
      checkpoint_id: "forget-1",
      deadline_ts: deadline(),
      rollout_ids: rolloutIds,
    });
    expect(copies).not.toHaveBeenCalled();
    expect(lookups).toHaveBeenCalledTimes(rolloutIds.length);
    expect(participant.retired.size).toBe(0);
  });

  it("a retire yields to the event loop between turns of stops, and still stops each", async () => {
    const { plane, participant } = counter();
    const rolloutIds = Array.from({ length: 3 * ITEMS_PER_TURN }, (_, i) => `r-${i}`);
    // Marks are raised before anything awaits; the per-rollout stops then run in turns.
    const stopsSeenByOtherWork: number[] = [];
    let stopped = 0;
    const stop = participant.retire.bind(participant);
    vi.spyOn(participant, "retire").mockImplementation(async (episode, signal) => {
      await stop(episode, signal);
      stopped += 1;
    });
    const retired = plane.retire({
      checkpoint_id: "retire-1",
      deadline_ts: deadline(),
      episode_ids: rolloutIds.map((rollout_id) => episodeId(rollout_id, 1)),
    });
    setImmediate(() => stopsSeenByOtherWork.push(stopped));
    await retired;
    expect(stopsSeenByOtherWork).toHaveLength(1);
    expect(stopsSeenByOtherWork[0]).toBeGreaterThan(0);
    expect(stopsSeenByOtherWork[0]).toBeLessThan(rolloutIds.length);
    expect(stopped).toBe(rolloutIds.length);
    expect(participant.retired.size).toBe(rolloutIds.length);
  });

  it("a forget yields to the event loop between slices, and still drops every mark", async () => {
    const { plane, participant } = counter();
    const rolloutIds = Array.from({ length: 3 * FORGET_SLICE }, (_, i) => `r-${i}`);
    await plane.retire({
      checkpoint_id: "retire-1",
      deadline_ts: deadline(),
      episode_ids: rolloutIds.map((rollout_id) => episodeId(rollout_id, 1)),
    });
    // A turn of the event loop queued when the forget starts: it runs before the forget ends
    // only if the forget yields.
    const marksSeenByOtherWork: number[] = [];
    const forgotten = plane.forget({
      checkpoint_id: "forget-1",
      deadline_ts: deadline(),
      rollout_ids: rolloutIds,
    });
    setImmediate(() => marksSeenByOtherWork.push(participant.retired.size));
    await forgotten;
    expect(marksSeenByOtherWork).toHaveLength(1);
    expect(marksSeenByOtherWork[0]).toBeLessThan(rolloutIds.length);
    expect(marksSeenByOtherWork[0]).toBeGreaterThan(0);
    expect(participant.retired.size).toBe(0);
  });
});
