/**
 * The suspendable timer behind episode deadlines: remaining-time bookkeeping, idempotence,
 * firing once, and long delays. Clocks are fake.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { PausableTimer } from "#sdk/steps/pausable-timer.js";

describe("PausableTimer", () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: Date.UTC(2030, 0, 1) });
  });

  afterEach(() => {
    vi.useRealTimers();
  });

  it("starts suspended and counts only running time", async () => {
    const fire = vi.fn();
    const timer = new PausableTimer(1_000, fire);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(fire).not.toHaveBeenCalled();
    expect(timer.state).toBe("suspended");

    timer.resume();
    await vi.advanceTimersByTimeAsync(400);
    timer.suspend();
    expect(timer.remainingMs).toBe(600);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(fire).not.toHaveBeenCalled();

    timer.resume();
    await vi.advanceTimersByTimeAsync(599);
    expect(fire).not.toHaveBeenCalled();
    await vi.advanceTimersByTimeAsync(1);
    expect(fire).toHaveBeenCalledTimes(1);
    expect(timer.state).toBe("fired");
  });

  it("suspend and resume are idempotent and arm at most one timer", async () => {
    const fire = vi.fn();
    const timer = new PausableTimer(1_000, fire);
    timer.resume();
    timer.resume();
    expect(vi.getTimerCount()).toBe(1);
    await vi.advanceTimersByTimeAsync(300);
    timer.suspend();
    timer.suspend();
    expect(timer.remainingMs).toBe(700);
    expect(vi.getTimerCount()).toBe(0);
    timer.resume();
    await vi.advanceTimersByTimeAsync(700);
    expect(fire).toHaveBeenCalledTimes(1);
  });

  it("never fires after dispose, and every call after firing is a no-op", async () => {
    const fire = vi.fn();
    const disposed = new PausableTimer(100, fire);
    disposed.resume();
    disposed.dispose();
    expect(vi.getTimerCount()).toBe(0);
    disposed.resume();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(fire).not.toHaveBeenCalled();
    expect(disposed.remainingMs).toBe(0);

    const fired = new PausableTimer(100, fire);
    fired.resume();
    await vi.advanceTimersByTimeAsync(100);
    fired.suspend();
    fired.resume();
    fired.dispose();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(fire).toHaveBeenCalledTimes(1);
  });

  it("waits out delays longer than setTimeout's limit", async () => {
    const fire = vi.fn();
    const days30 = 30 * 24 * 3600 * 1000;
    const timer = new PausableTimer(days30, fire);
    timer.resume();
    await vi.advanceTimersByTimeAsync(days30 - 1);
    expect(fire).not.toHaveBeenCalled();
    await vi.advanceTimersByTimeAsync(1);
    expect(fire).toHaveBeenCalledTimes(1);
  });
});
