/**
 * Random crash sequences against the reference deployment in real processes. One deployment
 * (world.ts) serves many sequences; each sequence starts its own counter rollouts (whose reward
 * needs the right count, so a lost or doubled increment shows), holds one model call of each so
 * they are truly in flight, and plays one seeded scenario (scenarios.ts) of prepare, commit,
 * resume, abort, lease expiry, retire, `SIGKILL` of every Gym process group (at a random moment,
 * or at an exact step of a commit or a restore through failpoints), restore of the latest or an
 * older checkpoint, and forget.
 *
 * Checked along the way and at the end of each sequence (invariants.ts):
 * - every rollout ends exactly once, with reward 1;
 * - no delivered model call is generated again, within an attempt or by its restored successor;
 * - no request of a crashed or retired attempt is accepted (`stale_attempt`);
 * - every committed checkpoint passes `gym ckpt inspect`;
 * - an interrupted commit restores whole, or is refused (typed 4xx) with nothing installed;
 * - after retire and forget, every participant is idle with nothing tracked.
 *
 * A failure throws {@link SequenceFailure} naming the seed, the step and the replay command.
 */
import { scriptOf } from "../e2e/crash-harness.js";
import { SequenceFailure } from "./invariants.js";
import { SCENARIOS, type Scenario } from "./scenarios.js";
import { Sequence } from "./sequence.js";
import type { SequenceWorld } from "./world.js";

export { SequenceFailure } from "./invariants.js";
export { SCENARIOS, type Scenario } from "./scenarios.js";
export { SequenceWorld } from "./world.js";

/** How a sequence went, for the runner's summary. */
export interface SequenceResult {
  readonly seed: number;
  readonly scenario: Scenario;
  /** The scenario's seeded variant (a failpoint, a lease phase...), for the summary. */
  readonly variant: string;
  readonly rollouts: number;
  readonly crashes: number;
  /** For an interrupted commit: whether its checkpoint restored whole or was refused. */
  readonly interrupted?: "whole" | "refused";
  /** Each step and when it began (ms since the sequence began). */
  readonly timeline: readonly { step: string; atMs: number }[];
}

/** Plays one seeded sequence against `world`. Throws {@link SequenceFailure}. */
export async function playSequence(world: SequenceWorld, seed: number): Promise<SequenceResult> {
  const sequence = new Sequence(world, seed);
  const scenario = sequence.random.pick(SCENARIOS.map(([name, weight]) => [name, weight] as const));
  try {
    sequence.step = "script";
    await world.run.script(scriptOf(sequence.rollouts.map((r) => r.rollout)));
    await (SCENARIOS.find(([name]) => name === scenario)?.[2] as (s: Sequence) => Promise<void>)(
      sequence,
    );
    await sequence.finish();
    return {
      seed,
      scenario,
      variant: sequence.variant,
      rollouts: sequence.rollouts.length,
      crashes: sequence.crashes,
      timeline: sequence.timeline,
      ...(sequence.interrupted ? { interrupted: sequence.interrupted } : {}),
    };
  } catch (error) {
    if (error instanceof SequenceFailure) throw error;
    throw new SequenceFailure(
      seed,
      sequence.step,
      error instanceof Error ? (error.stack ?? error.message) : String(error),
    );
  } finally {
    await world.run.release().catch(() => undefined);
    // A failed sequence may leave failpoints armed: the next one needs clean processes.
    if (world.armed !== null) await world.crashAndServe().catch(() => undefined);
  }
}
