/**
 * The scenarios a random crash sequence plays, each with its seeded variants. Every scenario
 * starts from an idle deployment with its rollouts scripted and leaves them all ended (the
 * engine then checks the rewards, retires, forgets, and waits for idle).
 */
import path from "node:path";
import {
  CoordinationError,
  commit,
  prepare,
  restore,
  resume,
  retire,
  status,
  type PrepareResult,
} from "#sdk/client/coordination.js";
import { FAILPOINTS, type FailpointName } from "#sdk/util/failpoints.js";
import { nextAttempt } from "#sdk/identity/episode-id.js";
import { rewardOf, until, type EpisodeId } from "../e2e/crash-harness.js";
import { failuresOf, lastDelivered, repeatedAcross } from "./invariants.js";
import { deadline, type Sequence } from "./sequence.js";
import type { Arming } from "./world.js";

/** The failpoints of a commit, in the order a commit reaches them. */
const COMMIT_POINTS = FAILPOINTS.filter((p) => p.startsWith("commit."));
/** The failpoints of a restore, the capture ledger's import included. */
const RESTORE_POINTS = FAILPOINTS.filter((p) => !p.startsWith("commit."));

/**
 * `SIGKILL` at `point` in every participant, or (half the time) in a random few: the others get
 * past it (a commit they publish, a restore they install).
 */
function armed(s: Sequence, point: FailpointName): Arming {
  const failpoints = `${point}=crash`;
  if (s.random.chance(0.5)) return { failpoints };
  const members = s.world.participants.members.map((m) => m.name);
  const some = members.filter(() => s.random.chance(0.5));
  return { failpoints, servers: some.length > 0 ? some : [s.random.one(members)] };
}

function describeArming(arming: Arming): string {
  const point = arming.failpoints.replace(/=crash$/, "");
  return `${point} in ${arming.servers?.join(", ") ?? "every participant"}`;
}

/** A checkpoint a sequence committed (or tried to), and what it holds. */
interface Taken {
  readonly id: string;
  readonly dir: string;
  /** The checkpointed attempts, in rollout order. */
  readonly episodes: readonly EpisodeId[];
  /** Per rollout ID, its last delivered call's `n_messages` when the checkpoint was taken. */
  readonly delivered: ReadonlyMap<string, number>;
}

/** Prepares `id`, which must complete with no restarts (every held call is cut). */
async function prepared(s: Sequence, id: string, seconds = 30): Promise<PrepareResult> {
  const result = await prepare(s.world.participants, id, deadline(seconds));
  if (!result.prepared) s.fail(`prepare did not complete: ${JSON.stringify(result.blockers())}`);
  if (result.restarts().length > 0) {
    s.fail(`held rollouts reported as restarts: ${JSON.stringify(result.restarts())}`);
  }
  return result;
}

/** What a checkpoint taken now holds: the attempts in flight and what each was delivered. */
async function taking(s: Sequence, id: string): Promise<Taken> {
  const calls = await s.run.calls();
  const delivered = new Map<string, number>();
  for (const r of s.rollouts) {
    delivered.set(
      r.rollout.id,
      Math.max(r.delivered, lastDelivered(calls, r.rollout.key(r.attempt))),
    );
  }
  return { id, dir: path.join(s.world.dir, "checkpoints", id), episodes: s.episodes(), delivered };
}

/**
 * Prepare, commit (checked by `gym ckpt inspect`), and resume (unless `resume` is false, so a
 * crash comes while the checkpoint is still open): one checkpoint.
 */
async function checkpoint(s: Sequence, options: { resume?: boolean } = {}): Promise<Taken> {
  const id = s.world.nextId(s.seed, "ckpt");
  const result = await prepared(s, id);
  const taken = await taking(s, id);
  await commit(s.world.participants, {
    checkpointId: id,
    checkpointDir: taken.dir,
    episodeIds: result.continued(taken.episodes),
    deadlineTs: deadline(60),
  });
  await s.inspected(taken.dir);
  if (options.resume !== false) await resume(s.world.participants, id, deadline(30));
  return taken;
}

/** Crashed attempts never succeed: each `/run` sent before the crash ended without a reward. */
async function deadEndedUnrewarded(s: Sequence): Promise<void> {
  await s.settle();
  for (const r of s.rollouts) {
    for (const { attempt, outcome } of r.outcomes) {
      if (typeof rewardOf(outcome) === "number") {
        s.fail(`${r.rollout.key(attempt)} ended with a reward though its processes were killed`);
      }
    }
  }
}

