import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  EpisodeIdSchema,
  InvalidEpisodeIdError,
  attemptOf,
  captureKey,
  episodeId,
  episodeIdFromWire,
  fromCaptureKey,
  nextAttempt,
  parseEpisodeId,
  rolloutIdProblem,
  sameEpisode,
} from "#sdk/identity/episode-id.js";

/** Valid rollout IDs: the safe pattern, never ending in the reserved `-a<N>` suffix. */
const rolloutIdArb = fc
  .tuple(
    fc.constantFrom(..."abcXYZ019"),
    fc.array(fc.constantFrom(..."aZ09._-"), { maxLength: 12 }),
  )
  .map(([head, tail]) => head + tail.join(""))
  .filter((id) => rolloutIdProblem(id) === null);

const episodeArb = fc
  .tuple(rolloutIdArb, fc.nat({ max: 1_000_000 }))
  .map(([id, attempt]) => episodeId(id, attempt));

describe("capture keys", () => {
  it.each([
    ["r", "r", 0],
    ["r-a3", "r", 3],
    ["r-a10", "r", 10],
    ["r-a0", "r-a0", 0],
    ["r-a01", "r-a01", 0],
    ["a-a1-b", "a-a1-b", 0],
    ["job-a", "job-a", 0],
  ])("decodes %s as (%s, %i)", (key, rolloutId, attempt) => {
    const e = fromCaptureKey(key);
    expect(e.rollout_id).toBe(rolloutId);
    expect(e.attempt).toBe(attempt);
  });

  it.each(["r-a1-a2", "-a1", ".x", ""])("refuses %j, which names no episode", (key) => {
    expect(() => fromCaptureKey(key)).toThrow(InvalidEpisodeIdError);
  });

  it("writes attempt 0 as the bare rollout ID and later attempts with -aN", () => {
    expect(captureKey(episodeId("r"))).toBe("r");
    expect(captureKey(episodeId("r", 1))).toBe("r-a1");
    expect(captureKey(episodeId("r", 10))).toBe("r-a10");
  });

  it("round-trips every valid episode through its capture key", () => {
    fc.assert(
      fc.property(episodeArb, (e) => {
        expect(sameEpisode(fromCaptureKey(captureKey(e)), e)).toBe(true);
      }),
    );
  });

  it("round-trips every key that parses back to itself", () => {
    const keyArb = fc.oneof(
      episodeArb.map(captureKey),
      fc.string({ unit: fc.constantFrom(..."ar1-0.") }),
    );
    fc.assert(
      fc.property(keyArb, (key) => {
        let e;
        try {
          e = fromCaptureKey(key);
        } catch (error) {
          expect(error).toBeInstanceOf(InvalidEpisodeIdError);
          return;
        }
        expect(captureKey(e)).toBe(key);
      }),
    );
  });

  it("names another attempt of the same rollout, refusing an attempt that is not an integer >= 0", () => {
    const e = episodeId("r", 2);
    expect(attemptOf(e, 0)).toEqual(episodeId("r", 0));
    expect(captureKey(attemptOf(e, 7))).toBe("r-a7");
    expect(Object.isFrozen(attemptOf(e, 1))).toBe(true);
    for (const bad of [-1, 1.5, Number.NaN, 2 ** 53]) {
      expect(() => attemptOf(e, bad)).toThrow(InvalidEpisodeIdError);
    }
  });

  it("continues an episode as the next attempt of the same rollout", () => {
    const next = nextAttempt(episodeId("r", 2));
    expect(next.rollout_id).toBe("r");
    expect(next.attempt).toBe(3);
  });
});

describe("EpisodeId", () => {
  it.each(["a-a1-b", "job-a", "job-2", "r-a0", "r-a01", "x.y_z-1"])("accepts %s", (id) => {
    expect(rolloutIdProblem(id)).toBeNull();
  });

  it.each(["r-a1", "r-a10", "job-a2", "", "-x", "a b", "é"])("refuses %j", (id) => {
    expect(rolloutIdProblem(id)).not.toBeNull();
    expect(() => episodeId(id)).toThrow(InvalidEpisodeIdError);
  });

  it("defaults a missing attempt to 0 and always writes it", () => {
    const e = parseEpisodeId({ rollout_id: "r" });
    expect(e.attempt).toBe(0);
    expect(JSON.parse(JSON.stringify(e))).toEqual({ rollout_id: "r", attempt: 0 });
  });

  it.each([
    { rollout_id: "r", attempt: 0, extra: 1 },
    { rollout_id: "r", attempt: -1 },
    { rollout_id: "r", attempt: 1.5 },
    { rollout_id: "r", attempt: "1" },
    { rollout_id: "r-a1", attempt: 0 },
    { attempt: 0 },
    null,
    "r",
  ])("refuses the wire form %j", (value) => {
    expect(EpisodeIdSchema.safeParse(value).success).toBe(false);
    expect(() => parseEpisodeId(value)).toThrow(InvalidEpisodeIdError);
  });

  it("is immutable", () => {
    const e = episodeId("r", 1);
    expect(Object.isFrozen(e)).toBe(true);
  });
});

describe("episodeIdFromWire", () => {
  it("accepts exactly what EpisodeIdSchema accepts, with the same result", () => {
    const candidate = fc.oneof(
      fc.record(
        {
          rollout_id: fc.oneof(rolloutIdArb, fc.string({ maxLength: 6 }), fc.integer()),
          attempt: fc.oneof(fc.nat({ max: 50 }), fc.integer(), fc.double(), fc.string()),
          extra: fc.constant(1),
        },
        { requiredKeys: [] },
      ),
      fc.jsonValue(),
    );
    fc.assert(
      fc.property(candidate, (value) => {
        const schema = EpisodeIdSchema.safeParse(value);
        const fast = episodeIdFromWire(value);
        expect(fast === null).toBe(!schema.success);
        if (schema.success && fast !== null) expect(sameEpisode(fast, schema.data)).toBe(true);
      }),
      { numRuns: 500 },
    );
  });
});
