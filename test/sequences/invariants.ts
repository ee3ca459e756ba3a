/**
 * What every random crash sequence must keep, as probes that answer null when the invariant
 * holds and otherwise say what broke it. The sequence engine (engine.ts) turns an answer into a
 * failure that names the seed, the step and the replay command.
 */
import { CoordinationError, status, type Participants } from "#sdk/client/coordination.js";
import { inspectCheckpoint } from "#sdk/cli/inspect.js";
import {
  captureKey,
  rewardOf,
  type BackendCall,
  type CrashRun,
  type EpisodeId,
  type RunOutcome,
} from "../e2e/crash-harness.js";

/** A sequence that broke an invariant: what, where, and how to replay it. */
export class SequenceFailure extends Error {
  override name = "SequenceFailure";
  constructor(
    readonly seed: number,
    readonly step: string,
    detail: string,
  ) {
    super(
      `sequence ${seed} failed at ${step}: ${detail}\n` +
        `replay: npm run test:sequences -- --seed ${seed} --sequences 1`,
    );
  }
}

/** The HTTP status and error code of each member's failure in a coordination error. */
export function failuresOf(
  error: CoordinationError,
): Record<string, { status: number; code: string }> {
  const out: Record<string, { status: number; code: string }> = {};
  for (const [name, failure] of Object.entries(error.failures)) {
    const match = /^HTTP (\d+) (\S+)/.exec(failure);
    out[name] = { status: Number(match?.[1] ?? 0), code: match?.[2] ?? failure };
  }
  return out;
}

/**
 * A request of a crashed or retired attempt, sent to the counter it would have used, must be
 * refused with 409 `stale_attempt`.
 */
export async function staleAccepted(run: CrashRun, episode: EpisodeId): Promise<string | null> {
  const key = captureKey(episode);
  const res = await fetch(`${run.url("counter")}/ng-rollout/${key}/seed_session`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ initial_count: 0 }),
  });
  const body = (await res.json().catch(() => null)) as { error?: { code?: string } } | null;
  if (res.status === 409 && body?.error?.code === "stale_attempt") return null;
  return `a request of stale attempt ${key} was answered ${res.status} ${JSON.stringify(body)}`;
}

/** `gym ckpt inspect` of a committed checkpoint must find nothing wrong. */
export async function inspectProblems(dir: string): Promise<string | null> {
  const report = await inspectCheckpoint(dir);
  return report.problems.length === 0
    ? null
    : `gym ckpt inspect ${dir}: ${report.problems.join("; ")}`;
}

/** The largest `n_messages` of a call of `key` that returned to its rollout (0: none did). */
export function lastDelivered(calls: readonly BackendCall[], key: string): number {
  let last = 0;
  for (const call of calls) {
    if (call.rollout === key && call.returned) last = Math.max(last, call.n_messages);
  }
  return last;
}

/**
 * A delivered model call is never generated again for the same attempt: no two calls of a key
 * that returned carry the same conversation length.
 */
export function repeatedWithin(calls: readonly BackendCall[], key: string): string | null {
  const seen = new Set<number>();
  for (const call of calls) {
    if (call.rollout !== key || !call.returned) continue;
    if (seen.has(call.n_messages)) {
      return `${key} got a second delivered call at ${call.n_messages} messages`;
    }
    seen.add(call.n_messages);
  }
  return null;
}

/**
 * A restored attempt continues after the checkpoint: none of its calls asks for a turn the
 * checkpointed attempt had already been given (`delivered`: its last delivered call's length).
 */
export function repeatedAcross(
  calls: readonly BackendCall[],
  key: string,
  delivered: number,
): string | null {
  const again = calls.filter((c) => c.rollout === key && c.n_messages <= delivered);
  return again.length === 0
    ? null
    : `${key} generated again a turn delivered before the checkpoint (last delivered at ` +
        `${delivered} messages): ${JSON.stringify(again)}`;
}

/** Each rollout ended exactly once, with reward 1 (the counter saw the right count). */
export function endedOnce(id: string, outcomes: readonly RunOutcome[]): string | null {
  const ended = outcomes.filter((outcome) => typeof rewardOf(outcome) === "number");
  if (ended.length === 1 && rewardOf(ended[0] as RunOutcome) === 1) return null;
  return `${id}: outcomes ${JSON.stringify(outcomes.map(rewardOf))}`;
}

/** Every participant idle, with no checkpoint, no retired marks and no blockers (or null). */
export async function notIdle(participants: Participants): Promise<string | null> {
  const replies = await status(participants, 10_000);
  const busy = Object.entries(replies).filter(
    ([, reply]) =>
      reply.phase !== "idle" ||
      reply.checkpoint_id !== null ||
      reply.retired_rollouts !== 0 ||
      reply.report.blocker_count !== 0,
  );
  return busy.length === 0 ? null : JSON.stringify(Object.fromEntries(busy));
}