/**
 * Restores `taken` under a new ID and resumes. Resolves the restore's coordination error
 * instead of throwing it (the caller decides whether a refusal is allowed).
 */
async function restoring(s: Sequence, taken: Taken): Promise<CoordinationError | null> {
  const id = s.world.nextId(s.seed, "restore");
  try {
    await restore(s.world.participants, {
      checkpointId: id,
      checkpointDir: taken.dir,
      episodeIds: taken.episodes,
      deadlineTs: deadline(60),
    });
  } catch (error) {
    if (error instanceof CoordinationError) return error;
    throw error;
  }
  await resume(s.world.participants, id, deadline(30));
  return null;
}

/**
 * Starts the attempts that continue `taken` (after checking its checkpointed attempts are
 * fenced); each inherits what its predecessors were delivered.
 */
async function startRestored(s: Sequence, taken: Taken): Promise<void> {
  s.step = "stale attempts after restore";
  for (const episode of taken.episodes) await s.staleRefused(episode);
  s.step = "continue the restored attempts";
  for (const [i, r] of s.rollouts.entries()) {
    s.start(nextAttempt(taken.episodes[i] as EpisodeId).attempt, [r]);
    r.delivered = taken.delivered.get(r.rollout.id) ?? 0;
  }
}

/**
 * The restored attempts run to the end, continuing after the checkpoint: no turn delivered
 * before it is generated again.
 */
async function continueRestored(s: Sequence, taken: Taken): Promise<void> {
  await startRestored(s, taken);
  await s.settle();
  s.step = "no delivered call repeated after restore";
  const calls = await s.run.calls();
  for (const r of s.rollouts) {
    s.holds(
      repeatedAcross(calls, r.rollout.key(r.attempt), taken.delivered.get(r.rollout.id) ?? 0),
    );
  }
}

/** The rollouts run free from the start. */
async function runThrough(s: Sequence): Promise<void> {
  s.step = "run through";
  await s.run.release();
  s.start(0);
  await s.settle();
}

/** Some in-flight rollouts are retired; they end unrewarded and start over, the rest go on. */
async function retireRestart(s: Sequence): Promise<void> {
  s.step = "retire in flight";
  await s.startHeld(0);
  const retired = s.rollouts.filter((r, i) => i === 0 || s.random.chance(0.5));
  s.variant = `${retired.length}/${s.rollouts.length} retired`;
  await retire(
    s.world.participants,
    s.world.nextId(s.seed, "retire"),
    retired.map((r) => r.episode),
    deadline(),
  );
  await s.run.release();
  await s.settle();
  for (const r of retired) {
    const last = r.outcomes.at(-1);
    if (last === undefined || typeof rewardOf(last.outcome) === "number") {
      s.fail(`retired ${r.rollout.key(0)} still ended with ${JSON.stringify(last?.outcome)}`);
    }
    await s.staleRefused(r.rollout.episode(0));
  }
  s.step = "start the retired over";
  s.start(1, retired);
  await s.settle();
}

/** Prepare, then abort (resume without a commit): the parked rollouts go on. */
async function prepareAbort(s: Sequence): Promise<void> {
  s.step = "prepare then abort";
  await s.startHeld(0);
  const id = s.world.nextId(s.seed, "abort");
  await prepared(s, id);
  await resume(s.world.participants, id, deadline(30));
  await s.run.release();
  await s.settle();
}

/**
 * Prepare (and maybe commit) with a short deadline, then nobody calls: every participant's lease
 * expires and it resumes on its own; the stale controller's late commit is fenced.
 */
