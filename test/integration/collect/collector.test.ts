/**
 * The collector against a scripted environment server: lost replies fenced and resent, attempts
 * running out, a missed prepare, a refused restore, an older checkpoint not trusted for rows a
 * later run re-sent, admission refusals, and forgetting at the end.
 */
import { appendFileSync, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { CollectOptions } from "#sdk/collect/collect-options.js";
import { Collection, collect } from "#sdk/collect/collector.js";
import type { RolloutRow } from "#sdk/collect/rollout-row.js";
import { StubDeployment, writeTasks, type ReceivedRun } from "./stub-deployment.js";

let stub: StubDeployment;
let dir: string;

beforeEach(async () => {
  stub = new StubDeployment();
  await stub.start();
  dir = mkdtempSync(path.join(tmpdir(), "gym-collect-"));
});

afterEach(async () => {
  await stub.close();
  rmSync(dir, { recursive: true, force: true });
});

const tasks = (count: number): string => writeTasks(dir, count);

function options(extra: Partial<CollectOptions> = {}): CollectOptions {
  const participants = stub.participants();
  return {
    client: participants.client,
    participants,
    input: tasks(2),
    output: path.join(dir, "out.jsonl"),
    checkpointDir: path.join(dir, "D"),
    concurrency: 2,
    stepTimeoutMs: 5_000,
    ...extra,
  };
}

function rows(): RolloutRow[] {
  const file = path.join(dir, "out.jsonl");
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8")
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => JSON.parse(line) as RolloutRow);
}

function episodes(key: string): ReceivedRun[] {
  return stub
    .calls(key)
    .flatMap((call) => call.body.episode_ids as ReceivedRun[])
    .map((e) => ({ rollout_id: e.rollout_id, attempt: e.attempt }));
}

