/**
 * Where a phase's time goes in each server process, from Linux's per-thread scheduler
 * statistics (`/proc/<pid>/task/<tid>/schedstat`: nanoseconds on a core, nanoseconds queued for
 * one): the main thread's CPU, the other threads' CPU (V8's GC and compiler threads, libuv's
 * pool), the main thread's time queued for a core, and its idle time (the rest of the wall
 * time: waiting on I/O or on other servers). Elsewhere than Linux nothing is measured.
 *
 * A server with several workers counts its coordinator and every worker: the figures are sums
 * over its processes (idle time too, so it can exceed the wall time).
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { serverProcesses } from "../../demo/process-tree.js";

/** Whether this machine reports per-thread scheduler statistics. */
export function schedstatSupported(): boolean {
  return existsSync(`/proc/${process.pid}/task/${process.pid}/schedstat`);
}

/** One server's counters at an instant (nanoseconds, summed over its processes). */
interface ServerCounters {
  mainCpuNs: number;
  mainWaitNs: number;
  otherCpuNs: number;
  processes: number;
}

/** A snapshot of every server's counters, and when it was taken. */
export interface Snapshot {
  readonly atNs: bigint;
  readonly servers: ReadonlyMap<string, ServerCounters>;
}

/** One server's share of a phase, in seconds. */
export interface PhaseCpu {
  readonly server: string;
  readonly mainCpu: number;
  readonly otherCpu: number;
  readonly mainQueued: number;
  readonly mainIdle: number;
}

function readSchedstat(pid: number, tid: number): { cpu: number; wait: number } | null {
  try {
    const [cpu, wait] = readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ");
    return { cpu: Number(cpu), wait: Number(wait) };
  } catch {
    return null; // the thread (or the process) ended meanwhile
  }
}

/** Reads the counters of each server (`name` → the pid `gym serve` started it as). */
export function snapshot(servers: ReadonlyMap<string, number>): Snapshot {
  return snapshotOf(serverProcesses(servers));
}

/**
 * Reads the counters of each server's processes, found beforehand (`name` → its pids): no scan
 * of `/proc` for the process tree, so it is cheap enough to take inside a checkpoint's pause.
 */
export function snapshotOf(processes: ReadonlyMap<string, readonly number[]>): Snapshot {
  const counters = new Map<string, ServerCounters>();
  for (const [name, pids] of processes) {
    const total: ServerCounters = { mainCpuNs: 0, mainWaitNs: 0, otherCpuNs: 0, processes: 0 };
    for (const pid of pids) {
      let tids: string[];
      try {
        tids = readdirSync(`/proc/${pid}/task`);
      } catch {
        continue;
      }
      total.processes++;
      for (const tid of tids) {
        const stat = readSchedstat(pid, Number(tid));
        if (stat === null) continue;
        if (Number(tid) === pid) {
          total.mainCpuNs += stat.cpu;
          total.mainWaitNs += stat.wait;
        } else {
          total.otherCpuNs += stat.cpu;
        }
      }
    }
    counters.set(name, total);
  }
  return { atNs: process.hrtime.bigint(), servers: counters };
}

/** Each server's share of the phase between two snapshots. */
export function phaseCpu(start: Snapshot, end: Snapshot): PhaseCpu[] {
  const wallNs = Number(end.atNs - start.atNs);
  const rows: PhaseCpu[] = [];
  for (const [server, after] of end.servers) {
    const before = start.servers.get(server);
    if (before === undefined) continue;
    const mainCpu = after.mainCpuNs - before.mainCpuNs;
    const mainWait = after.mainWaitNs - before.mainWaitNs;
    rows.push({
      server,
      mainCpu: mainCpu / 1e9,
      otherCpu: (after.otherCpuNs - before.otherCpuNs) / 1e9,
      mainQueued: mainWait / 1e9,
      mainIdle: Math.max(0, wallNs * after.processes - mainCpu - mainWait) / 1e9,
    });
  }
  return rows;
}
