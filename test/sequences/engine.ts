/**
 * Random crash sequences against the reference deployment in real processes. One deployment
 * serves many sequences; each sequence starts its own rollouts (counter tasks whose reward needs
 * the restored count), holds some model calls so they are truly in flight, and then plays one
 * seeded scenario: run through, retire and start over, prepare and abort, checkpoint and resume,
 * checkpoint and crash (SIGKILL of every Gym process group) and restore the latest or an older
 * checkpoint, or crash in the middle of a commit and restore what it left.
 *
 * Checked after every step and at the end of each sequence:
 * - every rollout ends exactly once, with reward 1 (the count survived);
 * - no model call delivered before a checkpoint is generated again for a continued rollout;
 * - no request of a crashed or retired attempt is accepted (`stale_attempt`);
 * - every committed checkpoint passes `gym ckpt inspect`;
 * - an interrupted commit restores whole, or is refused (a typed 4xx) with nothing installed;
 * - after retire and forget, every participant is idle with nothing retired or in flight.
 *
 * A failure throws {@link SequenceFailure} naming the seed and the replay command.
 */
import path from "node:path";
import {
  CoordinationError,
  commit,
  forget,
  prepare,
  restore,
  resume,
  retire,
  status,
  type Participants,
} from "../../sdk/src/client/coordination.js";
import { inspectCheckpoint } from "../../sdk/src/cli/inspect.js";
import { Random } from "../support/seeded-random.js";
import {
  CrashRun,
  Rollout,
  counterTask,
  episodeId,
  rewardOf,
  scriptOf,
  until,
  type BackendCall,
  type EpisodeId,
  type PendingRun,
  type RunOutcome,
} from "../e2e/crash-harness.js";

/** A sequence that broke an invariant: what, and how to replay it. */
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

/** The scenarios a sequence plays, with how often each is drawn. */
export const SCENARIOS = [
  ["run-through", 1],
  ["retire-restart", 1],
  ["prepare-abort", 1],
  ["checkpoint-resume", 2],
  ["checkpoint-crash", 1],
  ["crash-in-commit", 1],
] as const;
export type Scenario = (typeof SCENARIOS)[number][0];

/** How a sequence went, for the runner's summary. */
export interface SequenceResult {
  readonly seed: number;
  readonly scenario: Scenario;
  readonly rollouts: number;
  readonly crashes: number;
  /** For crash-in-commit: whether the interrupted checkpoint restored whole or was refused. */
  readonly interrupted?: "whole" | "refused";
}

const SECONDS = 1000;

/** A deadline `seconds` from now (Unix seconds). */
function deadline(seconds = 60): number {
  return Date.now() / 1000 + seconds;
}

/** The world every sequence shares: one deployment, its participants, a counter of crashes. */
export class SequenceWorld {
  readonly run: CrashRun;
  participants!: Participants;
  #checkpoints = 0;

  /** `compiled`: the built CLI and servers, which start about twice as fast (see CrashRun). */
  constructor(
    readonly dir: string,
    options: { compiled?: boolean } = {},
  ) {
    this.run = new CrashRun(dir, "deployment.yaml", options);
  }

  async start(): Promise<void> {
    await this.run.serve();
    this.participants = await this.run.participants();
  }

  async stop(): Promise<void> {
    await this.run.cleanup();
  }

  /** SIGKILL of every Gym process group, then fresh processes (the backend lives on). */
  async crashAndServe(): Promise<void> {
    await this.run.crash();
    await this.run.serve({ afterCrash: true });
    this.participants = await this.run.participants();
  }

  nextCheckpointId(seed: number): string {
    return `s${seed}-c${++this.#checkpoints}`;
  }
}

/** One rollout of a sequence and everything observed of it. */
class Tracked {
  /** The attempt now running or last run. */
  attempt = 0;
  readonly pending: { attempt: number; run: PendingRun }[] = [];
  readonly outcomes: { attempt: number; outcome: RunOutcome }[] = [];
  constructor(readonly rollout: Rollout) {}
}

