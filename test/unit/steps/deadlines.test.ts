/**
 * Episode deadlines (see docs/episode-steps.md): time parked for a checkpoint, or spent in a replay
 * step during one, does not count; a wait step's time does. Clocks are fake.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { EpisodeDeadlineError, EpisodeRetiredError } from "#sdk/steps/episode-errors.js";
import { EpisodeSteps } from "#sdk/steps/episode-steps.js";
import { manualStep, track } from "./helpers.js";

const START_MS = Date.UTC(2030, 0, 1);

/** Absolute deadline `seconds` from now, Unix seconds. */
function inSeconds(seconds: number): number {
  return Date.now() / 1000 + seconds;
}

/** Advances the fake clock by `seconds`. */
async function pass(seconds: number): Promise<void> {
  await vi.advanceTimersByTimeAsync(seconds * 1000);
}

describe("episode deadlines", () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: START_MS });
  });

  afterEach(() => {
    vi.useRealTimers();
  });

  it("aborts the episode's signal with EpisodeDeadlineError when its deadline passes", async () => {
    const steps = new EpisodeSteps();
    const deadlineTs = inSeconds(10);
    const signal = steps.begin("a", { deadlineTs });
    await pass(9.999);
    expect(signal.aborted).toBe(false);
    await pass(0.001);
    expect(signal.reason).toBeInstanceOf(EpisodeDeadlineError);
    expect(signal.reason).toMatchObject({ captureKey: "a", deadlineTs });
    expect((signal.reason as Error).message).toContain("timed out");
    await expect(steps.boundary("a", { next: 1 })).rejects.toBeInstanceOf(EpisodeDeadlineError);
  });

  it("a deadline already past at begin aborts at once, without a timer", () => {
    const steps = new EpisodeSteps();
    const signal = steps.begin("a", { deadlineTs: inSeconds(-1) });
    expect(signal.reason).toBeInstanceOf(EpisodeDeadlineError);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("a NaN deadline is refused before the episode is registered", () => {
    const steps = new EpisodeSteps();
    expect(() => steps.begin("a", { deadlineTs: Number.NaN })).toThrow(RangeError);
    expect(steps.has("a")).toBe(false);
  });

  it("time parked for a checkpoint does not count", async () => {
    const steps = new EpisodeSteps();
    const signal = steps.begin("a", { deadlineTs: inSeconds(10) });
    await pass(4);
    steps.closeAdmission();
    const parked = track(steps.boundary("a", { next: 1 }));
    await pass(100);
    expect(signal.aborted).toBe(false);

    steps.openAdmission();
    await parked.promise;
    await pass(5.9);
    expect(signal.aborted).toBe(false);
    await pass(0.1);
    expect(signal.reason).toBeInstanceOf(EpisodeDeadlineError);
  });

  it("time in a replay step during a checkpoint does not count, whether the step or the checkpoint began first", async () => {
    const steps = new EpisodeSteps();
    const before = steps.begin("step-first", { deadlineTs: inSeconds(10) });
    const after = steps.begin("checkpoint-first", { deadlineTs: inSeconds(10) });
    const first = manualStep();
    const second = manualStep();
    const running = [track(steps.step("step-first", "replay", first.fn))];
    await pass(4);
    steps.closeAdmission();
    running.push(track(steps.step("checkpoint-first", "replay", second.fn)));
    await pass(100);
    expect(before.aborted).toBe(false);
    expect(after.aborted).toBe(false);

    steps.openAdmission();
    await pass(5.9);
    expect(before.aborted).toBe(false);
    expect(after.aborted).toBe(false);
    await pass(0.1);
    expect(before.reason).toBeInstanceOf(EpisodeDeadlineError);
    expect(after.reason).toBeInstanceOf(EpisodeDeadlineError);
    first.succeed("x");
    second.succeed("y");
    await Promise.all(running.map((r) => r.promise));
  });

  it("time in a replay step outside a checkpoint counts", async () => {
    const steps = new EpisodeSteps();
    const signal = steps.begin("a", { deadlineTs: inSeconds(10) });
    const step = manualStep();
    const running = track(steps.step("a", "replay", step.fn));
    await pass(10);
    expect(signal.reason).toBeInstanceOf(EpisodeDeadlineError);
    step.fail(signal.reason);
    await expect(running.promise).rejects.toBeInstanceOf(EpisodeDeadlineError);
  });

  it("time in a wait step counts, even during a checkpoint", async () => {
    const steps = new EpisodeSteps();
    const before = steps.begin("step-first", { deadlineTs: inSeconds(10) });
    const after = steps.begin("checkpoint-first", { deadlineTs: inSeconds(10) });
    const first = manualStep();
    const second = manualStep();
    const running = [track(steps.step("step-first", "wait", first.fn))];
    steps.closeAdmission();
    running.push(track(steps.step("checkpoint-first", "wait", second.fn)));
    await pass(10);
    expect(before.reason).toBeInstanceOf(EpisodeDeadlineError);
    expect(after.reason).toBeInstanceOf(EpisodeDeadlineError);
    first.fail(before.reason);
    second.fail(after.reason);
    for (const r of running) await expect(r.promise).rejects.toBeInstanceOf(EpisodeDeadlineError);
  });

  it("a held replay step keeps its deadline stopped until resume", async () => {
    const steps = new EpisodeSteps();
    const signal = steps.begin("a", { deadlineTs: inSeconds(10) });
    steps.closeAdmission();
    await steps.step("a", "replay", () => "done");
    await pass(100);
    expect(signal.aborted).toBe(false);
    steps.openAdmission();
    await pass(10);
    expect(signal.reason).toBeInstanceOf(EpisodeDeadlineError);
  });

  it("clears the deadline timer when the episode ends, is retired, or starts its final cleanup", async () => {
    const steps = new EpisodeSteps();
    const signals = ["ended", "retired", "finishing"].map((key) =>
      steps.begin(key, { deadlineTs: inSeconds(10) }),
    );
    steps.begin("no-deadline");
    expect(vi.getTimerCount()).toBe(3);

    steps.end("ended");
    expect(vi.getTimerCount()).toBe(2);
    const retire = track(steps.retire("retired", new AbortController().signal));
    expect(vi.getTimerCount()).toBe(1);
    steps.finishing("finishing");
    expect(vi.getTimerCount()).toBe(0);

    await pass(60);
    expect(signals[0]?.aborted).toBe(false);
    expect(signals[1]?.reason).toBeInstanceOf(EpisodeRetiredError);
    expect(signals[2]?.aborted).toBe(false);
    steps.end("retired");
    await retire.promise;
  });

  it("a parked episode's timer is not armed while it is parked", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a", { deadlineTs: inSeconds(10) });
    steps.closeAdmission();
    const parked = track(steps.boundary("a", { next: 1 }));
    expect(vi.getTimerCount()).toBe(0);
    steps.openAdmission();
    await parked.promise;
    expect(vi.getTimerCount()).toBe(1);
    steps.end("a");
    expect(vi.getTimerCount()).toBe(0);
  });
});

describe("deadline timers", () => {
  it("are unref'd, so they never keep the process alive", () => {
    const created: NodeJS.Timeout[] = [];
    const realSetTimeout = globalThis.setTimeout;
    const spy = vi.spyOn(globalThis, "setTimeout").mockImplementation(((
      ...args: Parameters<typeof setTimeout>
    ) => {
      const timer = realSetTimeout(...args);
      created.push(timer);
      return timer;
    }) as typeof setTimeout);
    try {
      const steps = new EpisodeSteps();
      steps.begin("a", { deadlineTs: Date.now() / 1000 + 3600 });
      expect(created).toHaveLength(1);
      expect(created[0]?.hasRef()).toBe(false);
      steps.end("a");
    } finally {
      spy.mockRestore();
    }
  });
});
