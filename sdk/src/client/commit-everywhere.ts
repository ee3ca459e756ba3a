/**
 * A commit on every participant of a deployment when the controller does not list the episodes
 * that continue: the one piece of controller policy the `gym ckpt` commands and library callers
 * share.
 */
import { fromCaptureKey, type EpisodeId } from "../identity/episode-id.js";
import type { CommitReply } from "../wire/storage.js";
import { commit, type CommitOptions, type Member, type Participants } from "./coordination.js";
import { CommitScopeRequiredError } from "./errors.js";
import { checkCommitShared } from "./shared-storage.js";

export { CommitScopeRequiredError } from "./errors.js";

/** What {@link commitEverywhere} commits. */
export interface CommitStep {
  readonly checkpointId: string;
  readonly checkpointDir: string;
  /** The continued episodes, or null: everything each participant holds. */
  readonly episodeIds: EpisodeId[] | null;
  /** A fresh deadline for each fan-out: the model's step must not get only what is left. */
  readonly deadlineTs: () => number;
}

/**
 * Commits on every participant. With an explicit scope that is one fan-out. With `null` it is
 * two when the deployment has a model: the contract has the model refuse a commit without
 * `episode_ids` (it cannot tell continued episodes from finished ones), and a shell has no list
 * of what is in flight. So the other participants commit first with `null`, and the model then
 * commits exactly the episodes they exported: the episodes in flight at a boundary (a prepare
 * that reported no restarts exports nothing else), restored ones still waiting included.
 *
 * Then, once every participant replied, checks that this machine sees what each one wrote
 * (see {@link checkCommitShared}).
 *
 * @throws CheckpointNotSharedError when some participant's state is not visible here: the
 * checkpoint directory is not on a file system every machine shares
 */
export async function commitEverywhere(
  participants: Participants,
  step: CommitStep,
): Promise<Record<string, CommitReply>> {
  const { members } = participants;
  const models = members.filter((member) => member.kind === "model");
  const options = (episodeIds: EpisodeId[] | null): CommitOptions => ({
    checkpointId: step.checkpointId,
    checkpointDir: step.checkpointDir,
    episodeIds,
    deadlineTs: step.deadlineTs(),
  });
  const replies = await commitFanOuts(participants, step, models, options);
  // Every participant wrote from its own machine: the checkpoint is usable only if this one
  // sees all of it (a directory on each node's own disk passes every commit otherwise).
  await checkCommitShared(participants.client.deployment, step.checkpointDir, replies);
  return replies;
}

async function commitFanOuts(
  participants: Participants,
  step: CommitStep,
  models: readonly Member[],
  options: (episodeIds: EpisodeId[] | null) => CommitOptions,
): Promise<Record<string, CommitReply>> {
  const { members } = participants;
  if (step.episodeIds !== null || models.length === 0) {
    return await commit(participants, options(step.episodeIds));
  }
  const others = members.filter((member) => member.kind !== "model");
  if (others.length === 0) {
    throw new CommitScopeRequiredError(
      "the model is the only participant, so nothing says which episodes continue",
    );
  }
  const first = await commit({ ...participants, members: others }, options(null));
  const exported = new Set(Object.values(first).flatMap((reply) => reply.episode_ids));
  const second = await commit(
    { ...participants, members: models },
    options([...exported].sort().map((key) => fromCaptureKey(key))),
  );
  return { ...first, ...second };
}
