/**
 * Crash and continue, in real processes, on a variant of the reference deployment
 * (reference-servers/deployment-restart-legacy.yaml): a second environment whose resources server
 * is `restart_only`, and the Simple Agent's legacy `/run` wired to the counter. Without a crash:
 * a rollout retired mid-flight, and a checkpoint that parks rollouts and releases them. Then one
 * crash: a restart mixed with saved episodes, and a legacy `/run` continued from its boundary.
 * Every test asserts on the model calls the fake backend logged.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  CoordinationError,
  commit,
  forget,
  prepare,
  resume,
  retire,
  type Participants,
  type PrepareResult,
} from "#sdk/client/coordination.js";
import {
  CrashRun,
  Rollout,
  counterTask,
  deadline,
  episodeId,
  only,
  restoreAndResume,
  retiredRollouts,
  rewardOf,
  scriptOf,
  statusOf,
  until,
  type BackendCall,
  type PendingRun,
  type RunOutcome,
} from "./crash-harness.js";

const run = new CrashRun(
  mkdtempSync(path.join(tmpdir(), "gym-e2e-crash-restart-")),
  "deployment-restart-legacy.yaml",
);
let participants: Participants;

afterAll(async () => {
  await run.cleanup();
  rmSync(run.dir, { recursive: true, force: true });
});

function callsOf(calls: readonly BackendCall[], key: string): BackendCall[] {
  return calls.filter((call) => call.rollout === key);
}

/** A counter task sent to the Simple Agent's legacy `/run`: the task's fields at top level. */
class LegacyRollout extends Rollout {
  constructor(id: string) {
    super("simple_agent", counterTask(episodeId(id), 1));
  }

  override body(attempt = 0): Record<string, unknown> {
    const task = this.task.body.task as { task_input: Record<string, unknown> };
    return {
      responses_create_params: task.task_input.responses_create_params,
      ...(task.task_input.task_data as Record<string, unknown>),
      _ng_rollout_id: this.key(attempt),
    };
  }
}

