/**
 * What a resumed collection does with each row the previous run may have started: the rows a
 * published checkpoint continues are restored, provided nothing newer than the checkpointed
 * attempt was ever sent; every other row the dispatch log names and the output lacks is fenced
 * (its newest logged attempt retired everywhere) and sent again as the next attempt.
 *
 * The "nothing newer was sent" rule is what makes an older checkpoint safe: a run that restored
 * checkpoint C and re-sent its rows, then died before checkpointing itself, leaves `LATEST` at C,
 * but its dispatch log holds the newer attempts, so C is not trusted for those rows.
 */
import { episodeId, type EpisodeId } from "../identity/episode-id.js";
import type { CollectionManifest, RowEpisode } from "./collection-dir.js";

/** A row of the run, named by its rollout ID. */
export interface RowRef {
  readonly row: number;
  readonly repeat: number;
}

/** The rollout ID of `row`'s `repeat`-th rollout in run `runId`. */
export function rowRolloutId(runId: string, row: number, repeat: number): string {
  return `${runId}-${row}-${repeat}`;
}

/** The row and repeat a rollout ID of run `runId` names, or null when it names none. */
export function parseRowRolloutId(runId: string, rolloutId: string): RowRef | null {
  if (!rolloutId.startsWith(`${runId}-`)) return null;
  const match = /^(\d+)-(\d+)$/.exec(rolloutId.slice(runId.length + 1));
  if (match === null) return null;
  const row = Number(match[1]);
  const repeat = Number(match[2]);
  if (!Number.isSafeInteger(row) || !Number.isSafeInteger(repeat)) return null;
  return { row, repeat };
}

/** A fenced row: retire `episode` everywhere, then send the row as the next attempt. */
export interface FencedRow extends RowRef {
  readonly episode: EpisodeId;
}

/** What a resume does. */
export interface ResumePlan {
  /** Checkpointed attempts to restore (each continues as its next attempt). */
  readonly restore: readonly RowEpisode[];
  /** Attempts to retire before their rows are sent again. */
  readonly fence: readonly FencedRow[];
}

/**
 * Plans a resume from the newest published checkpoint (or null), the dispatch log's newest
 * attempt per rollout, and the rollouts the output already holds.
 */
export function planResume(
  runId: string,
  manifest: CollectionManifest | null,
  newestLogged: ReadonlyMap<string, number>,
  ended: ReadonlySet<string>,
): ResumePlan {
  const restore: RowEpisode[] = [];
  const restored = new Set<string>();
  for (const entry of manifest?.continued ?? []) {
    if (ended.has(entry.rollout_id)) continue;
    if ((newestLogged.get(entry.rollout_id) ?? -1) > entry.attempt) continue;
    restore.push(entry);
    restored.add(entry.rollout_id);
  }
  const fence: FencedRow[] = [];
  for (const [rolloutId, attempt] of newestLogged) {
    if (ended.has(rolloutId) || restored.has(rolloutId)) continue;
    const ref = parseRowRolloutId(runId, rolloutId);
    if (ref === null) continue; // not a row of this run (the log is this run's alone)
    fence.push({ ...ref, episode: episodeId(rolloutId, attempt) });
  }
  fence.sort((a, b) => a.row - b.row || a.repeat - b.repeat);
  return { restore, fence };
}
