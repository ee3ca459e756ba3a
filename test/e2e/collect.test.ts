/**
 * `gym collect` in real processes against the reference deployment: preempted with SIGTERM,
 * checkpointed with SIGUSR1 and on a timer, killed with SIGKILL with and without Gym, resumed,
 * reset. Each scenario asserts that every row ends exactly once in the output, at the attempt its
 * history calls for, and (through the fake backend's call log) that no delivered model call of a
 * continued row ran again.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { CrashRun, until, type BackendCall } from "./crash-harness.js";
import {
  CollectDir,
  CollectProcess,
  baseRollout,
  collectToEnd,
  counterRow,
  writeTasks,
} from "./collect-harness.js";

const EXIT_PREEMPTED = 75;
const run = new CrashRun(mkdtempSync(path.join(tmpdir(), "gym-e2e-collect-")), "deployment.yaml", {
  compiled: true,
});

afterAll(async () => {
  await run.cleanup();
  rmSync(run.dir, { recursive: true, force: true });
});

/** A fresh checkpoint directory and task file for one scenario. */
function scenario(name: string, rows: readonly unknown[]): { dir: CollectDir; tasks: string } {
  const dir = new CollectDir(path.join(run.dir, name));
  const tasks = writeTasks(path.join(run.dir, `${name}.jsonl`), rows);
  return { dir, tasks };
}

/** Waits until `count` calls of rollouts starting with `prefix` are held and not returned. */
async function heldCalls(count: number, prefix = ""): Promise<BackendCall[]> {
  return await until(`${count} held calls`, async () => {
    const held = (await run.calls()).filter(
      (call) => call.held && !call.returned && (call.rollout ?? "").startsWith(prefix),
    );
    return held.length >= count ? held : null;
  });
}

/**
 * No delivered call of `rollout` ran again: every call of a later attempt carries more messages
 * than every call an earlier attempt had returned, and the first of them continues a cut call.
 */
function expectContinued(calls: readonly BackendCall[], rollout: string, attempt: number): void {
  const mine = calls.filter((call) => baseRollout(call.rollout ?? "") === rollout);
  const before = mine.filter((call) => call.rollout === rollout);
  const after = mine.filter((call) => call.rollout === `${rollout}-a${attempt}`);
  const delivered = Math.max(0, ...before.filter((c) => c.returned).map((c) => c.n_messages));
  expect(before.length, `${rollout}: calls of attempt 0`).toBeGreaterThan(0);
  expect(after.length, `${rollout}: calls of attempt ${attempt}`).toBeGreaterThan(0);
  expect(after.every((call) => call.n_messages > delivered)).toBe(true);
  const cut = before.find((call) => !call.returned);
  expect(after[0]?.continued_from, `${rollout}: continues the cut call`).toBe(cut?.model_call_id);
}

function json(stdout: string): Record<string, unknown> {
  return JSON.parse(stdout) as Record<string, unknown>;
}

