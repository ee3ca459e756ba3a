/**
 * Crash and continue, in real processes: the reference deployment (`gym serve`) is checkpointed
 * with typed `single_agent_turn` rollouts held in their second model call, every Gym process group
 * is killed (the fake inference backend survives), and fresh processes restore the checkpoint. The
 * backend logs every model call, so each test asserts exactly which calls were continued and which
 * were never made again.
 *
 * One deployment runs the whole file, crashed three times:
 * 1. checkpoint `ckpt1` (one rollout finishing its verify during prepare), crash, restore, and
 *    the replacements; one restored rollout stays unclaimed, another makes calls and is held;
 * 2. checkpoint `ckpt2` with the unclaimed rollout in scope, crash, restore `ckpt2`;
 * 3. crash, restore `ckpt1` again (without the counter) for the rollout whose replacement made
 *    calls, and for the negative control that needs the counter's state.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { commit, prepare, status, type Participants } from "#sdk/client/coordination.js";
import type { CommitReply } from "#sdk/wire/storage.js";
import {
  CrashRun,
  Rollout,
  checkpoint,
  counterTask,
  deadline,
  episodeId,
  restoreAndResume,
  rewardOf,
  scriptOf,
  statusOf,
  until,
  weatherTask,
  without,
  type BackendCall,
  type PendingRun,
  type RunOutcome,
} from "./crash-harness.js";

const run = new CrashRun(mkdtempSync(path.join(tmpdir(), "gym-e2e-crash-continue-")));
const ckpt1 = path.join(run.dir, "checkpoints", "ckpt1");
const ckpt2 = path.join(run.dir, "checkpoints", "ckpt2");

/** Continued after the first crash: two increments, the second one cut. */
const counter = new Rollout("counter_env", counterTask(episodeId("cont-counter"), 2));
/** Continued after the first crash: one lookup, the answer cut. */
const weather = new Rollout("weather_env", weatherTask(episodeId("cont-weather"), "Paris", 1));
/** Its verify runs while prepare waits for it: it finishes, but /run replies only after. */
const finishing = new Rollout("counter_env", counterTask(episodeId("prepare-done"), 0));
/** Restored after the first crash but not sent; checkpointed again, crashed, restored again. */
const twice = new Rollout("counter_env", counterTask(episodeId("twice-counter"), 2));
/** Its replacement makes calls and crashes; the first checkpoint restores it again. */
const again = new Rollout("weather_env", weatherTask(episodeId("again-weather"), "Oslo", 2));
/** The negative control: restored without the counter's state. */
const stateless = new Rollout("counter_env", counterTask(episodeId("no-counter-state"), 2));

const held = [counter, weather, twice, again, stateless];
const first = new Map<string, PendingRun>();
/** The model call each held rollout was in at the first checkpoint. */
/** Worker processes per participant server (read now: the workers variant unsets it after import). */
const WORKERS = Number(process.env.GYM_E2E_NUM_WORKERS ?? 1);
const cutCalls = new Map<string, BackendCall>();
/** Calls before the first crash, by capture key. */
const before = new Map<string, BackendCall[]>();
const outcomes = new Map<string, RunOutcome>();
let participants: Participants;
let committed1: Record<string, CommitReply>;
let cutsAtCheckpoint: string[][];
let finishedDuringCheckpoint: boolean | null = null;
let deadRun: BackendCall[] = [];

afterAll(async () => {
  await run.cleanup();
  rmSync(run.dir, { recursive: true, force: true });
});

/** The live sessions the agent's status counts (every worker's, with several). */
async function agentSessions(): Promise<number | undefined> {
  return (await statusOf(participants, "simple_agent")).report.counts.sessions;
}

function callsOf(calls: readonly BackendCall[], key: string): BackendCall[] {
  return calls.filter((call) => call.rollout === key);
}

/**
 * Crashes every Gym process group, serves them again, and restores `episodes` from a checkpoint
 * (on every participant but those named in `leaveOut`), then resumes.
 */
async function crashAndRestore(
  checkpointDir: string,
  restoreId: string,
  episodes: Parameters<typeof restoreAndResume>[1]["episodes"],
  leaveOut: readonly string[] = [],
): Promise<void> {
  await run.crash();
  await run.serve({ afterCrash: true });
  // The dead attempts' held calls end now: nobody receives their answers.
  await run.release();
  participants = await run.participants();
  await restoreAndResume(participants, {
    restoreId,
    checkpointDir,
    episodes,
    restoring: without(participants, leaveOut),
  });
}

