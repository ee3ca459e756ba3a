/**
 * The checkpoint pause as the controller sees it, stage by stage: every control call a
 * checkpoint makes (prepare per stage, commit, resume per stage) timed where it is sent, the
 * stretches between them (checking the shared storage and publishing the manifest sit between
 * the commit and the resume), and, on Linux, where each stage's time went in each server (the
 * same main-CPU / other-threads / queued / idle split as {@link phaseCpu}).
 *
 * A recorder wraps a {@link ServerClient}'s control calls; nothing in the SDK is changed for it.
 * The parts of a breakdown sum to its pause exactly: what no stage or gap covers is reported as
 * the unaccounted remainder.
 */
import type { ServerClient } from "#sdk/client/server-client.js";
import type { Operation } from "#sdk/wire/control.js";
import { phaseCpu, type PhaseCpu, type Snapshot } from "./cpu-breakdown.js";

/** One control call of a checkpoint, timed at the controller (`performance.now()` ms). */
export interface TimedCall {
  readonly server: string;
  readonly operation: Operation;
  readonly startMs: number;
  readonly endMs: number;
}

/** One stage of the pause: the calls of one operation to one participant kind, or a gap. */
export interface PauseStage {
  /** `prepare environment`, `commit`, `publish` (between commit and resume), `resume model`… */
  readonly name: string;
  readonly ms: number;
  /** Each server's call in the stage, in ms (empty for a gap). */
  readonly servers: readonly { readonly server: string; readonly ms: number }[];
  /** Where the stage's time went per server process tree; null where not measured. */
  readonly cpu: readonly PhaseCpu[] | null;
}

/** A checkpoint's pause, first admission closed → last participant reopened. */
export interface PauseBreakdown {
  readonly pauseMs: number;
  readonly stages: readonly PauseStage[];
  /** The pause no stage covers (the collector's own work before the first call, gaps). */
  readonly unaccountedMs: number;
}

const CHECKPOINT_OPERATIONS = new Set<Operation>(["prepare", "commit", "resume"]);

interface Boundary {
  readonly atMs: number;
  readonly snapshot: Snapshot | null;
}

/**
 * Records the checkpoint control calls made through one client. `kindOf` names each server's
 * participant kind; `snapshot`, when given, is read at every call's start and end (a few
 * `/proc` reads: about a millisecond each on the 2-core machine, inside the pause).
 */
export class PauseRecorder {
  readonly #kindOf: ReadonlyMap<string, string>;
  readonly #snapshot: (() => Snapshot) | null;
  #calls: TimedCall[] = [];
  #boundaries: Boundary[] = [];

  constructor(kindOf: ReadonlyMap<string, string>, snapshot: (() => Snapshot) | null) {
    this.#kindOf = kindOf;
    this.#snapshot = snapshot;
  }

  /** Times every checkpoint control call `client` sends from now on. */
  attach(client: ServerClient): void {
    const original = client.controlWithReply.bind(client);
    client.controlWithReply = async (server, operation, body, options) => {
      if (!CHECKPOINT_OPERATIONS.has(operation)) {
        return await original(server, operation, body, options);
      }
      const startMs = this.#mark();
      try {
        return await original(server, operation, body, options);
      } finally {
        this.#calls.push({ server, operation, startMs, endMs: this.#mark() });
      }
    };
  }

  /**
   * The breakdown of the pause that ended now and lasted `pauseMs` (as the collector measured
   * it), or from `startMs` to now; the calls it covers are forgotten.
   */
  finish(pause: { readonly pauseMs: number } | { readonly startMs: number }): PauseBreakdown {
    const end = this.#mark();
    return this.#breakdown("pauseMs" in pause ? end - pause.pauseMs : pause.startMs, end);
  }

