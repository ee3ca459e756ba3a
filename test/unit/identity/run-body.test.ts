import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { GymError } from "#sdk/errors.js";
import { fromCaptureKey } from "#sdk/identity/episode-id.js";
import {
  InvalidRunRolloutError,
  captureKeyFromRunBody,
  episodeFromRunBody,
} from "#sdk/identity/run-body.js";

describe("rollout of a /run body", () => {
  it("derives <task>-<rollout> at the stamped attempt", () => {
    expect(captureKeyFromRunBody({ _ng_task_index: 3, _ng_rollout_index: 7 })).toBe("3-7");
    expect(
      captureKeyFromRunBody({ _ng_task_index: 3, _ng_rollout_index: 7, _ng_attempt_index: 2 }),
    ).toBe("3-7-a2");
    expect(
      captureKeyFromRunBody({ _ng_task_index: 3, _ng_rollout_index: 7, _ng_attempt_index: null }),
    ).toBe("3-7");
  });

  it("names no episode when an index is missing", () => {
    expect(episodeFromRunBody({ _ng_task_index: 3 })).toBeNull();
    expect(episodeFromRunBody({})).toBeNull();
  });

  it("runs an explicit <id>-aN as attempt N of <id>", () => {
    const e = episodeFromRunBody({ _ng_rollout_id: "restored-a1" });
    expect(e).toEqual({ rollout_id: "restored", attempt: 1 });
    expect(captureKeyFromRunBody({ _ng_rollout_id: "restored-a1" })).toBe("restored-a1");
  });

  it("applies the attempt index to an explicit unsuffixed ID", () => {
    expect(captureKeyFromRunBody({ _ng_rollout_id: "job", _ng_attempt_index: 4 })).toBe("job-a4");
  });

  it("refuses a suffixed explicit ID together with an attempt index above 0", () => {
    expect(() =>
      episodeFromRunBody({ _ng_rollout_id: "restored-a1", _ng_attempt_index: 1 }),
    ).toThrow(InvalidRunRolloutError);
  });

  it("accepts a suffixed explicit ID with an attempt index of 0 (the key is unchanged)", () => {
    expect(captureKeyFromRunBody({ _ng_rollout_id: "restored-a1", _ng_attempt_index: 0 })).toBe(
      "restored-a1",
    );
  });

  it.each([
    { _ng_rollout_id: "bad id" },
    { _ng_rollout_id: ".x" },
    { _ng_rollout_id: 5 },
    { _ng_rollout_id: "r-a1-a2" },
    { _ng_task_index: -1, _ng_rollout_index: 0 },
    { _ng_task_index: "1", _ng_rollout_index: 0 },
    { _ng_task_index: 1, _ng_rollout_index: 0, _ng_attempt_index: 1.5 },
  ])("refuses %j without sanitizing it", (body) => {
    expect(() => episodeFromRunBody(body)).toThrow(InvalidRunRolloutError);
  });

  it("law: every key built from a run body is refused or decodes back to itself", () => {
    const bodyArb = fc.record(
      {
        _ng_rollout_id: fc.oneof(
          fc.string({ unit: fc.constantFrom(..."ra1-0._") }),
          fc.constant(undefined),
        ),
        _ng_task_index: fc.option(fc.nat({ max: 50 }), { nil: undefined }),
        _ng_rollout_index: fc.option(fc.nat({ max: 50 }), { nil: undefined }),
        _ng_attempt_index: fc.option(fc.nat({ max: 12 }), { nil: null }),
      },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(bodyArb, (body) => {
        let key: string | null;
        try {
          key = captureKeyFromRunBody(body);
        } catch (error) {
          expect(error).toBeInstanceOf(InvalidRunRolloutError);
          return;
        }
        if (key === null) return;
        const e = fromCaptureKey(key);
        expect(key).toBe(e.attempt === 0 ? e.rollout_id : `${e.rollout_id}-a${e.attempt}`);
        if (body._ng_rollout_id === undefined) {
          expect(e.rollout_id).toBe(`${body._ng_task_index}-${body._ng_rollout_index}`);
          expect(e.attempt).toBe(body._ng_attempt_index ?? 0);
        }
      }),
    );
  });
});

describe("refusals", () => {
  it("are typed 400 invalid_rollout_id errors, so a server answers 4xx, not 500", () => {
    try {
      episodeFromRunBody({ _ng_rollout_id: "bad id" });
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(GymError);
      expect((error as GymError).code).toBe("invalid_rollout_id");
      expect((error as GymError).status).toBe(400);
    }
  });
});
