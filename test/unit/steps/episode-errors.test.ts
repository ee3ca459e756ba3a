/**
 * The runner's errors: the duplicate-begin refusal maps to 409 `checkpoint_error`; the two abort
 * reasons are local errors naming their episode.
 */
import { describe, expect, it } from "vitest";
import { EpisodeError, GymError } from "#sdk/errors.js";
import {
  EpisodeAlreadyRunningError,
  EpisodeDeadlineError,
  EpisodeRetiredError,
} from "#sdk/steps/episode-errors.js";

describe("episode errors", () => {
  it("a duplicate begin is an EpisodeError with code checkpoint_error and its envelope", () => {
    const error = new EpisodeAlreadyRunningError("task-3-a1");
    expect(error).toBeInstanceOf(EpisodeError);
    expect(error).toBeInstanceOf(GymError);
    expect(error.name).toBe("EpisodeAlreadyRunningError");
    expect(error.captureKey).toBe("task-3-a1");
    expect(error.toEnvelope()).toEqual({
      error: { code: "checkpoint_error", detail: expect.stringContaining("already running") },
    });
  });

  it("the abort reasons are plain errors that name their episode", () => {
    const retired = new EpisodeRetiredError("r-a2");
    expect(retired).not.toBeInstanceOf(GymError);
    expect(retired.name).toBe("EpisodeRetiredError");
    expect(retired.captureKey).toBe("r-a2");
    expect(retired.message).toContain("r-a2");

    const deadline = new EpisodeDeadlineError("r", Date.UTC(2030, 0, 1) / 1000);
    expect(deadline).not.toBeInstanceOf(GymError);
    expect(deadline.name).toBe("EpisodeDeadlineError");
    expect(deadline).toMatchObject({ captureKey: "r", deadlineTs: Date.UTC(2030, 0, 1) / 1000 });
    expect(deadline.message).toContain("2030-01-01T00:00:00.000Z");
  });
});
