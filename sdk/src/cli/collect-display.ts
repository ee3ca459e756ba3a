/**
 * What `gym collect` shows while it runs: on a terminal one status line redrawn in place
 * (done/total, in flight, rate, ETA, mean reward, failures, last checkpoint); otherwise the same
 * line every few seconds. Checkpoints, restores and fences print a line of their own.
 */
import type { CollectEvent, CollectProgress, CollectSummary } from "../collect/collect-report.js";

/** Plain (non-terminal) output prints the status line this often, in ms. */
export const PLAIN_EVERY_MS = 5_000;
const LIVE_EVERY_MS = 250;

function seconds(value: number): string {
  if (value < 90) return `${Math.round(value)}s`;
  if (value < 5_400)
    return `${Math.floor(value / 60)}m${String(Math.round(value % 60)).padStart(2, "0")}s`;
  return `${Math.floor(value / 3600)}h${String(Math.round((value % 3600) / 60)).padStart(2, "0")}m`;
}

/** The status line. */
export function statusLine(progress: CollectProgress, now = Date.now()): string {
  const parts = [
    `${progress.ended}/${progress.total} done`,
    `${progress.inFlight} in flight`,
    `${progress.rate.toFixed(1)}/s`,
    `ETA ${progress.etaSeconds === null ? "?" : seconds(progress.etaSeconds)}`,
    `reward ${progress.meanReward === null ? "-" : progress.meanReward.toFixed(3)}`,
    `${progress.failed} failed`,
  ];
  if (progress.fencing > 0) parts.push(`${progress.fencing} fencing`);
  const last = progress.lastCheckpoint;
  if (last !== null && last.status !== "unavailable") {
    const ago = Math.max(0, (now - Date.parse(last.at)) / 1000);
    parts.push(`checkpoint ${last.status} ${seconds(ago)} ago`);
  }
  return parts.join(" · ");
}

/** A line for an event. */
export function eventLine(event: CollectEvent): string {
  switch (event.type) {
    case "checkpoint": {
      const outcome = event.outcome;
      switch (outcome.status) {
        case "published":
          return `checkpoint ${outcome.checkpointId} published: ${outcome.continued} rows continued, ${outcome.restarted} restarted, dispatch paused ${Math.round(outcome.pauseMs)} ms`;
        case "missed": {
          const busy = Object.entries(outcome.blockers)
            .map(([server, blockers]) => `${server}: ${blockers.length}`)
            .join(", ");
          return `checkpoint ${outcome.checkpointId} missed its deadline (still busy: ${busy}); the run goes on`;
        }
        case "failed":
          return `checkpoint ${outcome.checkpointId} failed: ${outcome.error}; the run goes on`;
        default:
          return `no checkpoint: ${outcome.reason}`;
      }
    }
    case "restored":
      return `restored ${event.rows} rows from checkpoint ${event.checkpointId}`;
    case "restore_failed":
      return `restoring checkpoint ${event.checkpointId} failed (${event.error}); its rows start over`;
    case "fenced":
      return `fenced ${event.rows} rows the previous run had sent; they go again as their next attempt`;
    case "recovered":
      return `resumed checkpoint(s) a previous controller left open: ${event.checkpointIds.join(", ")}`;
    case "reachable":
      return `${event.servers.join(", ")} answer again: checkpoints go on`;
  }
}

/** The summary printed at the end (without `--json`). */
export function summaryLines(summary: CollectSummary): string[] {
  const lines = [
    summary.status === "complete"
      ? `collection ${summary.runId} complete: ${summary.ended}/${summary.total} rollouts ended`
      : summary.status === "failing"
        ? `collection ${summary.runId} stopped at ${summary.ended}/${summary.total} rollouts: the last ${summary.failureStreak?.rollouts ?? 0} failed the same way (not written: a --resume sends them again)`
        : `collection ${summary.runId} stopped at ${summary.ended}/${summary.total} rollouts${summary.stopCheckpoint === true ? " (checkpoint published: continue with --resume)" : ""}`,
    `  finished ${summary.finished}, failed ${summary.failed}, mean reward ${summary.meanReward === null ? "-" : summary.meanReward.toFixed(4)}`,
    `  this session (${summary.session}): ${seconds(summary.elapsedSeconds)}, ${summary.rate.toFixed(1)} rollouts/s, ${summary.restored} restored, ${summary.fenced} fenced`,
    `  checkpoints: ${summary.checkpoints.published} published, ${summary.checkpoints.missed} missed, ${summary.checkpoints.failed} failed`,
    `  output: ${summary.output}`,
  ];
  if (summary.checkpointDir !== null)
    lines.push(`  checkpoint directory: ${summary.checkpointDir}`);
  return lines;
}

/** Draws progress to a terminal, or prints it now and then. */
export class CollectDisplay {
  #timer: NodeJS.Timeout | null = null;
  #drawn = false;

  constructor(
    readonly progress: () => CollectProgress,
    readonly print: (line: string) => void,
    /** Where a terminal's live line goes (no newline), or null for plain output. */
    readonly live: ((text: string) => void) | null,
  ) {}

  start(): void {
    this.#timer = setInterval(
      () => this.#tick(),
      this.live === null ? PLAIN_EVERY_MS : LIVE_EVERY_MS,
    );
    this.#timer.unref();
  }

  #tick(): void {
    const line = statusLine(this.progress());
    if (this.live === null) this.print(line);
    else {
      this.live(`\r\x1b[2K${line}`);
      this.#drawn = true;
    }
  }

  /** Prints a line above the live one. */
  line(text: string): void {
    this.#clear();
    this.print(text);
    if (this.live !== null) this.#tick();
  }

  #clear(): void {
    if (this.live !== null && this.#drawn) {
      this.live("\r\x1b[2K");
      this.#drawn = false;
    }
  }

  stop(): void {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    this.#clear();
  }
}