/** Plays one seeded sequence against `world`. Throws {@link SequenceFailure}. */
export async function playSequence(world: SequenceWorld, seed: number): Promise<SequenceResult> {
  const random = new Random(seed);
  const scenario = random.pick(SCENARIOS);
  const count = random.int(1, 3);
  const increments = Array.from({ length: count }, () => random.int(1, 2));
  const rollouts = increments.map(
    (n, i) => new Tracked(new Rollout("counter_env", counterTask(episodeId(`s${seed}-r${i}`), n))),
  );
  let step = "setup";
  const fail = (detail: string): never => {
    throw new SequenceFailure(seed, step, detail);
  };
  const check = (condition: boolean, detail: () => string): void => {
    if (!condition) fail(detail());
  };
  const run = world.run;
  let crashes = 0;
  let interrupted: "whole" | "refused" | undefined;

  const startAll = (attempt: number, which = rollouts) => {
    for (const r of which) {
      r.attempt = attempt;
      r.pending.push({ attempt, run: run.start(r.rollout, attempt) });
    }
  };
  const settleAll = async () => {
    for (const r of rollouts) {
      for (const p of r.pending.splice(0)) {
        r.outcomes.push({ attempt: p.attempt, outcome: await p.run.outcome });
      }
    }
  };
  /** The checkpointed attempts of the rollouts still in flight (what a commit continues). */
  const inFlight = () => rollouts.map((r) => r.rollout.episode(r.attempt));
  const staleIsRefused = async (episode: EpisodeId) => {
    // A request of a crashed or retired attempt, sent to the counter it would have used.
    const key =
      episode.attempt === 0 ? episode.rollout_id : `${episode.rollout_id}-a${episode.attempt}`;
    const res = await fetch(`${run.url("counter")}/ng-rollout/${key}/seed_session`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ initial_count: 0 }),
    });
    const body = (await res.json().catch(() => null)) as { error?: { code?: string } } | null;
    check(
      res.status === 409 && body?.error?.code === "stale_attempt",
      () => `a request of stale attempt ${key} was answered ${res.status} ${JSON.stringify(body)}`,
    );
  };
  const inspectWhole = async (dir: string) => {
    const report = await inspectCheckpoint(dir);
    check(
      report.problems.length === 0,
      () => `gym ckpt inspect ${dir}: ${report.problems.join("; ")}`,
    );
  };
  /** Holds each rollout's call number `after + 1`, starts them, and waits until all are held. */
  const startHeld = async (attempt: number) => {
    // A rollout of n increments makes n + 1 calls: hold one of its calls after the first.
    const after = random.int(1, Math.min(...increments));
    await run.hold({ after_calls_per_rollout: after });
    startAll(attempt);
    await run.heldCalls(
      rollouts.map((r) => r.rollout.key(attempt)),
      60 * SECONDS,
    );
  };

  try {
    step = "script";
    await run.script(scriptOf(rollouts.map((r) => r.rollout)));

    switch (scenario) {
      case "run-through": {
        step = "run through";
        await run.release();
        startAll(0);
        await settleAll();
        break;
      }
      case "retire-restart": {
        step = "retire in flight";
        await startHeld(0);
        await retire(world.participants, `retire-${seed}`, inFlight(), deadline());
        await run.release();
        await settleAll();
        for (const r of rollouts) {
          const last = r.outcomes[r.outcomes.length - 1];
          check(
            last !== undefined && typeof rewardOf(last.outcome) !== "number",
            () => `retired ${r.rollout.key(0)} still ended with ${JSON.stringify(last?.outcome)}`,
          );
          await staleIsRefused(r.rollout.episode(0));
        }
        step = "start over";
        startAll(1);
        await settleAll();
        break;
      }
      case "prepare-abort": {
        step = "prepare then abort";
        await startHeld(0);
        const id = world.nextCheckpointId(seed);
        const prepared = await prepare(world.participants, id, deadline(30));
        check(
          prepared.prepared,
          () => `prepare did not complete: ${JSON.stringify(prepared.blockers())}`,
        );
        await resume(world.participants, id, deadline(30));
        await run.release();
        await settleAll();
        break;
      }
      case "checkpoint-resume":
      case "checkpoint-crash":
      case "crash-in-commit": {
        await startHeld(0);
        // One or two checkpoints of the same in-flight rollouts; a crash restores the latest or
        // the older one (both hold every rollout at its boundary).
        const taken: { id: string; dir: string; delivered: Map<string, Set<number>> }[] = [];
        const rounds = scenario === "crash-in-commit" ? 1 : random.int(1, 2);
        for (let round = 0; round < rounds; round++) {
          step = `checkpoint ${round + 1}`;
          const id = world.nextCheckpointId(seed);
          const dir = path.join(world.dir, "checkpoints", id);
          const prepared = await prepare(world.participants, id, deadline(30));
          check(
            prepared.prepared,
            () => `prepare did not complete: ${JSON.stringify(prepared.blockers())}`,
          );
          const scope = prepared.continued(inFlight());
          if (scenario === "crash-in-commit") {
            step = "crash in commit";
            const committing = commit(world.participants, {
              checkpointId: id,
              checkpointDir: dir,
              episodeIds: scope,
              deadlineTs: deadline(60),
            }).catch((error: unknown) => error);
            // The crash comes at a random moment of the commit: a random delay is the point.
            await new Promise((resolve) => setTimeout(resolve, random.int(0, 120)));
            await world.crashAndServe();
            crashes++;
            await committing;
            taken.push({ id, dir, delivered: await deliveredBy(run, rollouts) });
            break;
          }
          await commit(world.participants, {
            checkpointId: id,
            checkpointDir: dir,
            episodeIds: scope,
            deadlineTs: deadline(60),
          });
          await inspectWhole(dir);
          taken.push({ id, dir, delivered: await deliveredBy(run, rollouts) });
          await resume(world.participants, id, deadline(30));
        }
        if (scenario === "checkpoint-resume") {
          step = "release after resume";
          await run.release();
          await settleAll();
          break;
        }
        if (scenario === "checkpoint-crash") {
          step = "crash";
          await world.crashAndServe();
          crashes++;
        }
        await run.release();
        await settleAll();
        // Dead attempts never succeed.
        for (const r of rollouts) {
          for (const { outcome } of r.outcomes) {
            check(
              typeof rewardOf(outcome) !== "number",
              () => `${r.rollout.key(r.attempt)} ended though its processes were killed`,
            );
          }
        }
        const chosen = taken[random.int(0, taken.length - 1)] as (typeof taken)[number];
        step = `restore ${chosen.id}`;
        const restoreId = `${chosen.id}-restore`;
        let restored = true;
        try {
          await restore(world.participants, {
            checkpointId: restoreId,
            checkpointDir: chosen.dir,
            episodeIds: inFlight(),
            deadlineTs: deadline(60),
          });
          await resume(world.participants, restoreId, deadline(30));
        } catch (error) {
          if (scenario !== "crash-in-commit" || !(error instanceof CoordinationError)) throw error;
          // An interrupted commit may be refused: typed refusals only, and nothing installed.
          for (const [name, failure] of Object.entries(error.failures)) {
            const status = Number(/^HTTP (\d+)/.exec(failure)?.[1] ?? "0");
            check(
              status >= 400 && status < 500,
              () => `${name} refused the restore with ${failure}`,
            );
          }
          restored = false;
        }
        if (scenario === "crash-in-commit") {
          interrupted = restored ? "whole" : "refused";
          if (restored) await inspectWhole(chosen.dir);
        }
        step = "stale attempts after restore";
        for (const r of rollouts) await staleIsRefused(r.rollout.episode(r.attempt));
        if (restored) {
          step = "continue";
          const attempt = rollouts[0]?.attempt ?? 0;
          startAll(attempt + 1);
          await settleAll();
          step = "no delivered call repeated";
          const calls = await run.calls();
          for (const r of rollouts) {
            const before = chosen.delivered.get(r.rollout.id) ?? new Set<number>();
            const again = calls.filter(
              (c) =>
                c.rollout === r.rollout.key(attempt + 1) &&
                c.continued_from === null &&
                before.has(c.n_messages),
            );
            check(
              again.length === 0,
              () =>
                `${r.rollout.key(attempt + 1)} generated again a call delivered before the checkpoint: ${JSON.stringify(again)}`,
            );
          }
        } else {
          // Refused: the replacements were retired by the rollback; the rollouts start over.
          step = "start over after a refused restore";
          const attempt = rollouts[0]?.attempt ?? 0;
          for (const r of rollouts) await staleIsRefused(r.rollout.episode(attempt + 1));
          startAll(attempt + 2);
          await settleAll();
        }
        break;
      }
    }

    step = "every rollout ends exactly once with reward 1";
    for (const r of rollouts) {
      const ended = r.outcomes.filter(({ outcome }) => typeof rewardOf(outcome) === "number");
      check(
        ended.length === 1 && rewardOf((ended[0] as (typeof ended)[number]).outcome) === 1,
        () =>
          `${r.rollout.id}: outcomes ${JSON.stringify(r.outcomes.map(({ attempt, outcome }) => [attempt, rewardOf(outcome)]))}`,
      );
    }

    step = "retire and forget";
    await retire(world.participants, `end-${seed}`, inFlight(), deadline());
    await forget(
      world.participants,
      `forget-${seed}`,
      rollouts.map((r) => r.rollout.id),
      deadline(),
    );
    step = "idle with nothing tracked";
    await until(
      "every participant idle with nothing retired or in flight",
      async () => {
        const replies = await status(world.participants);
        return Object.values(replies).every(
          (reply) =>
            reply.phase === "idle" &&
            reply.retired_rollouts === 0 &&
            reply.report.blocker_count === 0,
        );
      },
      30 * SECONDS,
    ).catch(async () => fail(JSON.stringify(await status(world.participants))));
    return { seed, scenario, rollouts: count, crashes, ...(interrupted ? { interrupted } : {}) };
  } catch (error) {
    if (error instanceof SequenceFailure) throw error;
    throw new SequenceFailure(
      seed,
      step,
      error instanceof Error ? (error.stack ?? error.message) : String(error),
    );
  } finally {
    await run.release().catch(() => undefined);
  }
}

/** Per rollout ID, the `n_messages` of every call delivered (returned) so far. */
async function deliveredBy(
  run: CrashRun,
  rollouts: readonly Tracked[],
): Promise<Map<string, Set<number>>> {
  const calls: BackendCall[] = await run.calls();
  const delivered = new Map<string, Set<number>>();
  for (const r of rollouts) {
    const own = new Set<number>();
    for (const c of calls) {
      if (c.rollout === r.rollout.key(r.attempt) && c.returned) own.add(c.n_messages);
    }
    delivered.set(r.rollout.id, own);
  }
  return delivered;
}
