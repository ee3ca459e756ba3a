import { describe, expect, it } from "vitest";
import type { CollectionManifest } from "#sdk/collect/collection-dir.js";
import { parseRowRolloutId, planResume, rowRolloutId } from "#sdk/collect/resume-plan.js";
import { episodeId } from "#sdk/identity/episode-id.js";

const RUN = "abcd1234";
const id = (row: number, repeat = 0): string => rowRolloutId(RUN, row, repeat);

function manifest(continued: [number, number][]): CollectionManifest {
  return {
    format: 1,
    run_id: RUN,
    session: 1,
    checkpoint_id: "c1",
    created_at: "2026-01-01T00:00:00.000Z",
    continued: continued.map(([row, attempt]) => ({
      rollout_id: id(row),
      attempt,
      row,
      repeat: 0,
    })),
    restarted: [],
  };
}

describe("planResume", () => {
  it("restores checkpointed rows nothing newer was sent for, fences every other logged row", () => {
    const logged = new Map([
      [id(0), 0], // checkpointed at 0: restored
      [id(1), 1], // checkpointed at 0, then sent as 1 by a later run: fenced at 1
      [id(2), 0], // sent after the checkpoint: fenced at 0
      [id(3), 0], // ended: nothing
    ]);
    const plan = planResume(
      RUN,
      manifest([
        [0, 0],
        [1, 0],
        [3, 0],
      ]),
      logged,
      new Set([id(3)]),
    );
    expect(plan.restore.map((entry) => entry.rollout_id)).toEqual([id(0)]);
    expect(plan.fence).toEqual([
      { row: 1, repeat: 0, episode: episodeId(id(1), 1) },
      { row: 2, repeat: 0, episode: episodeId(id(2), 0) },
    ]);
  });

  it("trusts a restored row a checkpoint names at its replacement before it was sent", () => {
    const plan = planResume(RUN, manifest([[0, 1]]), new Map([[id(0), 0]]), new Set());
    expect(plan.restore.map((entry) => entry.attempt)).toEqual([1]);
    expect(plan.fence).toEqual([]);
  });

  it("with no checkpoint, fences every logged row the output lacks", () => {
    const plan = planResume(RUN, null, new Map([[id(4, 1), 2]]), new Set());
    expect(plan).toEqual({
      restore: [],
      fence: [{ row: 4, repeat: 1, episode: episodeId(id(4, 1), 2) }],
    });
  });
});

describe("row rollout IDs", () => {
  it("round-trip, and other runs' IDs name no row", () => {
    expect(parseRowRolloutId(RUN, rowRolloutId(RUN, 12, 3))).toEqual({ row: 12, repeat: 3 });
    expect(parseRowRolloutId(RUN, rowRolloutId("other000", 12, 3))).toBeNull();
    expect(parseRowRolloutId(RUN, `${RUN}-x-1`)).toBeNull();
  });
});
