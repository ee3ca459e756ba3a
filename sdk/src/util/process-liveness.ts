/**
 * Process liveness (POSIX), for the CLI and the workers adapter. A zombie (exited, not yet
 * reaped by its parent) counts as gone: some container inits never reap orphans, and
 * `kill(pid, 0)` still succeeds on a zombie.
 */
import { readFileSync } from "node:fs";

/** A process's state and process group, from `/proc`. */
export interface ProcStat {
  readonly state: string;
  readonly pgid: number;
}

/** `/proc/<pid>/stat`'s state and process group, or null when unavailable. */
export function procStat(pid: number): ProcStat | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return null;
  }
  // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
  const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
  return { state: fields[0] ?? "", pgid: Number(fields[2]) };
}

function procAvailable(): boolean {
  try {
    readFileSync("/proc/self/stat");
    return true;
  } catch {
    return false;
  }
}

/** Whether `/proc` can be read here (Linux). */
export const HAS_PROC = procAvailable();

/** Whether `kill(target, 0)` finds the process or group (EPERM: it exists, someone else's). */
export function signalZero(target: number): boolean {
  try {
    process.kill(target, 0);
    return true;
  } catch (error) {
    // EPERM: it exists but belongs to someone else.
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Whether a process exists and has not exited (a zombie has exited). */
export function isProcessAlive(pid: number): boolean {
  if (!Number.isSafeInteger(pid) || pid <= 0) return false;
  if (!signalZero(pid)) return false;
  if (!HAS_PROC) return true;
  const stat = procStat(pid);
  return stat !== null && stat.state !== "Z" && stat.state !== "X";
}