describe.sequential("gym collect (reference deployment)", { timeout: 180_000 }, () => {
  it("SIGTERM while a row is held checkpoints and exits 75; after a crash --resume continues it as attempt 1", async () => {
    await run.serve();
    await run.hold({ after_calls_per_rollout: 1 });
    const { dir, tasks } = scenario("sigterm", [counterRow(0)]);
    const args = [tasks, "--checkpoint-dir", dir.dir, "--concurrency", "1", "--json"];
    const collect = new CollectProcess(run, args);
    await heldCalls(1);
    collect.signal("SIGTERM");
    const stopped = await collect.exited;
    expect(stopped.code, stopped.stderr).toBe(EXIT_PREEMPTED);
    expect(json(stopped.stdout)).toMatchObject({ status: "stopped", stopCheckpoint: true });
    const manifest = dir.manifest();
    expect(manifest.continued).toHaveLength(1);
    expect(manifest.continued[0]?.attempt).toBe(0);
    const rollout = manifest.continued[0]?.rollout_id as string;
    expect(dir.rows()).toEqual([]);

    await run.crash();
    await run.serve({ afterCrash: true });
    await run.release();
    const resumed = await collectToEnd(run, [...args, "--resume"]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(json(resumed.stdout)).toMatchObject({ status: "complete", restored: 1, fenced: 0 });
    const rows = dir.rows();
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      rollout_id: rollout,
      attempt: 1,
      status: "finished",
      reward: 1,
    });
    expectContinued(await run.calls(), rollout, 1);
  });

  it("SIGUSR1 while rows are held publishes a checkpoint and the run goes on", async () => {
    await run.hold({ after_calls_per_rollout: 1 });
    const { dir, tasks } = scenario("sigusr1", [counterRow(0), counterRow(1)]);
    const collect = new CollectProcess(run, [
      tasks,
      "--checkpoint-dir",
      dir.dir,
      "--concurrency",
      "2",
      "--json",
    ]);
    const held = await heldCalls(2);
    const runId = baseRollout(held[0]?.rollout ?? "").split("-")[0] as string;
    collect.signal("SIGUSR1");
    await until("LATEST", () => dir.latest());
    expect(dir.manifest().continued.map((row) => row.attempt)).toEqual([0, 0]);
    await run.release();
    const done = await collect.exited;
    expect(done.code, done.stderr).toBe(0);
    expect(json(done.stdout)).toMatchObject({
      status: "complete",
      checkpoints: { published: 1, missed: 0, failed: 0 },
    });
    const rows = dir.rows();
    expect(rows.map((row) => [row.attempt, row.reward])).toEqual([
      [0, 1],
      [0, 1],
    ]);
    // Parked and released, not redone: each rollout's calls are one per turn, none repeated.
    const calls = (await run.calls()).filter((call) => call.rollout?.startsWith(`${runId}-`));
    for (const row of rows) {
      const mine = calls.filter((call) => call.rollout === row.rollout_id);
      const delivered = mine.filter((call) => call.returned).map((call) => call.n_messages);
      expect(new Set(delivered).size, row.rollout_id).toBe(delivered.length);
    }
  });

  it("48 rows, a checkpoint, more rows sent, the collector SIGKILLed with Gym running: --resume fences the rows sent after the checkpoint and ends every row once", async () => {
    await run.hold({ after_calls_per_rollout: 1 });
    const { dir, tasks } = scenario(
      "sigkill",
      Array.from({ length: 48 }, (_, i) => counterRow(i)),
    );
    const args = [tasks, "--checkpoint-dir", dir.dir, "--concurrency", "4", "--json"];
    const collect = new CollectProcess(run, args);
    const first = await heldCalls(4);
    const runId = baseRollout(first[0]?.rollout ?? "").split("-")[0] as string;
    collect.signal("SIGUSR1");
    await until("LATEST", () => dir.latest());
    const checkpointed = new Set(dir.manifest().continued.map((row) => row.rollout_id));
    expect(checkpointed.size).toBe(4);
    // The four finish; four more are sent after the checkpoint and held.
    await run.release();
    await run.hold({ after_calls_per_rollout: 1 });
    await until("4 rows written", () => dir.rows().length >= 4);
    const after = await until("four rows held after the checkpoint", async () => {
      const held = (await run.calls()).filter(
        (call) =>
          call.held &&
          !call.returned &&
          call.rollout?.startsWith(`${runId}-`) &&
          !checkpointed.has(call.rollout),
      );
      return held.length >= 4 ? held : null;
    });
    collect.signal("SIGKILL");
    await collect.exited;
    const sentAfter = new Set(after.map((call) => call.rollout as string));
    await run.release();

    const resumed = await collectToEnd(run, [...args, "--resume"]);
    expect(resumed.code, resumed.stderr).toBe(0);
    const summary = json(resumed.stdout);
    expect(summary).toMatchObject({ status: "complete", ended: 48, total: 48, finished: 48 });
    expect(summary.fenced).toBeGreaterThanOrEqual(4);
    const rows = dir.rows();
    expect(rows).toHaveLength(48);
    expect(new Set(rows.map((row) => row.rollout_id)).size).toBe(48);
    expect(new Set(rows.map((row) => row.row))).toEqual(
      new Set(Array.from({ length: 48 }, (_, i) => i)),
    );
    expect(rows.every((row) => row.reward === 1)).toBe(true);
    for (const row of rows) {
      if (sentAfter.has(row.rollout_id)) expect(row.attempt, row.rollout_id).toBe(1);
      if (checkpointed.has(row.rollout_id)) expect(row.attempt, row.rollout_id).toBe(0);
    }
    // The fenced attempts were retired: their dispatch-log entries at attempt 0 and 1 both exist.
    const logged = dir.dispatched();
    for (const rollout of sentAfter) {
      expect(logged.filter((entry) => entry.rollout_id === rollout).map((e) => e.attempt)).toEqual([
        0, 1,
      ]);
    }
  });

  it("collector and Gym both crash, with a torn dispatch-log entry: --resume restores the checkpointed rows", async () => {
    await run.hold({ after_calls_per_rollout: 1 });
    const { dir, tasks } = scenario("both", [counterRow(0), counterRow(1)]);
    const args = [tasks, "--checkpoint-dir", dir.dir, "--concurrency", "2", "--json"];
    const collect = new CollectProcess(run, args);
    await heldCalls(2, "");
    collect.signal("SIGUSR1");
    await until("LATEST", () => dir.latest());
    collect.signal("SIGKILL");
    await collect.exited;
    const continued = dir.manifest().continued.map((row) => row.rollout_id);
    expect(continued).toHaveLength(2);
    await run.crash();
    dir.tearDispatchLog('{"rollout_id":"torn-');
    await run.serve({ afterCrash: true });
    await run.release();

    const resumed = await collectToEnd(run, [...args, "--resume"]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stderr).toMatch(/torn/);
    expect(json(resumed.stdout)).toMatchObject({ status: "complete", restored: 2, ended: 2 });
    const rows = dir.rows();
    expect(rows.map((row) => [row.attempt, row.reward])).toEqual([
      [1, 1],
      [1, 1],
    ]);
    const calls = await run.calls();
    for (const rollout of continued) expectContinued(calls, rollout, 1);
  });

  it("--checkpoint-every checkpoints while rows are in flight", async () => {
    await run.hold({ after_calls_per_rollout: 1 });
    const { dir, tasks } = scenario("timer", [counterRow(0)]);
    const collect = new CollectProcess(run, [
      tasks,
      "--checkpoint-dir",
      dir.dir,
      "--checkpoint-every",
      "500ms",
      "--json",
    ]);
    await heldCalls(1);
    await until("a timer checkpoint", () => dir.latest());
    await run.release();
    const done = await collect.exited;
    expect(done.code, done.stderr).toBe(0);
    const summary = json(done.stdout) as { checkpoints: { published: number } };
    expect(summary.checkpoints.published).toBeGreaterThanOrEqual(1);
    expect(dir.rows()).toHaveLength(1);
  });

  it("a row the environment refuses is written as a failure row; the others finish", async () => {
    const { dir, tasks } = scenario("refused", [
      counterRow(0),
      { task_id: "bad", environment: "counter_env", task_input: { nonsense: true } },
    ]);
    const done = await collectToEnd(run, [tasks, "--checkpoint-dir", dir.dir, "--json"]);
    expect(done.code, done.stderr).toBe(0);
    expect(json(done.stdout)).toMatchObject({ ended: 2, finished: 1, failed: 1 });
    const failed = dir.rows().find((row) => row.status === "failed");
    expect(failed).toMatchObject({
      row: 1,
      reward: null,
      failure: { kind: "refused", code: "invalid_request", status: 422 },
    });
  });

  it("refuses to start over a run without --resume or --reset; --reset starts a new run", async () => {
    const { dir, tasks } = scenario("reset", [counterRow(0)]);
    const first = await collectToEnd(run, [tasks, "--checkpoint-dir", dir.dir, "--json"]);
    expect(first.code, first.stderr).toBe(0);
    const firstRun = json(first.stdout).runId;
    const refused = await collectToEnd(run, [tasks, "--checkpoint-dir", dir.dir]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/holds run .*--resume.*--reset/s);
    expect(dir.rows()).toHaveLength(1);
    const again = await collectToEnd(run, [
      tasks,
      "--checkpoint-dir",
      dir.dir,
      "--reset",
      "--json",
    ]);
    expect(again.code, again.stderr).toBe(0);
    expect(json(again.stdout).runId).not.toBe(firstRun);
    const rows = dir.rows();
    expect(rows).toHaveLength(1);
    expect(rows[0]?.rollout_id.startsWith(`${json(again.stdout).runId as string}-`)).toBe(true);
    // Resuming a complete run sends nothing and ends at once.
    const resumed = await collectToEnd(run, [
      tasks,
      "--checkpoint-dir",
      dir.dir,
      "--resume",
      "--json",
    ]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(json(resumed.stdout)).toMatchObject({ status: "complete", ended: 1, session: 2 });
    expect(dir.rows()).toHaveLength(1);
  });
});