describe.sequential(
  "restarts, retire and legacy /run (variant deployment)",
  { timeout: 120_000 },
  () => {
    const retired = new Rollout("counter_env", counterTask(episodeId("retired-mid-flight"), 1));
    const sentinel = new Rollout("counter_env", counterTask(episodeId("after-retire"), 1));

    it("retires an episode mid-flight everywhere, fences its ledger and forgets it", async () => {
      await run.serve();
      participants = await run.participants();
      await run.script(scriptOf([retired, sentinel]));
      await run.hold({ after_calls_per_rollout: 1 });
      const pending = run.start(retired);
      const inFlight = [...(await run.heldCalls([retired.key()])).values()][0];

      const replies = await retire(participants, "retire-1", [retired.episode()], deadline());
      expect(Object.keys(replies).sort()).toEqual(participants.members.map((m) => m.name).sort());
      // A retired episode gets no reply: its connection is closed.
      expect((await pending.outcome).status).toBe(0);
      // The retire stopped the held generation before replying: nothing is left to release.
      expect(await run.release()).toBe(0);
      const calls = callsOf(await run.calls(), retired.key());
      expect(calls).toHaveLength(2);
      expect(calls[1]?.model_call_id).toBe(inFlight?.model_call_id);
      expect(calls[1]?.returned).toBe(false);

      expect(run.fenced(retired.key())).toBe(true);
      expect(run.ledger(retired.key())).toBeNull();
      const duplicate = await run.start(retired).outcome;
      expect(duplicate.status).toBe(409);
      expect(duplicate.body?.error?.code).toBe("stale_attempt");
      const marks = await retiredRollouts(participants);
      expect(Object.values(marks)).toEqual(participants.members.map(() => 1));

      // Another rollout runs start to end; the retired one makes no call meanwhile.
      expect(rewardOf(await run.start(sentinel).outcome)).toBe(1);
      expect(callsOf(await run.calls(), retired.key())).toEqual(calls);

      await forget(participants, "forget-1", [retired.id], deadline());
      expect(Object.values(await retiredRollouts(participants))).toEqual(
        participants.members.map(() => 0),
      );
    });

    it("parks rollouts through a checkpoint without a crash and releases them: nothing lost or repeated", async () => {
      const parked = [0, 1, 2].map(
        (i) => new Rollout("counter_env", counterTask(episodeId(`parked-${i}`), 2)),
      );
      await run.script(scriptOf(parked));
      await run.hold({ after_calls_per_rollout: 1 });
      const runs = parked.map((rollout) => run.start(rollout));
      const heldCalls = await run.heldCalls(parked.map((r) => r.key()));

      const prepared = await prepare(participants, "park-1", deadline(30));
      expect(prepared.prepared, JSON.stringify(prepared.blockers())).toBe(true);
      const committed = await commit(participants, {
        checkpointId: "park-1",
        checkpointDir: path.join(run.dir, "checkpoints", "park-1"),
        episodeIds: prepared.continued(parked.map((r) => r.episode())),
        deadlineTs: deadline(60),
      });
      expect(committed.counter_env?.episode_ids).toEqual(parked.map((r) => r.key()).sort());
      // The generations finish while the checkpoint is open: the policy holds every answer.
      await run.release();
      await until("the held generations to finish", async () => {
        const calls = await run.calls();
        return [...heldCalls.values()].every(
          (h) => calls.find((c) => c.model_call_id === h.model_call_id)?.returned === true,
        );
      });
      const policy = await statusOf(participants, "policy");
      expect(policy.report.blockers).toEqual([]);
      expect(policy.report.counts.held).toBe(parked.length);
      expect(runs.map((r) => r.settled())).toEqual(parked.map(() => false));
      const whileParked = await run.calls();

      await resume(participants, "park-1", deadline());
      const outcomes = await Promise.all(runs.map((r) => r.outcome));
      expect(outcomes.map(rewardOf)).toEqual(parked.map(() => 1));
      const calls = await run.calls();
      // Each model call once: the held one delivered as generated, then only the last turn.
      for (const rollout of parked) {
        const own = callsOf(calls, rollout.key());
        expect(own.map((call) => call.n_messages)).toEqual([1, 3, 5]);
        expect(own.every((call) => call.returned && call.continued_from === null)).toBe(true);
        expect(own.slice(0, 2)).toEqual(callsOf(whileParked, rollout.key()));
      }
      expect(calls).toHaveLength(whileParked.length + parked.length);
    });

    const restart = new Rollout("restart_env", counterTask(episodeId("restarted"), 1));
    const saved = new Rollout("counter_env", counterTask(episodeId("saved"), 1));
    const legacyRun = new LegacyRollout("legacy-run");
    const first = new Map<string, PendingRun>();
    const before = new Map<string, BackendCall[]>();
    const checkpointDir = path.join(run.dir, "checkpoints", "mixed-1");
    let prepared: PrepareResult;
    let legacyOutcome: RunOutcome;

    it("never holds up a checkpoint for a restart: reported by prepare and left out of the scope", async () => {
      await run.script(scriptOf([restart, saved, legacyRun]));
      await run.hold({ after_calls_per_rollout: 1 });
      for (const rollout of [restart, saved, legacyRun]) first.set(rollout.id, run.start(rollout));
      await run.heldCalls([restart, saved, legacyRun].map((r) => r.key()));

      prepared = await prepare(participants, "mixed-1", deadline(30));
      expect(prepared.prepared, JSON.stringify(prepared.blockers())).toBe(true);
      expect(prepared.restarts()).toEqual([restart.episode()]);
      expect(prepared.replies.restart_env?.report.restarts).toEqual([restart.key()]);
      expect(prepared.replies.restart_counter?.report.restarts).toEqual([restart.key()]);
      const scope = prepared.continued([restart, saved, legacyRun].map((r) => r.episode()));
      expect(scope).toEqual([saved.episode(), legacyRun.episode()]);
      // A scope that names the restart is refused by the participants that reported it.
      const refused = await commit(only(participants, ["restart_env"]), {
        checkpointId: "mixed-1",
        checkpointDir,
        episodeIds: [restart.episode(), ...scope],
        deadlineTs: deadline(30),
      }).catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(CoordinationError);
      expect((refused as CoordinationError).codes()).toEqual({ restart_env: "restart_in_scope" });

      const committed = await commit(participants, {
        checkpointId: "mixed-1",
        checkpointDir,
        episodeIds: scope,
        deadlineTs: deadline(60),
      });
      expect(committed.restart_env?.episode_ids).toEqual([]);
      expect(committed.restart_counter?.episode_ids).toEqual([]);
      expect(committed.counter_env?.episode_ids).toEqual([saved.key()]);
      expect(committed.simple_agent?.episode_ids).toEqual([legacyRun.key(), saved.key()].sort());
      const calls = await run.calls();
      for (const rollout of [restart, saved, legacyRun]) {
        before.set(rollout.key(), callsOf(calls, rollout.key()));
      }
    });

    it("starts the restart over after a crash while the saved episode continues", async () => {
      await run.crash();
      // The dead attempts never succeed. Mostly their connection drops (status 0); under load a
      // server can still answer an error between its upstream's death and its own.
      for (const pending of first.values()) {
        const { status } = await pending.outcome;
        expect(status === 0 || status >= 500, `a dead attempt answered ${status}`).toBe(true);
      }
      await run.serve({ afterCrash: true });
      await run.release();
      participants = await run.participants();
      await restoreAndResume(participants, {
        restoreId: "restore-mixed-1",
        checkpointDir,
        episodes: prepared.continued([restart, saved, legacyRun].map((r) => r.episode())),
      });
      // The restart is retired everywhere first, so nothing of its dead attempt can run again.
      await retire(participants, "retire-restart", [restart.episode()], deadline());
      let restarted: RunOutcome;
      let continued: RunOutcome;
      [restarted, continued, legacyOutcome] = await Promise.all([
        run.start(restart, 1).outcome,
        run.start(saved, 1).outcome,
        run.start(legacyRun, 1).outcome,
      ]);
      expect(rewardOf(restarted)).toBe(1);
      expect(rewardOf(continued)).toBe(1);

      const calls = await run.calls();
      // The restart starts over from its input: the same calls as its first attempt, none continued.
      const rerun = callsOf(calls, restart.key(1));
      expect(rerun.map((call) => call.n_messages)).toEqual(
        before.get(restart.key())?.map((call) => call.n_messages),
      );
      expect(rerun.every((call) => call.continued_from === null && call.returned)).toBe(true);
      expect(run.fenced(restart.key())).toBe(true);
      // The saved episode continues its cut call under the delivered one.
      const [delivered, cut] = before.get(saved.key()) as BackendCall[];
      const replacement = callsOf(calls, saved.key(1));
      expect(replacement).toHaveLength(1);
      expect(replacement[0]?.continued_from).toBe(cut?.model_call_id);
      expect(replacement[0]?.reused_prefix_tokens).toBeGreaterThan(0);
      expect(run.lineage(saved.key(1))).toEqual([
        delivered?.model_call_id,
        replacement[0]?.model_call_id,
      ]);
      const stale = await run.start(restart).outcome;
      expect(stale.status).toBe(409);
      expect(stale.body?.error?.code).toBe("stale_attempt");
    });

    it("continues a legacy /run from its last boundary after the crash", async () => {
      expect(rewardOf(legacyOutcome)).toBe(1);
      const [delivered, cut] = before.get(legacyRun.key()) as BackendCall[];
      const replacement = callsOf(await run.calls(), legacyRun.key(1));
      expect(replacement).toHaveLength(1);
      expect(replacement[0]?.continued_from).toBe(cut?.model_call_id);
      expect(replacement[0]?.n_messages).toBe(cut?.n_messages);
      expect(
        run.staged(legacyRun.key(1), replacement[0]?.model_call_id as string).parent_call_id,
      ).toBe(delivered?.model_call_id);
    });
  },
);
