/**
 * Helpers for the episode steps tests: observe a promise without awaiting it, and let pending
 * continuations run. Nothing here sleeps: `settleMicrotasks` only drains the microtask queue,
 * which is all the runner's own continuations need (it does no I/O).
 */
import { deferred, type Deferred } from "#sdk/util/deferred.js";

/** What a tracked promise has done so far. */
export interface Tracked<T> {
  readonly promise: Promise<T>;
  /** "pending" until it settles. */
  readonly status: () => "pending" | "fulfilled" | "rejected";
  readonly value: () => T | undefined;
  readonly error: () => unknown;
}

/** Tracks `promise` without awaiting it (and without leaving its rejection unhandled). */
export function track<T>(promise: Promise<T>): Tracked<T> {
  let status: "pending" | "fulfilled" | "rejected" = "pending";
  let value: T | undefined;
  let error: unknown;
  promise.then(
    (v) => {
      status = "fulfilled";
      value = v;
    },
    (e: unknown) => {
      status = "rejected";
      error = e;
    },
  );
  return { promise, status: () => status, value: () => value, error: () => error };
}

/** Drains the microtask queue enough times for every runner continuation to run. */
export async function settleMicrotasks(rounds = 20): Promise<void> {
  for (let i = 0; i < rounds; i++) await Promise.resolve();
}

/**
 * A step body the test finishes by hand: `fn` is what `step` runs; `started` resolves when it
 * runs; `succeed`/`fail` settle it. It also records the signal it was given.
 */
export interface ManualStep<T> {
  readonly fn: (signal: AbortSignal) => Promise<T>;
  readonly started: Promise<AbortSignal>;
  succeed(value: T): void;
  fail(error: unknown): void;
}

/** Creates a {@link ManualStep}. */
export function manualStep<T = string>(): ManualStep<T> {
  const result: Deferred<T> = deferred<T>();
  const started = deferred<AbortSignal>();
  return {
    fn: (signal) => {
      started.resolve(signal);
      return result.promise;
    },
    started: started.promise,
    succeed: (value) => result.resolve(value),
    fail: (error) => result.reject(error),
  };
}

/** A promise that resolves when `signal` aborts, with its reason. */
export function aborted(signal: AbortSignal): Promise<unknown> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve(signal.reason);
    else signal.addEventListener("abort", () => resolve(signal.reason), { once: true });
  });
}

/** A failure injected into a step. */
export class StepFailure extends Error {
  override name = "StepFailure";
}
