/**
 * `gym collect` when a host is lost, in real processes: a server frozen (SIGSTOP on its process
 * group) mid-collection fails the checkpoint that needs it, the last published checkpoint stays,
 * no checkpoint is taken while it is silent, and once it is thawed the run resumes it, goes on
 * checkpointing and ends every row exactly once. A collector killed with the servers running is
 * resumed against them; a run stopped by SIGTERM is resumed onto replacement servers at other
 * addresses.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { CrashRun, until } from "./crash-harness.js";
import {
  CollectDir,
  CollectProcess,
  collectToEnd,
  counterRow,
  writeTasks,
} from "./collect-harness.js";

const EXIT_PREEMPTED = 75;
const run = new CrashRun(
  mkdtempSync(path.join(tmpdir(), "gym-e2e-collect-host-loss-")),
  "deployment.yaml",
  { compiled: true },
);
const frozen = new Set<string>();

afterAll(async () => {
  for (const server of frozen) run.thaw(server);
  await run.cleanup();
  rmSync(run.dir, { recursive: true, force: true });
});

function scenario(name: string, rows: number): { dir: CollectDir; tasks: string } {
  const dir = new CollectDir(path.join(run.dir, name));
  const tasks = writeTasks(
    path.join(run.dir, `${name}.jsonl`),
    Array.from({ length: rows }, (_, i) => counterRow(i)),
  );
  return { dir, tasks };
}

/** Every row once, finished with reward 1. */
function expectEveryRowOnce(dir: CollectDir, rows: number): void {
  const written = dir.rows();
  expect(written).toHaveLength(rows);
  expect(new Set(written.map((row) => row.rollout_id)).size).toBe(rows);
  expect(new Set(written.map((row) => row.row))).toEqual(
    new Set(Array.from({ length: rows }, (_, i) => i)),
  );
  expect(written.every((row) => row.status === "finished" && row.reward === 1)).toBe(true);
}

async function heldCalls(count: number): Promise<void> {
  await until(`${count} held calls`, async () => {
    const held = (await run.calls()).filter((call) => call.held && !call.returned);
    return held.length >= count;
  });
}

/** How many `checkpoint … published` lines the collector printed. */
function publishedLines(stderr: string): number {
  return stderr.match(/^checkpoint \S+ published:/gm)?.length ?? 0;
}

/** The servers' URLs as the state file has them. */
function urls(): Record<string, string> {
  const state = JSON.parse(readFileSync(run.stateFile, "utf8")) as {
    deployment: { servers: Record<string, { url: string }> };
  };
  return Object.fromEntries(
    Object.entries(state.deployment.servers).map(([name, server]) => [name, server.url]),
  );
}

