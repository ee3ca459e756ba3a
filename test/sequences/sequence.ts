/**
 * One random crash sequence being played: its seeded PRNG, its counter rollouts (whose reward
 * needs the right count, so a lost or doubled increment shows), the step it is at, and the
 * operations and checks every scenario shares.
 */
import { forget, retire } from "#sdk/client/coordination.js";
import { SeededRandom as Random } from "#sdk/util/seeded-random.js";
import {
  Rollout,
  counterTask,
  episodeId,
  until,
  type EpisodeId,
  type PendingRun,
  type RunOutcome,
} from "../e2e/crash-harness.js";
import {
  SequenceFailure,
  endedOnce,
  inspectProblems,
  notIdle,
  repeatedWithin,
  staleAccepted,
} from "./invariants.js";
import type { Arming, SequenceWorld } from "./world.js";

/** A deadline `seconds` from now (Unix seconds). */
export function deadline(seconds = 60): number {
  return Date.now() / 1000 + seconds;
}

/** One rollout of a sequence and everything observed of it. */
export class Tracked {
  /** The attempt running now, or run last. */
  attempt = 0;
  /**
   * The last delivered call's `n_messages` of the attempts this one continues (0: it starts
   * from scratch): what its calls must never ask for again.
   */
  delivered = 0;
  readonly pending: { attempt: number; run: PendingRun }[] = [];
  readonly outcomes: { attempt: number; outcome: RunOutcome }[] = [];
  constructor(readonly rollout: Rollout) {}

  /** The episode of the attempt running now. */
  get episode(): EpisodeId {
    return this.rollout.episode(this.attempt);
  }
}

/** One sequence being played: its PRNG, rollouts, the step it is at, and the checks. */
export class Sequence {
  readonly random: Random;
  readonly rollouts: Tracked[];
  /** The calls each rollout makes before the held one (at least 1). */
  readonly heldAfter: number;
  /** Each step entered and when (ms since the sequence began), for `--trace`. */
  readonly timeline: { step: string; atMs: number }[] = [];
  readonly #began = Date.now();
  #step = "setup";
  crashes = 0;
  variant = "";
  interrupted: "whole" | "refused" | undefined;

  constructor(
    readonly world: SequenceWorld,
    readonly seed: number,
  ) {
    this.random = new Random(seed);
    const increments = Array.from({ length: this.random.int(1, 3) }, () => this.random.int(1, 2));
    this.rollouts = increments.map(
      (n, i) =>
        new Tracked(new Rollout("counter_env", counterTask(episodeId(`s${seed}-r${i}`), n))),
    );
    // A rollout of n increments makes n + 1 calls: hold one after the first.
    this.heldAfter = this.random.int(1, Math.min(...increments));
  }

  /** The step the sequence is at: what a failure names. */
  get step(): string {
    return this.#step;
  }

  set step(step: string) {
    this.#step = step;
    this.timeline.push({ step, atMs: Date.now() - this.#began });
  }

  get run() {
    return this.world.run;
  }

  /**
   * `SIGKILL` of every Gym process group and fresh processes, with failpoints armed in all or
   * some of them, or none; the step is named after it.
   */
  async crash(arming: Arming | null = null): Promise<void> {
    const at = this.step;
    this.step =
      arming === null
        ? `crash (at ${at})`
        : `crash, arming ${arming.failpoints} in ${arming.servers?.join(", ") ?? "every server"} (at ${at})`;
    await this.world.crashAndServe(arming);
    this.crashes++;
    this.step = `${at}, after the crash`;
  }

  /** Fails the sequence at the current step. */
  fail(detail: string): never {
    throw new SequenceFailure(this.seed, this.step, detail);
  }

  /** Fails with `problem` unless it is null. */
  holds(problem: string | null): void {
    if (problem !== null) this.fail(problem);
  }

  /** Starts `which` (default: all) as `attempt`, from scratch unless it was restored. */
  start(attempt: number, which: readonly Tracked[] = this.rollouts): void {
    for (const r of which) {
      r.delivered = 0; // a restored attempt's is set by whoever restored it
      r.attempt = attempt;
      r.pending.push({ attempt, run: this.run.start(r.rollout, attempt) });
    }
  }

  /** Holds each rollout's call after {@link heldAfter}, starts them, waits until all are held. */
  async startHeld(attempt: number): Promise<void> {
    await this.run.hold({ after_calls_per_rollout: this.heldAfter });
    this.start(attempt);
    await this.run.heldCalls(
      this.rollouts.map((r) => r.rollout.key(attempt)),
      60_000,
    );
  }

  /** Waits for every `/run` sent so far and records its outcome. */
  async settle(): Promise<void> {
    for (const r of this.rollouts) {
      for (const p of r.pending.splice(0)) {
        r.outcomes.push({ attempt: p.attempt, outcome: await p.run.outcome });
      }
    }
  }

  /** The attempts now running or run last, in rollout order. */
  episodes(): EpisodeId[] {
    return this.rollouts.map((r) => r.episode);
  }

  async staleRefused(episode: EpisodeId): Promise<void> {
    this.holds(await staleAccepted(this.run, episode));
  }

  async inspected(dir: string): Promise<void> {
    this.holds(await inspectProblems(dir));
  }

  /** The checks at the end of every sequence, then retire and forget down to idle. */
  async finish(): Promise<void> {
    this.step = "every rollout ends exactly once with reward 1";
    for (const r of this.rollouts) {
      this.holds(
        endedOnce(
          r.rollout.id,
          r.outcomes.map((o) => o.outcome),
        ),
      );
    }
    this.step = "no delivered call repeated within an attempt";
    const calls = await this.run.calls();
    for (const r of this.rollouts) {
      for (let attempt = 0; attempt <= r.attempt; attempt++) {
        this.holds(repeatedWithin(calls, r.rollout.key(attempt)));
      }
    }
    this.step = "retire and forget";
    await retire(
      this.world.participants,
      this.world.nextId(this.seed, "end"),
      this.episodes(),
      deadline(),
    );
    await forget(
      this.world.participants,
      this.world.nextId(this.seed, "forget"),
      this.rollouts.map((r) => r.rollout.id),
      deadline(),
    );
    this.step = "idle with nothing tracked";
    let last: string | null = null;
    await until(
      "every participant idle with nothing tracked",
      async () => (last = await notIdle(this.world.participants)) === null,
      30_000,
    ).catch(() => this.fail(`not idle after forget: ${last}`));
  }
}