describe.sequential("crash and continue (reference deployment)", { timeout: 120_000 }, () => {
  it("checkpoints rollouts held in their second model call while one finishes its verify", async () => {
    await run.serve();
    participants = await run.participants();
    // Run with several workers (crash-continue-workers), every participant, the model's
    // included, answers for all of them.
    const counts = Object.values(await status(participants, 10_000)).map(
      (reply) => (reply as { workers?: number }).workers ?? 1,
    );
    expect(counts).toEqual(counts.map(() => WORKERS));
    expect(counts).toHaveLength(6);
    await run.script(scriptOf([...held, finishing]));
    await run.hold({ after_calls_per_rollout: 1 });
    for (const rollout of held) first.set(rollout.id, run.start(rollout));
    for (const [key, call] of await run.heldCalls(held.map((r) => r.key()))) {
      cutCalls.set(key, call);
    }
    // Admission is open: the agent's status counts each held rollout's live session, whichever
    // worker holds it.
    await until(
      "the agent's status to count the held sessions",
      async () => (await agentSessions()) === held.length,
      10_000,
    );

    // `finishing` runs free (the held calls keep their hold) until its verify reaches a stopped
    // counter: stop the agent so its seed is known done, then the counter, then let it go on.
    await run.hold({ after_calls: 1_000_000 });
    run.freeze("simple_agent");
    first.set(finishing.id, run.start(finishing));
    await until("the agent seed to wait in its socket", () =>
      run.waitingSenders("simple_agent").some(({ sender }) => sender === "counter_env"),
    );
    run.freeze("counter");
    run.thaw("simple_agent");
    // After its seed the environment sends the counter nothing but the verify (then the close),
    // so bytes from the environment waiting there are the verify. Bytes alone were not enough:
    // under load something else reached the stopped counter first, and the prepare then found
    // the environment still before its verify, with nothing to wait for.
    const others = new Set<string>();
    await until("the verify to wait in the counter's socket", () => {
      const senders = run.waitingSenders("counter");
      for (const { sender } of senders) if (sender !== "counter_env") others.add(sender);
      return senders.some(({ sender }) => sender === "counter_env");
    });
    // Say who else reached the stopped counter: the cause of that earlier flake.
    if (others.size > 0) console.warn(`also waiting at the counter: ${[...others].join("; ")}`);

    const preparing = prepare(participants, "ckpt1", deadline(30));
    // A prepare that failed at once would leave the environment idle: say why instead of
    // waiting out the poll.
    let prepareFailed: unknown = null;
    preparing.catch((error: unknown) => {
      prepareFailed = error;
    });
    let seen: unknown = null;
    const waiting = await until("prepare to wait for the verify", async () => {
      if (prepareFailed !== null) throw new Error(`prepare failed: ${String(prepareFailed)}`);
      const env = await statusOf(participants, "counter_env");
      seen = { phase: env.phase, report: env.report };
      return env.phase === "preparing" && env.report.blockers.length > 0 ? env : null;
    }).catch((error: unknown) => {
      throw new Error(
        `${String(error)}; counter_env last answered ${JSON.stringify(seen)}; waiting at the counter: ${JSON.stringify(run.waitingSenders("counter"))}`,
      );
    });
    expect(waiting.report.blockers).toEqual([finishing.key()]);
    run.thaw("counter");
    const prepared = await preparing;
    expect(prepared.prepared, JSON.stringify(prepared.blockers())).toBe(true);
    expect(prepared.restarts()).toEqual([]);

    committed1 = await commit(participants, {
      checkpointId: "ckpt1",
      checkpointDir: ckpt1,
      episodeIds: prepared.continued([...held, finishing].map((r) => r.episode())),
      deadlineTs: deadline(60),
    });
    finishedDuringCheckpoint = first.get(finishing.id)?.settled() ?? null;
    cutsAtCheckpoint = await run.cuts();
    const calls = await run.calls();
    for (const rollout of [...held, finishing]) {
      before.set(rollout.key(), callsOf(calls, rollout.key()));
    }

    expect(committed1.counter_env?.episode_ids).toEqual(
      [counter, finishing, stateless, twice].map((r) => r.key()).sort(),
    );
    expect(committed1.weather_env?.episode_ids).toEqual(
      [again, weather].map((r) => r.key()).sort(),
    );
    // `finishing` verified: its counter session ended there, so the counter exports none for it.
    expect(committed1.counter?.episode_ids).toEqual(
      [counter, stateless, twice].map((r) => r.key()).sort(),
    );
  });

  it("crashes every Gym process group and continues the replacements in fresh processes", async () => {
    await crashAndRestore(
      ckpt1,
      "restore-1",
      [counter, weather, finishing, twice, again].map((r) => r.episode()),
    );
    for (const rollout of [...held, finishing]) {
      expect((await first.get(rollout.id)?.outcome)?.status, rollout.id).toBe(0);
    }
    const replies = await Promise.all(
      [counter, weather, finishing].map(
        async (r) => [r.id, await run.start(r, 1).outcome] as const,
      ),
    );
    for (const [id, outcome] of replies) outcomes.set(id, outcome);
  });

  it("continues typed episodes from their last boundary: the first call continues the cut call, under the last delivered one", async () => {
    const calls = await run.calls();
    for (const rollout of [counter, weather]) {
      const [delivered, cut] = before.get(rollout.key()) as BackendCall[];
      expect(delivered?.returned).toBe(true);
      expect(cut?.returned).toBe(false);
      const replacement = callsOf(calls, rollout.key(1));
      // Every call the replacement needs and no more: one per turn after the delivered one.
      expect(replacement).toHaveLength(rollout.task.turns.length - 1);
      const [continuation] = replacement as [BackendCall];
      expect(continuation.continued_from).toBe(cut?.model_call_id);
      expect(continuation.n_messages).toBe(cut?.n_messages);
      expect(replacement.every((call) => call.n_messages > (delivered?.n_messages ?? 0))).toBe(
        true,
      );
      // Its parent is the last delivered call, and the lineage never holds the cut call.
      const staged = run.staged(rollout.key(1), continuation.model_call_id as string);
      expect(staged.parent_call_id).toBe(delivered?.model_call_id);
      expect(run.lineage(rollout.key(1))).toEqual([
        delivered?.model_call_id,
        ...replacement.map((call) => call.model_call_id),
      ]);
      expect(replacement.every((call) => call.capture === "staged")).toBe(true);
      // The dead attempt's ledger is retired: it can never take another row.
      expect(run.fenced(rollout.key())).toBe(true);
      expect(rewardOf(outcomes.get(rollout.id) as RunOutcome)).toBe(1);
    }
  });

  it("needs the counter's restored count for the right reward", async () => {
    // One increment ran before the checkpoint, the second after the restore: 2 only from 1.
    expect(committed1.counter?.episode_ids).toContain(counter.key());
    const replacement = callsOf(await run.calls(), counter.key(1));
    expect(replacement.map((call) => call.finish_reason)).toEqual(["tool_calls", "stop"]);
    expect(rewardOf(outcomes.get(counter.id) as RunOutcome)).toBe(1);
  });

  it("cuts each in-flight generation in exactly one round and continues its prefix", async () => {
    expect(cutsAtCheckpoint).toHaveLength(1);
    expect([...(cutsAtCheckpoint[0] ?? [])].sort()).toEqual(
      held.map((r) => cutCalls.get(r.key())?.model_call_id).sort(),
    );
    const calls = await run.calls();
    for (const rollout of [counter, weather]) {
      const cut = cutCalls.get(rollout.key()) as BackendCall;
      const [continuation] = callsOf(calls, rollout.key(1)) as [BackendCall];
      expect(continuation.continued_from).toBe(cut.model_call_id);
      // It reused every token generated before the hold, and generated only the rest.
      expect(continuation.reused_prefix_tokens).toBeGreaterThan(0);
      expect(continuation.reused_prefix_tokens).toBe(cut.generated_tokens);
      expect(continuation.capture_error).toBeNull();
    }
  });

  it("neither loses nor redoes an episode that finished during prepare", async () => {
    // Its verdict waited at the `return` boundary: /run did not reply during the checkpoint.
    expect(finishedDuringCheckpoint).toBe(false);
    const [record] = run
      .records(ckpt1, "environment", "counter_env")
      .filter((r) => (r.episode_id as { rollout_id: string }).rollout_id === finishing.id);
    const boundary = record?.boundary as { next: string; result: { reward: number } };
    expect(boundary.next).toBe("return");
    expect(boundary.result.reward).toBe(1);
    // The replacement returns that verdict: no model call, and no second verify (the restored
    // counter holds no state for the session, so verifying again would reward 0).
    expect(callsOf(await run.calls(), finishing.key(1))).toEqual([]);
    expect(before.get(finishing.key())?.map((call) => call.returned)).toEqual([true]);
    expect(rewardOf(outcomes.get(finishing.id) as RunOutcome)).toBe(1);
  });

  it("checkpoints again before a restored episode was sent, while another replacement is mid-flight", async () => {
    await run.hold({ after_calls_per_rollout: 1 });
    const pending = run.start(again, 1);
    const heldCall = [...(await run.heldCalls([again.key(1)])).values()][0];
    expect(heldCall?.n_messages).toBeGreaterThan(3);
    const { committed } = await checkpoint(participants, "ckpt2", ckpt2, () => [twice.episode(1)]);
    // The unclaimed restored episode is exported as it was restored; nothing else.
    expect(committed.counter_env?.episode_ids).toEqual([twice.key(1)]);
    expect(committed.weather_env?.episode_ids).toEqual([]);
    expect(committed.counter?.episode_ids).toEqual([twice.key(1)]);
    deadRun = callsOf(await run.calls(), again.key(1));
    expect(deadRun.map((call) => call.returned)).toEqual([true, false]);
    // Replacements the scope leaves out keep their ledgers: they started.
    expect(run.lineage(counter.key(1))).toHaveLength(counter.task.turns.length);
    expect(run.lineage(again.key(1))).toHaveLength(2);
    await run.crash();
    // Never a success: mostly the connection drops (0); under load a server can still answer an
    // error between its upstream's death and its own.
    const { status } = await pending.outcome;
    expect(status === 0 || status >= 500, `the dead attempt answered ${status}`).toBe(true);
  });

  it("continues after a second crash, from the checkpoint taken before the replacement started", async () => {
    await run.serve({ afterCrash: true });
    await run.release();
    participants = await run.participants();
    await restoreAndResume(participants, {
      restoreId: "restore-2",
      checkpointDir: ckpt2,
      episodes: [twice.episode(1)],
    });
    const outcome = await run.start(twice, 2).outcome;
    const calls = await run.calls();
    expect(callsOf(calls, twice.key(1))).toEqual([]);
    const [delivered, cut] = before.get(twice.key()) as BackendCall[];
    const replacement = callsOf(calls, twice.key(2));
    expect(replacement).toHaveLength(2);
    expect(replacement[0]?.continued_from).toBe(cut?.model_call_id);
    expect(replacement[0]?.reused_prefix_tokens).toBe(cut?.generated_tokens);
    expect(run.staged(twice.key(2), replacement[0]?.model_call_id as string).parent_call_id).toBe(
      delivered?.model_call_id,
    );
    expect(run.lineage(twice.key(2))).toEqual([
      delivered?.model_call_id,
      ...replacement.map((call) => call.model_call_id),
    ]);
    expect(run.fenced(twice.key(1))).toBe(true);
    // Attempt 2 still counts from the increment attempt 0 made.
    expect(rewardOf(outcome)).toBe(1);
  });

  it("restores the first checkpoint again after its replacement made calls and crashed", async () => {
    // The counter is left out of this restore: `again` needs nothing of it (its resources
    // server is stateless), `stateless` is the negative control of the next test.
    await crashAndRestore(
      ckpt1,
      "restore-3",
      [again, stateless].map((r) => r.episode()),
      ["counter"],
    );
    const [againOutcome, statelessOutcome] = await Promise.all([
      run.start(again, 1).outcome,
      run.start(stateless, 1).outcome,
    ]);
    outcomes.set(stateless.id, statelessOutcome);
    const calls = await run.calls();
    const [delivered, cut] = before.get(again.key()) as BackendCall[];
    const rerun = callsOf(calls, again.key(1)).filter(
      (call) => !deadRun.some((dead) => dead.index === call.index),
    );
    expect(rerun).toHaveLength(2);
    expect(rerun[0]?.continued_from).toBe(cut?.model_call_id);
    expect(run.staged(again.key(1), rerun[0]?.model_call_id as string).parent_call_id).toBe(
      delivered?.model_call_id,
    );
    const lineage = run.lineage(again.key(1));
    expect(lineage).toEqual([delivered?.model_call_id, ...rerun.map((call) => call.model_call_id)]);
    for (const dead of deadRun) expect(lineage).not.toContain(dead.model_call_id);
    expect(run.ledger(again.key(1))?.filter((row) => row.failure_reason != null)).toEqual([]);
    expect(rewardOf(againOutcome)).toBe(1);
  });

  it("rewards 0 when the restore leaves the counter's state out (negative control)", async () => {
    // The rest of the episode was restored: its replacement continues the cut call as well.
    const cut = cutCalls.get(stateless.key()) as BackendCall;
    const replacement = callsOf(await run.calls(), stateless.key(1));
    expect(replacement[0]?.continued_from).toBe(cut.model_call_id);
    expect(rewardOf(outcomes.get(stateless.id) as RunOutcome)).toBe(0);
  });

  it("counts no live agent session once the restored rollouts closed theirs", async () => {
    // The last restore installed two sessions; both replacements ran and closed them.
    await until(
      "the agent's status to count no session",
      async () => (await agentSessions()) === 0,
      10_000,
    );
  });
});
