/**
 * `parseEpisodeListBody` is `parseBody` made fast for long `episode_ids` lists: the same data,
 * or the same 422 with the same issues, for any body.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { InvalidRequestError } from "#sdk/errors.js";
import { episodeIdsFromWire } from "#sdk/identity/episode-id.js";
import {
  CommitRequestSchema,
  RestoreRequestSchema,
  RetireRequestSchema,
} from "#sdk/wire/control.js";
import { parseBody, parseEpisodeListBody } from "#sdk/wire/parse.js";

/** An entry of `episode_ids`: mostly valid, sometimes wrong in one of the ways zod refuses. */
const entryArb: fc.Arbitrary<unknown> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      rollout_id: fc.constantFrom("r", "task-3", "a.b_c-9"),
      attempt: fc.nat(5),
    }),
  },
  { weight: 2, arbitrary: fc.record({ rollout_id: fc.constantFrom("r", "x1") }) },
  {
    weight: 1,
    arbitrary: fc.constantFrom<unknown>(
      { rollout_id: "r-a1", attempt: 0 },
      { rollout_id: "", attempt: 0 },
      { rollout_id: ".r" },
      { rollout_id: "r", attempt: -1 },
      { rollout_id: "r", attempt: 1.5 },
      { rollout_id: "r", attempt: 2 ** 53 },
      { rollout_id: "r", attempt: "1" },
      { rollout_id: "r", attempt: -0 },
      { rollout_id: "r", extra: 1 },
      { attempt: 0 },
      { rollout_id: 7 },
      "r",
      null,
      [],
    ),
  },
);

const bodyArb = fc.record(
  {
    checkpoint_id: fc.constantFrom<unknown>("ckpt-1", "", 3),
    deadline_ts: fc.constantFrom<unknown>(1_767_000_000, "soon"),
    checkpoint_dir: fc.constantFrom<unknown>("/tmp/c", ""),
    episode_ids: fc.oneof(
      fc.array(entryArb, { maxLength: 6 }),
      fc.constantFrom<unknown>(null, "r", {}),
    ),
    stop: fc.constantFrom<unknown>(false, "no"),
    surplus: fc.constant(1),
  },
  { requiredKeys: ["checkpoint_id", "deadline_ts"] },
);

function outcome(parse: () => unknown): unknown {
  try {
    return { ok: parse() };
  } catch (error) {
    if (!(error instanceof InvalidRequestError)) throw error;
    return { refused: error.message, issues: error.issues };
  }
}

describe("parseEpisodeListBody", () => {
  it.each([
    ["commit", CommitRequestSchema],
    ["restore", RestoreRequestSchema],
    ["retire", RetireRequestSchema],
  ] as const)("parses a %s body exactly as parseBody does", (what, schema) => {
    fc.assert(
      fc.property(bodyArb, (body) => {
        expect(outcome(() => parseEpisodeListBody(schema, body, what))).toEqual(
          outcome(() => parseBody(schema, body, what)),
        );
      }),
      { numRuns: 600 },
    );
  });

  it("mints frozen EpisodeIds, attempt 0 by default", () => {
    const parsed = parseEpisodeListBody(
      RestoreRequestSchema,
      {
        checkpoint_id: "c",
        deadline_ts: 1,
        checkpoint_dir: "/d",
        episode_ids: [{ rollout_id: "r" }, { rollout_id: "s", attempt: 2 }],
      },
      "restore",
    );
    expect(parsed.episode_ids).toEqual([
      { rollout_id: "r", attempt: 0 },
      { rollout_id: "s", attempt: 2 },
    ]);
    expect(parsed.episode_ids.every((e) => Object.isFrozen(e))).toBe(true);
  });

  it("episodeIdsFromWire is null as soon as one entry is not an EpisodeId", () => {
    expect(episodeIdsFromWire([{ rollout_id: "r" }, { rollout_id: "r-a1" }])).toBeNull();
    expect(episodeIdsFromWire([{ rollout_id: "r" }])).toEqual([{ rollout_id: "r", attempt: 0 }]);
  });
});