async function leaseExpiry(s: Sequence): Promise<void> {
  s.step = "prepare with a short lease";
  await s.startHeld(0);
  const id = s.world.nextId(s.seed, "lease");
  const seconds = s.random.int(0, 2);
  const result = await prepare(s.world.participants, id, deadline(seconds));
  const taken = await taking(s, id);
  const late = () =>
    commit(s.world.participants, {
      checkpointId: id,
      checkpointDir: taken.dir,
      episodeIds: result.continued(taken.episodes),
      deadlineTs: deadline(30),
    });
  s.variant = result.prepared ? "prepared" : "preparing";
  if (result.prepared && s.random.chance(0.5)) {
    s.step = "commit with a short lease";
    try {
      await commit(s.world.participants, {
        checkpointId: id,
        checkpointDir: taken.dir,
        episodeIds: result.continued(taken.episodes),
        deadlineTs: deadline(seconds + 2),
      });
      s.variant = "committed";
      await s.inspected(taken.dir);
    } catch (error) {
      if (!(error instanceof CoordinationError)) throw error;
      s.variant = "commit past its deadline"; // under load: the lease expires all the same
    }
  }
  s.step = `lease expiry (${s.variant})`;
  let last = "";
  await until(
    "every lease to expire",
    async () => {
      const replies = await status(s.world.participants, 10_000);
      last = JSON.stringify(replies);
      return Object.values(replies).every((r) => r.phase === "idle" && r.checkpoint_id === null);
    },
    60_000,
  ).catch(() => s.fail(`a participant did not resume on its own: ${last}`));
  s.step = "late commit of the expired checkpoint";
  const refused = await late().then(
    () => null,
    (error: unknown) => error,
  );
  if (!(refused instanceof CoordinationError))
    s.fail(`accepted or failed untyped: ${String(refused)}`);
  for (const [name, { status: code, code: error }] of Object.entries(failuresOf(refused))) {
    // A participant prepare reached resumed it (stale); one it never reached is simply idle.
    const expected = name in result.replies ? "stale_checkpoint" : "invalid_phase";
    if (code !== 409 || error !== expected)
      s.fail(`${name} answered ${code} ${error}, not ${expected}`);
  }
  if (Object.keys(refused.failures).length !== s.world.participants.members.length) {
    s.fail(`some participants accepted the late commit: ${JSON.stringify(refused.failures)}`);
  }
  await s.run.release();
  await s.settle();
}

/** One or two checkpoints of the in-flight rollouts, each resumed; the rollouts finish. */
async function checkpointResume(s: Sequence): Promise<void> {
  await s.startHeld(0);
  const rounds = s.random.int(1, 2);
  s.variant = `${rounds} checkpoint(s)`;
  for (let round = 1; round <= rounds; round++) {
    s.step = `checkpoint ${round}`;
    await checkpoint(s);
  }
  s.step = "release after resume";
  await s.run.release();
  await s.settle();
}

/** When the crash comes, relative to the last checkpoint of a sequence. */
const CRASH_MOMENTS = ["after its resume", "before its resume", "before its commit"] as const;

/**
 * One or two checkpoints, then `SIGKILL` of every Gym process group (after the last one's
 * resume, before it, or before its commit), and a restore of the latest or the older committed
 * checkpoint into fresh processes; with none committed, the rollouts start over. Half the time
 * the fresh processes (all, or a random few) die at a failpoint of that restore: every process
 * is killed again and the restore repeated, which must work.
 */
async function checkpointCrash(s: Sequence): Promise<void> {
  await s.startHeld(0);
  const taken: Taken[] = [];
  const rounds = s.random.int(1, 2);
  const moment = s.random.one(CRASH_MOMENTS);
  for (let round = 1; round <= rounds; round++) {
    s.step = `checkpoint ${round}`;
    if (round < rounds || moment === "after its resume") taken.push(await checkpoint(s));
    else if (moment === "before its resume") taken.push(await checkpoint(s, { resume: false }));
    else await prepared(s, s.world.nextId(s.seed, "ckpt"));
  }
  const chosen = taken.length === 0 ? null : s.random.one(taken);
  const point = chosen !== null && s.random.chance(0.5) ? s.random.one(RESTORE_POINTS) : null;
  const arming = point === null ? null : armed(s, point);
  s.variant =
    `crash ${moment} of ${rounds}, ` +
    (chosen === null
      ? "nothing committed"
      : `restore ${taken.indexOf(chosen) + 1} of ${taken.length} committed`) +
    (arming === null ? "" : `, crash at ${describeArming(arming)}`);
  s.step = "crash";
  await s.crash(arming);
  await s.run.release();
  await deadEndedUnrewarded(s);
  if (chosen === null) {
    s.step = "start over with nothing committed";
    const dead = s.episodes();
    await retire(s.world.participants, s.world.nextId(s.seed, "retire"), dead, deadline());
    for (const episode of dead) await s.staleRefused(episode);
    s.start(1);
    await s.settle();
    return;
  }
  s.step = `restore ${chosen.id}`;
  let refused = await restoring(s, chosen);
  if (point !== null) {
    // Whether or not the point was reached, the processes are killed again (none stays armed).
    s.variant += refused === null ? " (not reached)" : "";
    s.step = `restore ${chosen.id} again after a crash at ${point}`;
    await s.crash();
    refused = await restoring(s, chosen);
  }
  if (refused !== null) s.fail(`the restore of a whole checkpoint failed: ${refused.message}`);
  await continueRestored(s, chosen);
}

