import { afterEach, describe, expect, it, vi } from "vitest";
import {
  awaitUntil,
  deadlineSignal,
  sleep,
  timeoutSignal,
} from "../../../sdk/src/util/deadline.js";

describe("awaitUntil with a deadline already past", () => {
  it("counts work that has already settled", async () => {
    expect(await awaitUntil(Promise.resolve(7), Date.now() / 1000 - 1)).toEqual({
      done: true,
      value: 7,
    });
  });

  it("gives up at once on work still running, even if it would finish within the next tick", async () => {
    const work = new Promise<number>((resolve) => setImmediate(() => resolve(1)));
    expect(await awaitUntil(work, Date.now() / 1000 - 1)).toEqual({ done: false });
  });

  it("waits for work that ends before a future deadline", async () => {
    const work = new Promise<number>((resolve) => setImmediate(() => resolve(2)));
    expect(await awaitUntil(work, Date.now() / 1000 + 30)).toEqual({ done: true, value: 2 });
  });
});

describe("waits longer than setTimeout's range (about 24.8 days)", () => {
  const DAY_MS = 24 * 3600 * 1000;
  afterEach(() => {
    vi.useRealTimers();
  });

  it("bound work by a deadline 30 days away without giving up early", async () => {
    vi.useFakeTimers();
    const outcome = awaitUntil(
      new Promise<never>(() => undefined),
      Date.now() / 1000 + 30 * 86_400,
    );
    let settled = false;
    void outcome.then(() => (settled = true));
    await vi.advanceTimersByTimeAsync(29 * DAY_MS);
    expect(settled).toBe(false);
    await vi.advanceTimersByTimeAsync(DAY_MS + 1);
    expect(await outcome).toEqual({ done: false });
  });

  it("fire a deadline signal 30 days away at its deadline, not before", async () => {
    vi.useFakeTimers();
    const { signal, dispose } = deadlineSignal(Date.now() / 1000 + 30 * 86_400, () => "late");
    await vi.advanceTimersByTimeAsync(29 * DAY_MS);
    expect(signal.aborted).toBe(false);
    await vi.advanceTimersByTimeAsync(DAY_MS + 1);
    expect(signal.reason).toBe("late");
    dispose();
  });

  it("sleep 30 days, and a timeout signal of 30 days, for the whole time", async () => {
    vi.useFakeTimers();
    let slept = false;
    void sleep(30 * DAY_MS).then(() => (slept = true));
    const timeout = timeoutSignal(30 * DAY_MS, () => "timeout");
    await vi.advanceTimersByTimeAsync(29 * DAY_MS);
    expect([slept, timeout.signal.aborted]).toEqual([false, false]);
    await vi.advanceTimersByTimeAsync(DAY_MS + 1);
    expect([slept, timeout.signal.aborted]).toEqual([true, true]);
  });

  it("stop waiting when disposed or aborted", async () => {
    vi.useFakeTimers();
    const { signal, dispose } = deadlineSignal(Date.now() / 1000 + 30 * 86_400, () => "late");
    dispose();
    const controller = new AbortController();
    const slept = sleep(30 * DAY_MS, controller.signal);
    controller.abort("stop");
    await expect(slept).rejects.toBe("stop");
    await vi.advanceTimersByTimeAsync(31 * DAY_MS);
    expect(signal.aborted).toBe(false);
    expect(vi.getTimerCount()).toBe(0);
  });
});