describe.sequential("gym collect loses a host", { timeout: 180_000 }, () => {
  it("a policy model frozen mid-collection: the checkpoint fails naming it, the last published one stays, and after the thaw the run checkpoints again and ends every row once", async () => {
    await run.serve();
    await run.hold({ after_calls_per_rollout: 1 });
    const rows = 6;
    const { dir, tasks } = scenario("frozen", rows);
    const collect = new CollectProcess(run, [
      tasks,
      "--checkpoint-dir",
      dir.dir,
      "--concurrency",
      "2",
      "--checkpoint-every",
      "2s",
      "--step-timeout",
      "2s",
      "--json",
    ]);
    try {
      await heldCalls(2);
      // Frozen just after a checkpoint ended (its line is printed after its resume), so the
      // freeze lands between checkpoints, about 2 s before the next: the next one's prepare is
      // what finds the model silent. (Frozen mid-checkpoint, the model could miss that one's
      // resume instead, after its publish: a published checkpoint whose resume goes on in the
      // background, not the failed checkpoint this scenario is about.)
      const ended = publishedLines(collect.stderr);
      await until("a checkpoint to end", () => publishedLines(collect.stderr) > ended);
      run.freeze("policy");
      const before = dir.latest();
      expect(before).not.toBeNull();
      frozen.add("policy");
      await collect.waitForStderr(
        /checkpoint \S+ failed: checkpoint (prepare|commit|resume) failed on \d+ participant\(s\): .*policy \(127\.0\.0\.1:\d+\): no reply within the \w+ deadline \(2 s\) — is host 127\.0\.0\.1 down or frozen\?/,
      );
      // Nothing published meanwhile: the checkpoint that failed left LATEST where it was.
      expect(dir.latest()).toBe(before);
      expect(dir.manifest().checkpoint_id).toBe(before);
      run.thaw("policy");
      frozen.delete("policy");
      await collect.waitForStderr(/policy answer again: checkpoints go on/);
      await until("a checkpoint published after the thaw", () => {
        const latest = dir.latest();
        return latest !== null && latest !== before;
      });
      await run.release();
      const done = await collect.exited;
      expect(done.code, done.stderr).toBe(0);
      const summary = JSON.parse(done.stdout) as {
        status: string;
        checkpoints: { published: number; failed: number };
      };
      expect(summary.status).toBe("complete");
      expect(summary.checkpoints.failed).toBeGreaterThanOrEqual(1);
      expect(summary.checkpoints.published).toBeGreaterThanOrEqual(2);
      expectEveryRowOnce(dir, rows);
    } finally {
      if (frozen.delete("policy")) run.thaw("policy");
      if (collect.child.exitCode === null) collect.signal("SIGKILL");
      await run.release().catch(() => 0);
    }
  });

  it("the collector's machine lost, the servers running: --resume says why the checkpoint cannot be restored into them, and its rows start over once each", async () => {
    await run.hold({ after_calls_per_rollout: 1 });
    const rows = 2;
    const { dir, tasks } = scenario("collector-lost", rows);
    const args = [tasks, "--checkpoint-dir", dir.dir, "--concurrency", "2", "--json"];
    const collect = new CollectProcess(run, args);
    await heldCalls(2);
    collect.signal("SIGUSR1");
    const checkpoint = await until("a published checkpoint", () => dir.latest());
    collect.signal("SIGKILL");
    await collect.exited;
    await run.release();
    const resumed = await collectToEnd(run, [...args, "--resume"]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stderr).toContain(
      `restoring checkpoint ${checkpoint} failed (the servers are the processes that took checkpoint ${checkpoint} and resumed it`,
    );
    expect(JSON.parse(resumed.stdout)).toMatchObject({ status: "complete", restored: 0 });
    expectEveryRowOnce(dir, rows);
    // Fenced at the replacement attempt the failed restore named, sent as the one after.
    expect(dir.rows().map((row) => row.attempt)).toEqual([2, 2]);
  });

  it("--resume onto replacement servers at other addresses restores the checkpointed rows there", async () => {
    await run.hold({ after_calls_per_rollout: 1 });
    const rows = 2;
    const { dir, tasks } = scenario("replaced", rows);
    const args = [tasks, "--checkpoint-dir", dir.dir, "--concurrency", "2", "--json"];
    const collect = new CollectProcess(run, args);
    await heldCalls(2);
    collect.signal("SIGTERM");
    const stopped = await collect.exited;
    expect(stopped.code, stopped.stderr).toBe(EXIT_PREEMPTED);
    expect(dir.manifest().continued).toHaveLength(rows);
    const old = urls();
    // Every server is replaced (the backend too): started afresh, each at a new free port.
    await run.stop();
    await run.serve();
    const now = urls();
    for (const name of Object.keys(old)) expect(now[name], name).not.toBe(old[name]);
    const resumed = await collectToEnd(run, [...args, "--resume"]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(JSON.parse(resumed.stdout)).toMatchObject({
      status: "complete",
      restored: rows,
      fenced: 0,
    });
    expectEveryRowOnce(dir, rows);
    expect(dir.rows().every((row) => row.attempt === 1)).toBe(true);
  });
});
