import { setMaxListeners } from "node:events";
import { setImmediate as setImmediatePromise } from "node:timers/promises";

/**
 * Deadlines travel on the wire as absolute Unix seconds; inside they become timers and
 * AbortSignals exactly once, here.
 */

/** Milliseconds from now until an absolute Unix-seconds deadline (never negative). */
export function msUntil(deadlineTs: number): number {
  return Math.max(0, deadlineTs * 1000 - Date.now());
}

/** Whether an absolute Unix-seconds deadline has passed. */
export function isPast(deadlineTs: number): boolean {
  return deadlineTs * 1000 <= Date.now();
}

/** The current time as Unix seconds. */
export function nowTs(): number {
  return Date.now() / 1000;
}

/** setTimeout's largest delay (about 24.8 days); a longer wait re-arms its timer. */
const MAX_TIMER_MS = 2_147_483_647;

/**
 * Calls `fire` from a timer once the clock (`Date.now()`) has reached `fireAtMs`, however far
 * away: a delay beyond setTimeout's range (which would fire at once) is waited in steps, and a
 * timer that fires before the clock got there (Node's may, by a millisecond) waits again, so a
 * caller that then checks {@link isPast} always agrees. Always from a timer, never
 * synchronously. Unref'd (it never keeps a process alive) unless `keepAlive`; returns the cancel.
 */
export function fireAt(fireAtMs: number, fire: () => void, keepAlive = false): () => void {
  let timer: NodeJS.Timeout | undefined;
  const arm = (): void => {
    const left = Math.max(0, Math.ceil(fireAtMs - Date.now()));
    timer = setTimeout(check, Math.min(left, MAX_TIMER_MS));
    if (!keepAlive) timer.unref?.();
  };
  const check = (): void => {
    if (Date.now() < fireAtMs) arm();
    else fire();
  };
  arm();
  return () => clearTimeout(timer);
}

/**
 * Resolves after `ms`, or rejects on abort. By default the wait does not keep the process
 * alive (a server's background loop must not hold up its exit); a client that waits before
 * retrying passes `keepAlive`, or a process with nothing else to do would end mid-wait, its
 * pending top-level await unsettled (exit 13, no message).
 */
export function sleep(
  ms: number,
  signal?: AbortSignal,
  options: { readonly keepAlive?: boolean } = {},
): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const cancel = fireAt(Date.now() + Math.max(0, ms), done, options.keepAlive);
    function done(): void {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }
    function onAbort(): void {
      cancel();
      reject(signal?.reason);
    }
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * Resolves after `ms`, or at once when `signal` aborts (never rejects): a back-off that a stop
 * cuts short, never a synchronisation. The timer keeps the process alive.
 */
export async function pause(ms: number, signal: AbortSignal): Promise<void> {
  await new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });
}

/** The outcome of {@link awaitUntil}: the value, or that the deadline fired first. */
export type Bounded<T> = { done: true; value: T } | { done: false };

/**
 * Awaits `work` until the absolute deadline. The work is NOT cancelled when the deadline fires:
 * it keeps running (a retry can join it); the caller decides what a timeout means.
 */
export async function awaitUntil<T>(work: Promise<T>, deadlineTs: number): Promise<Bounded<T>> {
  let cancel: () => void = () => undefined;
  const left = msUntil(deadlineTs);
  const timeout =
    left === 0
      ? // Already past: work that has settled still counts, work still running does not, whatever
        // the machine's load (a 0 ms timer could lose the race to fast I/O).
        Promise.resolve()
          .then(() => undefined)
          .then(() => undefined)
          .then(() => ({ done: false as const }))
      : new Promise<{ done: false }>((resolve) => {
          cancel = fireAt(deadlineTs * 1000, () => resolve({ done: false }));
        });
  try {
    return await Promise.race([work.then((value) => ({ done: true as const, value })), timeout]);
  } finally {
    cancel();
  }
}

/**
 * An AbortSignal that fires at the absolute deadline with `reason()` as its reason, and a
 * `dispose` that clears the timer. Costs one timer.
 */
export function deadlineSignal(
  deadlineTs: number,
  reason: () => unknown,
  parent?: AbortSignal,
): { signal: AbortSignal; dispose: () => void } {
  const controller = new AbortController();
  // Shared by many concurrent waiters (e.g. one retire per rollout): no listener-count warning.
  setMaxListeners(0, controller.signal);
  const cancel = fireAt(deadlineTs * 1000, () => controller.abort(reason()));
  const onParentAbort = (): void => controller.abort(parent?.reason);
  if (parent?.aborted) controller.abort(parent.reason);
  else parent?.addEventListener("abort", onParentAbort, { once: true });
  return {
    signal: controller.signal,
    dispose: () => {
      cancel();
      parent?.removeEventListener("abort", onParentAbort);
    },
  };
}

/** Items {@link forEachConcurrently} starts between two turns of the event loop by default. */
export const ITEMS_PER_TURN = 256;

/**
 * Runs `fn` over `items` with at most `limit` running at once; rejects with the first error
 * after every started call has settled.
 *
 * Every `itemsPerTurn` items started, every lane waits for one shared turn of the event loop:
 * calls that settle without real I/O (a retire of a rollout holding nothing) would otherwise
 * chain through the microtask queue and keep timers and other requests waiting until the last
 * of tens of thousands is done. @default itemsPerTurn {@link ITEMS_PER_TURN}
 */
export async function forEachConcurrently<T>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<void>,
  options: { readonly itemsPerTurn?: number } = {},
): Promise<void> {
  const itemsPerTurn = options.itemsPerTurn ?? ITEMS_PER_TURN;
  let next = 0;
  let failure: { error: unknown } | null = null;
  let startedSinceTurn = 0;
  let turn: Promise<void> | null = null;
  async function lane(): Promise<void> {
    while (next < items.length) {
      if (startedSinceTurn >= itemsPerTurn) {
        // One turn for all lanes: the microtask queue drains only once every lane waits.
        turn ??= setImmediatePromise().then(() => {
          turn = null;
          startedSinceTurn = 0;
        });
        await turn;
        continue;
      }
      startedSinceTurn += 1;
      const item = items[next++] as T;
      try {
        await fn(item);
      } catch (error) {
        failure ??= { error };
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  if (failure !== null) throw (failure as { error: unknown }).error;
}

/**
 * An AbortSignal that fires after `ms` (any non-negative number: fractions are rounded up,
 * delays beyond setTimeout's range are re-armed), with a `dispose` that clears the timer.
 * Unlike `AbortSignal.timeout`, it never throws on a fractional delay and never fires early on
 * a long one.
 */
export function timeoutSignal(
  ms: number,
  reason: () => unknown,
): { signal: AbortSignal; dispose: () => void } {
  const controller = new AbortController();
  if (ms <= 0) {
    controller.abort(reason());
    return { signal: controller.signal, dispose: () => undefined };
  }
  const cancel = fireAt(Date.now() + ms, () => controller.abort(reason()));
  return { signal: controller.signal, dispose: cancel };
}