  /**
   * The breakdown from the first recorded call's start to the last one's end, for a caller
   * with no pause of its own to measure (a scenario that crashes after its commit).
   */
  finishCalls(): PauseBreakdown {
    const startMs = Math.min(...this.#calls.map((c) => c.startMs));
    const end = Math.max(...this.#calls.map((c) => c.endMs));
    return this.#breakdown(startMs, end);
  }

  #breakdown(startMs: number, end: number): PauseBreakdown {
    const calls = this.#calls.filter((c) => c.startMs >= startMs);
    this.#calls = [];
    const stages: PauseStage[] = [];
    const groups: { name: string; calls: TimedCall[] }[] = [];
    for (const call of calls.sort((a, b) => a.startMs - b.startMs)) {
      const name =
        call.operation === "commit"
          ? "commit"
          : `${call.operation} ${this.#kindOf.get(call.server) ?? call.server}`;
      const last = groups.at(-1);
      if (last?.name === name) last.calls.push(call);
      else groups.push({ name, calls: [call] });
    }
    let covered = 0;
    let previousEnd: number | null = null;
    for (const group of groups) {
      const from = Math.min(...group.calls.map((c) => c.startMs));
      const to = Math.max(...group.calls.map((c) => c.endMs));
      // Between the commit and the first resume: the shared-storage check and the manifest.
      if (
        previousEnd !== null &&
        group.name.startsWith("resume") &&
        stages.at(-1)?.name === "commit"
      ) {
        stages.push({
          name: "publish",
          ms: from - previousEnd,
          servers: [],
          cpu: this.#cpu(previousEnd, from),
        });
        covered += from - previousEnd;
      }
      stages.push({
        name: group.name,
        ms: to - from,
        servers: group.calls.map((c) => ({ server: c.server, ms: c.endMs - c.startMs })),
        cpu: this.#cpu(from, to),
      });
      covered += to - from;
      previousEnd = to;
    }
    const pauseMs = end - startMs;
    this.#boundaries = this.#boundaries.slice(-1);
    return { pauseMs, stages, unaccountedMs: pauseMs - covered };
  }

  /** Marks an instant (a pause's start, where the caller knows it). */
  mark(): number {
    return this.#mark();
  }

  #mark(): number {
    const snapshot = this.#snapshot?.() ?? null;
    const atMs = performance.now();
    this.#boundaries.push({ atMs, snapshot });
    return atMs;
  }

  /** The CPU split between the boundaries nearest `from` and `to`. */
  #cpu(from: number, to: number): PhaseCpu[] | null {
    const nearest = (at: number): Snapshot | null => {
      let best: Boundary | null = null;
      for (const b of this.#boundaries) {
        if (best === null || Math.abs(b.atMs - at) < Math.abs(best.atMs - at)) best = b;
      }
      return best?.snapshot ?? null;
    };
    const a = nearest(from);
    const b = nearest(to);
    return a === null || b === null || a === b ? null : phaseCpu(a, b);
  }
}

/** Rows for a table: each stage's ms, its servers', and its CPU split. */
export function breakdownRows(breakdown: PauseBreakdown): [string, string][] {
  const ms = (x: number): string => `${x.toFixed(1)} ms`;
  const rows: [string, string][] = [["pause", ms(breakdown.pauseMs)]];
  for (const stage of breakdown.stages) {
    rows.push([`  ${stage.name}`, ms(stage.ms)]);
    if (stage.servers.length > 1) {
      for (const s of stage.servers) rows.push([`    ${s.server}`, ms(s.ms)]);
    }
    for (const c of stage.cpu ?? []) {
      if (c.mainCpu + c.otherCpu < 0.001) continue;
      rows.push([
        `    cpu ${c.server}`,
        `main ${ms(c.mainCpu * 1000)} | other threads ${ms(c.otherCpu * 1000)} | queued ${ms(c.mainQueued * 1000)}`,
      ]);
    }
  }
  rows.push(["  unaccounted", ms(breakdown.unaccountedMs)]);
  return rows;
}

/** The breakdown as one JSON line (what a test reads). */
export function breakdownLine(breakdown: PauseBreakdown): string {
  return `pause-breakdown ${JSON.stringify({
    pauseMs: breakdown.pauseMs,
    unaccountedMs: breakdown.unaccountedMs,
    stages: breakdown.stages.map((s) => ({ name: s.name, ms: s.ms, servers: s.servers })),
  })}\n`;
}