/**
 * `SIGKILL` at an exact step of a commit of restored attempts: a checkpoint, a crash into fresh
 * processes armed with a commit failpoint, a restore, the restored attempts held in their first
 * call, a second checkpoint whose commit kills the armed participants (all, or a random few that
 * the others outlive and publish their part) at the point, the rest killed,
 * and a restore of what that commit left into fresh processes. It restores whole, or is refused
 * with typed 4xx replies and nothing installed (the rollouts then start over).
 */
async function crashInCommit(s: Sequence): Promise<void> {
  await s.startHeld(0);
  s.step = "checkpoint 1";
  const first = await checkpoint(s);
  const point = s.random.one(COMMIT_POINTS);
  const arming = armed(s, point);
  s.variant = `crash at ${describeArming(arming)}`;
  s.step = "crash";
  await s.crash(arming);
  await s.run.release();
  await deadEndedUnrewarded(s);
  s.step = `restore ${first.id}`;
  const failed = await restoring(s, first);
  if (failed !== null) s.fail(`the restore of a whole checkpoint failed: ${failed.message}`);
  await s.run.hold({ after_calls_per_rollout: 0 });
  await startRestored(s, first);
  await s.run.heldCalls(
    s.rollouts.map((r) => r.rollout.key(r.attempt)),
    60_000,
  );
  s.step = "checkpoint 2";
  const id = s.world.nextId(s.seed, "ckpt");
  const result = await prepared(s, id);
  const taken = await taking(s, id);
  s.step = `commit dying at ${point}`;
  const committed = await commit(s.world.participants, {
    checkpointId: id,
    checkpointDir: taken.dir,
    episodeIds: result.continued(taken.episodes),
    deadlineTs: deadline(60),
  }).then(
    () => null,
    (error: unknown) => error,
  );
  if (committed === null) s.fail(`the commit succeeded though participants die at ${point}`);
  await s.crash();
  await s.run.release();
  await deadEndedUnrewarded(s);
  s.step = `restore the commit interrupted at ${point}`;
  const refused = await restoring(s, taken);
  if (refused === null) {
    s.interrupted = "whole";
    await s.inspected(taken.dir);
    await continueRestored(s, taken);
    return;
  }
  s.interrupted = "refused";
  const failures = failuresOf(refused);
  for (const [name, { status: code, code: error }] of Object.entries(failures)) {
    if (code < 400 || code >= 500) s.fail(`${name} refused the restore with ${code} ${error}`);
  }
  s.step = "nothing installed by the refused restore";
  // Refused by every participant or by some, the rollback retired the replacements everywhere
  // (with the crashed attempts below them), and the rollouts start over as the attempt after.
  for (const episode of taken.episodes) await s.staleRefused(episode);
  for (const episode of taken.episodes) await s.staleRefused(nextAttempt(episode));
  s.step = "start over after a refused restore";
  for (const [i, r] of s.rollouts.entries()) {
    const replacement = nextAttempt(taken.episodes[i] as EpisodeId).attempt;
    s.start(replacement + 1, [r]);
  }
  await s.settle();
}

/** Every scenario: its name, how often it is drawn, and how it plays. */
export const SCENARIOS = [
  ["run-through", 1, runThrough],
  ["retire-restart", 1, retireRestart],
  ["prepare-abort", 1, prepareAbort],
  ["lease-expiry", 1, leaseExpiry],
  ["checkpoint-resume", 2, checkpointResume],
  ["checkpoint-crash", 2, checkpointCrash],
  ["crash-in-commit", 1, crashInCommit],
] as const satisfies readonly (readonly [string, number, (s: Sequence) => Promise<void>])[];

/** A scenario's name. */
export type Scenario = (typeof SCENARIOS)[number][0];