async function until(what: string, probe: () => boolean, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!probe()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe("collector under faults", () => {
  it("a /run without a reply is retired everywhere before its row goes again as the next attempt; the run forgets it at the end", async () => {
    stub.behaviour = (run) =>
      run.rollout_id.endsWith("-0-0") && run.attempt === 0 ? "drop" : "reply";
    const summary = await collect(options());
    expect(summary).toMatchObject({ status: "complete", ended: 2, finished: 2, fenced: 1 });
    const lost = stub.runs.find((run) => run.rollout_id.endsWith("-0-0"))?.rollout_id as string;
    expect(episodes("retire")).toEqual([{ rollout_id: lost, attempt: 0 }]);
    // The retire came before the resend.
    const retireAt = stub.control.findIndex((call) => call.operation === "retire");
    expect(retireAt).toBeGreaterThanOrEqual(0);
    expect(stub.runs.filter((run) => run.rollout_id === lost).map((run) => run.attempt)).toEqual([
      0, 1,
    ]);
    expect(rows().find((row) => row.rollout_id === lost)).toMatchObject({ attempt: 1, reward: 1 });
    expect(stub.calls("forget").flatMap((call) => call.body.rollout_ids as string[])).toEqual([
      lost,
    ]);
  });

  it("a row without a reply in every allowed attempt ends as a no_reply failure row", async () => {
    stub.behaviour = (run) => (run.rollout_id.endsWith("-1-0") ? "drop" : "reply");
    const summary = await collect(options({ maxAttempts: 2 }));
    expect(summary).toMatchObject({ status: "complete", finished: 1, failed: 1 });
    const failed = rows().find((row) => row.status === "failed");
    expect(failed).toMatchObject({ row: 1, attempt: 1, failure: { kind: "no_reply" } });
    expect(episodes("retire").map((e) => e.attempt)).toEqual([0, 1]);
    expect(rows()).toHaveLength(2);
  });

  it("admission_closed runs nothing: the same attempt goes again", async () => {
    stub.behaviour = (run, nth) =>
      run.rollout_id.endsWith("-0-0") && nth === 0 ? "admission_closed" : "reply";
    const summary = await collect(options());
    expect(summary).toMatchObject({ finished: 2, fenced: 0 });
    const first = rows().find((row) => row.row === 0);
    expect(first?.attempt).toBe(0);
    expect(stub.runs.filter((run) => run.rollout_id === first?.rollout_id)).toHaveLength(2);
    expect(stub.calls("retire")).toEqual([]);
  });

  it("a prepare not ready by its deadline publishes nothing, resumes, and the run goes on", async () => {
    stub.behaviour = () => "hang";
    stub.prepareReady = false;
    const collection = await Collection.start(options());
    await until("two rows in flight", () => stub.hanging === 2);
    const outcome = await collection.checkpoint();
    expect(outcome).toMatchObject({ status: "missed", blockers: { env: ["busy-rollout"] } });
    expect(stub.calls("commit")).toEqual([]);
    expect(stub.calls("resume")).toHaveLength(1);
    expect(existsSync(path.join(dir, "D", "LATEST"))).toBe(false);
    stub.release();
    const summary = await collection.done;
    expect(summary).toMatchObject({ status: "complete", checkpoints: { published: 0, missed: 1 } });
  });

  it("a checkpoint commits the rows in flight, publishes, and resumes; stop() leaves the participants committed", async () => {
    stub.behaviour = () => "hang";
    const collection = await Collection.start(options());
    await until("two rows in flight", () => stub.hanging === 2);
    const outcome = await collection.checkpoint();
    expect(outcome).toMatchObject({ status: "published", continued: 2 });
    const commitBody = stub.calls("commit")[0]?.body as {
      episode_ids: ReceivedRun[];
      stop?: boolean;
    };
    expect(commitBody.episode_ids.map((e) => e.attempt)).toEqual([0, 0]);
    expect(commitBody.stop).toBeUndefined();
    expect(stub.calls("resume")).toHaveLength(1);
    const stopped = await collection.stop();
    expect(stopped.status).toBe("published");
    expect((stub.calls("commit")[1]?.body as { stop?: boolean }).stop).toBe(true);
    expect(stub.calls("resume")).toHaveLength(1); // not resumed after the stop
    const summary = await collection.done;
    expect(summary).toMatchObject({ status: "stopped", stopCheckpoint: true, ended: 0 });
    // Two published checkpoints are kept; LATEST names the stop's.
    const latest = readFileSync(path.join(dir, "D", "LATEST"), "utf8").trim();
    expect(latest).toBe(stopped.status === "published" ? stopped.checkpointId : "");
  });

  it("a refused restore: the checkpointed rows start over at a fresh attempt after their replacements are fenced", async () => {
    stub.behaviour = () => "hang";
    const first = await Collection.start(options());
    await until("two rows in flight", () => stub.hanging === 2);
    await first.stop();
    await first.done;
    stub.release();
    stub.control.length = 0;
    stub.runs.length = 0;
    stub.behaviour = () => "reply";
    stub.restoreRefused = true;
    const summary = await collect(options({ resume: true }));
    expect(summary).toMatchObject({ status: "complete", restored: 0, fenced: 2, finished: 2 });
    // The restore's own rollback retired the replacements everywhere (every participant
    // refused, which changes nothing); the collector then fences them itself before sending the
    // rows fresh.
    expect(episodes("retire").map((e) => e.attempt)).toEqual([1, 1, 1, 1]);
    expect(stub.runs.map((run) => run.attempt)).toEqual([2, 2]);
    expect(rows().map((row) => row.attempt)).toEqual([2, 2]);
  });

  it("a restored run sends the replacements; a checkpoint whose rows a later run re-sent is not trusted for them", async () => {
    stub.behaviour = () => "hang";
    const first = await Collection.start(options());
    await until("two rows in flight", () => stub.hanging === 2);
    await first.stop();
    await first.done;
    stub.release();
    const manifest = readFileSync(path.join(dir, "D", "LATEST"), "utf8").trim();
    // A later run restored the checkpoint and sent row 0 as attempt 1, then died before
    // checkpointing itself: LATEST still names the old checkpoint.
    const log = path.join(dir, "D", "dispatch.log");
    const row0 = stub.runs.find((run) => run.rollout_id.endsWith("-0-0"))?.rollout_id as string;
    const row1 = stub.runs.find((run) => run.rollout_id.endsWith("-1-0"))?.rollout_id as string;
    appendFileSync(log, `${JSON.stringify({ rollout_id: row0, attempt: 1 })}\n`);
    stub.control.length = 0;
    stub.runs.length = 0;
    stub.behaviour = () => "reply";
    const summary = await collect(options({ resume: true }));
    expect(summary).toMatchObject({ status: "complete", restored: 1, fenced: 1, finished: 2 });
    const restoreBody = stub.calls("restore")[0]?.body as {
      checkpoint_id: string;
      episode_ids: ReceivedRun[];
    };
    expect(restoreBody.checkpoint_id).toBe(manifest);
    expect(restoreBody.episode_ids).toEqual([{ rollout_id: row1, attempt: 0 }]);
    expect(episodes("retire")).toEqual([{ rollout_id: row0, attempt: 1 }]);
    const attempts = Object.fromEntries(rows().map((row) => [row.rollout_id, row.attempt]));
    expect(attempts).toEqual({ [row0]: 2, [row1]: 1 });
    expect(
      stub
        .calls("forget")
        .flatMap((call) => call.body.rollout_ids as string[])
        .sort(),
    ).toEqual([row0, row1].sort());
  });

  it("a resumed run never sends a row the output already holds, and never writes one twice", async () => {
    const summary = await collect(options());
    expect(summary.ended).toBe(2);
    stub.runs.length = 0;
    const again = await collect(options({ resume: true }));
    expect(again).toMatchObject({ status: "complete", ended: 2, session: 2 });
    expect(stub.runs).toEqual([]);
    expect(rows()).toHaveLength(2);
  });
});
