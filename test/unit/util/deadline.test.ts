import { afterEach, describe, expect, it, vi } from "vitest";
import { awaitUntil, deadlineSignal, sleep, timeoutSignal } from "#sdk/util/deadline.js";

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

describe("a timer that fires before the clock reaches its time", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("waits again, so a deadline never fires while isPast would still say no", async () => {
    vi.useFakeTimers();
    const deadline = Date.now() / 1000 + 1;
    const { signal } = deadlineSignal(deadline, () => "late");
    await vi.advanceTimersByTimeAsync(995);
    vi.setSystemTime(Date.now() - 10); // the wall clock now lags the timers by 10 ms
    await vi.advanceTimersByTimeAsync(5); // the timer is due, the clock is not
    expect(signal.aborted).toBe(false);
    await vi.advanceTimersByTimeAsync(10);
    expect(signal.aborted).toBe(true);
    expect(Date.now()).toBeGreaterThanOrEqual(deadline * 1000);
  });
});

describe("sleep keepAlive", () => {
  const timers = (): number =>
    process.getActiveResourcesInfo().filter((type) => type === "Timeout").length;

  it("keeps the process alive only when asked", async () => {
    const before = timers();
    const background = new AbortController();
    const kept = new AbortController();
    const plain = sleep(60_000, background.signal).catch(() => undefined);
    expect(timers()).toBe(before);
    const alive = sleep(60_000, kept.signal, { keepAlive: true }).catch(() => undefined);
    expect(timers()).toBe(before + 1);
    background.abort();
    kept.abort();
    await Promise.all([plain, alive]);
    expect(timers()).toBe(before);
  });
});
