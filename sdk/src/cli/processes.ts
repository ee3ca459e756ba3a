/**
 * Process and process-group liveness and signals (POSIX). A zombie (exited, not yet reaped by
 * its parent) counts as gone: some container inits never reap orphans, and `kill(pid, 0)` still
 * succeeds on a zombie.
 */
import { readdirSync } from "node:fs";
import { HAS_PROC, isProcessAlive, procStat, signalZero } from "../util/process-liveness.js";

export { isProcessAlive };

/** Whether any process of a process group is still running. */
export function isGroupAlive(pgid: number): boolean {
  if (!Number.isSafeInteger(pgid) || pgid <= 1) return false;
  if (!signalZero(-pgid)) return false;
  if (!HAS_PROC) return true;
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return true;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = procStat(Number(entry));
    if (stat !== null && stat.pgid === pgid && stat.state !== "Z" && stat.state !== "X") {
      return true;
    }
  }
  return false;
}

/** Sends a signal to every process of a group; false when the group does not exist. */
export function signalGroup(pgid: number, signal: NodeJS.Signals): boolean {
  if (!Number.isSafeInteger(pgid) || pgid <= 1) return false;
  try {
    process.kill(-pgid, signal);
    return true;
  } catch {
    return false;
  }
}

/**
 * Resolves after `ms`. Unlike the SDK's `sleep`, the timer keeps the process alive: a command
 * that is polling must not end half-way because nothing else is pending.
 */
export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}

/** Waits for `work` at most `ms`; true when it settled in time. Clears its timer either way. */
export async function settlesWithin(work: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), Math.max(0, ms));
  });
  try {
    return await Promise.race([work.then(() => true as const), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Polls `condition` every `intervalMs` until it holds or `timeoutMs` passes; returns whether it held. */
export async function pollUntil(
  condition: () => boolean | Promise<boolean>,
  timeoutMs: number,
  intervalMs = 100,
): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await condition()) return true;
    const left = end - Date.now();
    if (left <= 0) return false;
    await delay(Math.min(intervalMs, left));
  }
}

/** How {@link stopGroups} went for one group. */
export interface GroupStop {
  readonly pgid: number;
  /** `term`: stopped after SIGTERM; `kill`: needed SIGKILL; `gone`: was not running; `alive`: survived. */
  readonly outcome: "term" | "kill" | "gone" | "alive";
}

/**
 * Stops process groups: SIGTERM to each, then SIGKILL to those still running after `graceMs`.
 * With `kill`, SIGKILL to every group at once (a crash). Bounded: returns after at most
 * `graceMs` + `killWaitMs`.
 */
export async function stopGroups(
  pgids: readonly number[],
  options: { graceMs: number; kill?: boolean; killWaitMs?: number; signal?: NodeJS.Signals },
): Promise<GroupStop[]> {
  const killWaitMs = options.killWaitMs ?? 5_000;
  const outcomes = new Map<number, GroupStop["outcome"]>();
  const running = pgids.filter((pgid) => {
    const alive = isGroupAlive(pgid);
    if (!alive) outcomes.set(pgid, "gone");
    return alive;
  });
  let remaining = running;
  if (options.kill !== true) {
    for (const pgid of running) signalGroup(pgid, options.signal ?? "SIGTERM");
    await pollUntil(() => remaining.every((pgid) => !isGroupAlive(pgid)), options.graceMs);
    for (const pgid of running) if (!isGroupAlive(pgid)) outcomes.set(pgid, "term");
    remaining = running.filter((pgid) => !outcomes.has(pgid));
  }
  for (const pgid of remaining) signalGroup(pgid, "SIGKILL");
  await pollUntil(() => remaining.every((pgid) => !isGroupAlive(pgid)), killWaitMs);
  for (const pgid of remaining) outcomes.set(pgid, isGroupAlive(pgid) ? "alive" : "kill");
  return pgids.map((pgid) => ({ pgid, outcome: outcomes.get(pgid) ?? "gone" }));
}
