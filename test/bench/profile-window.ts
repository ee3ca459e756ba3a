/**
 * What ran in each server during a phase, from the CPU profiles the servers wrote as they
 * exited (`--cpu-prof`): the samples whose time falls inside the phase's window, summed by
 * function (self time), the top functions per server. The window's bounds and V8's sample
 * times are both read from the monotonic clock, so they compare across processes.
 */
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { serverProcesses } from "../../demo/process-tree.js";

/** A phase's bounds (µs on the monotonic clock) and each server's processes at its start. */
export interface PhaseWindow {
  readonly phase: string;
  readonly startUs: number;
  endUs: number | null;
  readonly pids: ReadonlyMap<string, readonly number[]>;
}

interface ProfileNode {
  readonly id: number;
  readonly callFrame: { functionName: string; url: string; lineNumber: number };
}

interface CpuProfile {
  readonly nodes: readonly ProfileNode[];
  readonly startTime: number;
  readonly samples: readonly number[];
  readonly timeDeltas: readonly number[];
}

const TOP = 12;
/** V8's default `--cpu-prof-interval`. */
const SAMPLING_INTERVAL_US = 1000;

function nowUs(): number {
  return Number(process.hrtime.bigint() / 1000n);
}

/** Opens a window at a phase's start; closes the open one at its end. */
export function recordWindow(
  windows: PhaseWindow[],
  phase: string,
  edge: "start" | "end",
  servers: ReadonlyMap<string, number>,
): void {
  if (edge === "start") {
    windows.push({ phase, startUs: nowUs(), endUs: null, pids: serverProcesses(servers) });
    return;
  }
  const open = windows.findLast((window) => window.phase === phase && window.endUs === null);
  if (open !== undefined) open.endUs = nowUs();
}

/** `name (file:line)` of a sampled function, the file relative to the repository. */
function functionKey(node: ProfileNode): string {
  const { functionName, url, lineNumber } = node.callFrame;
  if (url === "") return functionName === "" ? "(anonymous)" : functionName;
  const file = url.replace(/^file:\/\//, "").replace(/^.*\/node_modules\//, "~/");
  const short = file.includes("/sdk/") ? file.slice(file.indexOf("/sdk/") + 1) : file;
  return `${functionName || "(anonymous)"} (${short}:${lineNumber + 1})`;
}

/**
 * Milliseconds of self time per function within [startUs, endUs]: samples counted, times the
 * sampling interval. Not the samples' time deltas: a thread queued for a core takes the sample
 * due meanwhile when it runs again, so a delta holds the wait as well as the work.
 */
function selfTimes(profile: CpuProfile, startUs: number, endUs: number): Map<string, number> {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const intervalMs = SAMPLING_INTERVAL_US / 1000;
  const times = new Map<string, number>();
  let t = profile.startTime;
  for (let i = 0; i < profile.samples.length; i++) {
    t += profile.timeDeltas[i] ?? 0;
    if (t < startUs || t > endUs) continue;
    const node = byId.get(profile.samples[i] ?? -1);
    if (node === undefined || node.callFrame.functionName === "(idle)") continue;
    const key = functionKey(node);
    times.set(key, (times.get(key) ?? 0) + intervalMs);
  }
  return times;
}

function windowJson(window: PhaseWindow): object {
  return { ...window, pids: Object.fromEntries(window.pids) };
}

/** Prints, per phase and server, the functions that took the most CPU in the window. */
export function printProfiles(dir: string, windows: readonly PhaseWindow[]): void {
  // CPU.<date>.<time>.<pid>.<tid>.<seq>.cpuprofile
  const files = readdirSync(dir).filter((name) => name.endsWith(".cpuprofile"));
  const pidOf = (name: string): number => Number(name.split(".")[3]);
  // The windows next to the profiles, for a closer look at them afterwards.
  writeFileSync(path.join(dir, "windows.json"), JSON.stringify(windows.map(windowJson), null, 1));
  for (const window of windows) {
    if (window.endUs === null) continue;
    const ms = ((window.endUs - window.startUs) / 1000).toFixed(0);
    process.stdout.write(`${window.phase} (${ms} ms): self time by function, per server\n`);
    for (const [server, pids] of window.pids) {
      const times = new Map<string, number>();
      // Per process too: with several workers, the coordinator (the server's own pid, listed
      // first) and each worker.
      const perProcess: string[] = [];
      for (const pid of pids) {
        let own = 0;
        for (const file of files.filter((name) => pidOf(name) === pid)) {
          const profile = JSON.parse(readFileSync(path.join(dir, file), "utf8")) as CpuProfile;
          for (const [key, value] of selfTimes(profile, window.startUs, window.endUs)) {
            times.set(key, (times.get(key) ?? 0) + value);
            own += value;
          }
        }
        perProcess.push(`${pid === pids[0] ? "main" : "worker"} ${pid}: ${own.toFixed(0)} ms`);
      }
      const total = [...times.values()].reduce((sum, value) => sum + value, 0);
      if (total < 1) continue;
      const split = pids.length > 1 ? ` (${perProcess.join(", ")})` : "";
      process.stdout.write(
        `  ${server}: ${total.toFixed(0)} ms sampled on the main thread${split}\n`,
      );
      const top = [...times].sort((a, b) => b[1] - a[1]).slice(0, TOP);
      for (const [key, value] of top) {
        process.stdout.write(`    ${value.toFixed(1).padStart(7)} ms  ${key}\n`);
      }
    }
  }
}
