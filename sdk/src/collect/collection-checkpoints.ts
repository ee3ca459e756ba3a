/**
 * The coordination steps of a collection against its participants: a checkpoint (prepare,
 * commit the rows in scope, check that this machine sees what each participant wrote, publish
 * the manifest), the restore of the latest one, the abort of checkpoints a dead controller left
 * open, and retire and forget in batches. The {@link Collection} decides when each runs, and
 * pauses dispatch around them.
 *
 * @see docs/collect.md
 */
import {
  commit,
  forget,
  prepare,
  restore,
  resume,
  retire,
  status,
  CoordinationError,
  type Participants,
} from "../client/coordination.js";
import { checkCommitShared, checkRestoreShared, writersOf } from "../client/shared-storage.js";
import type { EpisodeId } from "../identity/episode-id.js";
import type { ResolvedDeployment } from "../wire/deployment.js";
import type { CheckpointOutcome } from "./collect-report.js";
import type { CollectionDir, CollectionManifest, RowEpisode } from "./collection-dir.js";

/** Rollouts per retire or forget call. */
const CONTROL_BATCH = 1_000;

/** A run's side of its coordination steps. */
export interface CollectionSteps {
  readonly participants: Participants;
  readonly deployment: ResolvedDeployment;
  /** The deadline of the next step, in seconds since the epoch (each step takes its own). */
  deadline(): number;
}

/** A rollout a checkpoint names: in flight, or restored and not yet sent. */
export interface CheckpointRow {
  readonly episode: EpisodeId;
  readonly row: { readonly index: number };
  readonly repeat: number;
}

/** Where a checkpoint is published, and the run it belongs to. */
export interface CheckpointTarget {
  readonly dir: CollectionDir;
  readonly runId: string;
  readonly session: number;
}

/**
 * Takes checkpoint `id` of `rows`: prepares; when every participant is ready, commits the rows
 * they can continue (`stop` parks what they export), checks that this machine sees what each
 * wrote, and publishes the manifest, which names the other rows as restarted. A prepare not ready
 * by its deadline is `missed`. Throws when a step fails; resuming is the caller's. The outcome's
 * `pauseMs` is 0: the caller measures the pause.
 */
export async function takeCheckpoint(
  steps: CollectionSteps,
  target: CheckpointTarget,
  id: string,
  rows: readonly CheckpointRow[],
  stop: boolean,
): Promise<Extract<CheckpointOutcome, { status: "published" | "missed" }>> {
  const { participants } = steps;
  const { dir } = target;
  const prepared = await prepare(participants, id, steps.deadline());
  if (!prepared.prepared) {
    return { status: "missed", checkpointId: id, blockers: prepared.blockers(), pauseMs: 0 };
  }
  const scope = prepared.continued(rows.map((row) => row.episode));
  const inScope = new Set(scope.map((episode) => episode.rollout_id));
  const replies = await commit(participants, {
    checkpointId: id,
    checkpointDir: dir.checkpointDir(id),
    episodeIds: scope,
    deadlineTs: steps.deadline(),
    ...(stop ? { stop: true } : {}),
  });
  // Published only if this machine sees what every participant wrote from its own.
  await checkCommitShared(steps.deployment, dir.checkpointDir(id), replies);
  const entry = (row: CheckpointRow): RowEpisode => ({
    rollout_id: row.episode.rollout_id,
    attempt: row.episode.attempt,
    row: row.row.index,
    repeat: row.repeat,
  });
  const manifest: CollectionManifest = {
    format: 1,
    run_id: target.runId,
    session: target.session,
    checkpoint_id: id,
    created_at: new Date().toISOString(),
    continued: rows.filter((row) => inScope.has(row.episode.rollout_id)).map(entry),
    restarted: rows.filter((row) => !inScope.has(row.episode.rollout_id)).map(entry),
    writers: writersOf(replies),
  };
  await dir.publish(manifest);
  return {
    status: "published",
    checkpointId: id,
    continued: manifest.continued.length,
    restarted: manifest.restarted.length,
    pauseMs: 0,
  };
}

/**
 * Restores `episodes` (their replacement attempts) from the checkpoint `manifest` names, then
 * resumes it. Refused first, naming who wrote what is missing, when this machine does not see
 * every participant's state, rather than by each participant.
 */
export async function restoreCheckpoint(
  steps: CollectionSteps,
  dir: CollectionDir,
  manifest: CollectionManifest,
  episodes: readonly EpisodeId[],
): Promise<void> {
  const { participants } = steps;
  await checkRestoreShared(
    steps.deployment,
    dir.checkpointDir(manifest.checkpoint_id),
    participants.members,
    manifest.writers,
  );
  await restore(participants, {
    checkpointId: manifest.checkpoint_id,
    checkpointDir: dir.checkpointDir(manifest.checkpoint_id),
    episodeIds: episodes,
    deadlineTs: steps.deadline(),
  });
  await resume(participants, manifest.checkpoint_id, steps.deadline());
}

/**
 * Aborts the checkpoints a dead controller left open (participants refuse retire meanwhile);
 * returns their IDs, sorted.
 */
export async function recoverOpenCheckpoints(
  steps: CollectionSteps,
  statusTimeoutMs: number,
): Promise<string[]> {
  const replies = await status(steps.participants, statusTimeoutMs);
  const open = new Set<string>();
  for (const reply of Object.values(replies)) {
    if (reply.phase !== "idle" && reply.checkpoint_id !== null) open.add(reply.checkpoint_id);
  }
  for (const id of open) await resume(steps.participants, id, steps.deadline());
  return [...open].sort();
}

/** Retires `episodes` everywhere, in batches, each call with its own `controlId()`. */
export async function retireInBatches(
  steps: CollectionSteps,
  controlId: () => string,
  episodes: readonly EpisodeId[],
): Promise<void> {
  for (let i = 0; i < episodes.length; i += CONTROL_BATCH) {
    await retire(
      steps.participants,
      controlId(),
      episodes.slice(i, i + CONTROL_BATCH),
      steps.deadline(),
    );
  }
}

/** Forgets the rollouts `ids` everywhere, in batches, each call with its own `controlId()`. */
export async function forgetInBatches(
  steps: CollectionSteps,
  controlId: () => string,
  ids: readonly string[],
): Promise<void> {
  for (let i = 0; i < ids.length; i += CONTROL_BATCH) {
    await forget(
      steps.participants,
      controlId(),
      ids.slice(i, i + CONTROL_BATCH),
      steps.deadline(),
    );
  }
}

/**
 * What to say when every participant refused to restore checkpoint `id` as one it already
 * resumed: the servers are the processes that took it and kept running after the collector was
 * lost. The contract restores only into fresh processes (a policy model that has served calls
 * refuses any restore), so the rows start over; restarting the servers first would continue them.
 */
export function outlivedCollector(error: unknown, id: string): string | null {
  if (!(error instanceof CoordinationError)) return null;
  const codes = Object.values(error.codes());
  const failed = Object.keys(error.failures).length;
  if (failed === 0 || codes.length !== failed || codes.some((c) => c !== "stale_checkpoint")) {
    return null;
  }
  return (
    `the servers are the processes that took checkpoint ${id} and resumed it (every one refused ` +
    "409 stale_checkpoint): they outlived the previous collector, and a restore needs freshly " +
    "started servers (restart them before --resume to continue such rows from their boundaries)"
  );
}
