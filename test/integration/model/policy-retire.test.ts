/**
 * Checkpoint retire and forget on the policy model server: a running call of the retired attempt is
 * stopped with `stale_attempt`, the ledgers of attempts 0..N are fenced, later calls are refused
 * until forget, untagged calls are left alone, and a call waiting at closed admission after a
 * restore is refused at once.
 */
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import {
  POLL,
  WEATHER_SCRIPT,
  cleanup,
  commit,
  control,
  crash,
  ep,
  exists,
  fakeCalls,
  firstInput,
  hold,
  ledgerFiles,
  ledgerRows,
  prepare,
  release,
  respond,
  restore,
  resume,
  setScript,
  startFake,
  startPolicy,
  status,
  tempDir,
  track,
} from "../../support/policy-harness.js";

afterEach(cleanup);

async function setup() {
  const fake = await startFake();
  await setScript(fake, WEATHER_SCRIPT);
  const captureDir = await tempDir();
  const policy = await startPolicy(fake, { captureDir });
  return { fake, policy, captureDir };
}

const fence = (dir: string, key: string) => exists(path.join(dir, `${key}.lineage.retired`));

describe("retire of a running attempt", () => {
  it("stops its call with 409 stale_attempt, fences attempts 0..N, and refuses the attempt until forget", async () => {
    const { fake, policy, captureDir } = await setup();
    await respond(policy.url, "r", { input: firstInput() }).expect(200);
    expect(await ledgerRows(captureDir, "r")).toHaveLength(1);

    // Attempt 1 is generating, and so is an untagged call (an eval on the same server).
    await hold(fake, { after_calls: 1 });
    const running = track(respond(policy.url, "r-a1", { input: firstInput() }));
    const untagged = track(respond(policy.url, null, { input: firstInput() }));
    await fake.server.holds.whenBlocked(2);

    const retired = await control(policy.url, "retire", {
      checkpoint_id: "retire-1",
      episode_ids: [ep("r-a1")],
    });
    expect(retired.status, JSON.stringify(retired.body)).toBe(200);
    const stopped = await running.value;
    expect(stopped.status, JSON.stringify(stopped.body)).toBe(409);
    expect(stopped.body.error.code).toBe("stale_attempt");
    // The retire returned after the call left: nothing of attempt 1 is admitted any more.
    expect((await status(policy.url)).report.counts).toMatchObject({ inflight: 1 });
    // The untagged call is never cancelled by a retire.
    expect(untagged.done()).toBe(false);

    // Attempts 0 and 1 are fenced and their ledgers gone; attempt 2 is untouched.
    expect(await fence(captureDir, "r")).toBe(true);
    expect(await fence(captureDir, "r-a1")).toBe(true);
    expect(await fence(captureDir, "r-a2")).toBe(false);
    expect(await ledgerRows(captureDir, "r")).toBeNull();
    expect(await ledgerRows(captureDir, "r-a1")).toBeNull();

    expect(await release(fake)).toBe(1);
    expect((await untagged.value).status).toBe(200);

    // Later calls of attempts 0 and 1 are refused before reaching the backend.
    const before = (await fakeCalls(fake)).length;
    for (const key of ["r-a1", "r"]) {
      const late = await respond(policy.url, key, { input: firstInput() });
      expect(late.status, `${key}: ${JSON.stringify(late.body)}`).toBe(409);
      expect(late.body.error.code).toBe("stale_attempt");
    }
    expect(await fakeCalls(fake)).toHaveLength(before);
    // The next attempt is served.
    await respond(policy.url, "r-a2", { input: firstInput() }).expect(200);
    expect(await ledgerRows(captureDir, "r-a2")).toHaveLength(1);

    const forgot = await control(policy.url, "forget", {
      checkpoint_id: "forget-1",
      rollout_ids: ["r"],
    });
    expect(forgot.status, JSON.stringify(forgot.body)).toBe(200);
    const again = await respond(policy.url, "r-a1", { input: firstInput() });
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    // Still fenced: the late attempt's row is discarded, its ledger is not recreated.
    expect(await ledgerRows(captureDir, "r-a1")).toBeNull();
  });

  it("leaves other rollouts' calls running", async () => {
    const { fake, policy } = await setup();
    await hold(fake, { after_calls: 0 });
    const mine = track(respond(policy.url, "r", { input: firstInput() }));
    const other = track(respond(policy.url, "q", { input: firstInput() }));
    await fake.server.holds.whenBlocked(2);
    const retired = await control(policy.url, "retire", {
      checkpoint_id: "retire-1",
      episode_ids: [ep("r")],
    });
    expect(retired.status).toBe(200);
    expect((await mine.value).status).toBe(409);
    expect(other.done()).toBe(false);
    await release(fake);
    expect((await other.value).status).toBe(200);
  });
});

describe("a call waiting at closed admission after a restore", () => {
  it("is refused with stale_attempt at once when its attempt is retired, and nothing is served", async () => {
    const { fake, policy, captureDir } = await setup();
    await respond(policy.url, "r", { input: firstInput() }).expect(200);
    await prepare(policy.url, "c1");
    const { dir } = await commit(policy, "c1", ["r"]);
    await crash(policy);

    const fresh = await startPolicy(fake, { captureDir });
    const restored = await restore(fresh, "c2", dir, ["r"]);
    expect(restored.status, JSON.stringify(restored.body)).toBe(200);
    expect(restored.body.restored).toEqual(["r-a1"]);

    // Admission stays closed until resume: the replacement's call waits, unadmitted.
    const calls = (await fakeCalls(fake)).length;
    const waiting = track(respond(fresh.url, "r-a1", { input: firstInput() }));
    const gate = fresh.server.participant?.gate;
    await expect.poll(() => gate?.waitingCount, POLL).toBe(1);

    // In the restored phase a retire names the restore's checkpoint.
    const retired = await control(fresh.url, "retire", {
      checkpoint_id: "c2",
      episode_ids: [ep("r-a1")],
    });
    expect(retired.status, JSON.stringify(retired.body)).toBe(200);
    // The retire returned only after the waiting call left the gate, refused.
    expect(gate?.waitingCount).toBe(0);
    const refused = await waiting.value;
    expect(refused.status, JSON.stringify(refused.body)).toBe(409);
    expect(refused.body.error.code).toBe("stale_attempt");

    const forgot = await control(fresh.url, "forget", {
      checkpoint_id: "c2",
      rollout_ids: ["r"],
    });
    expect(forgot.status).toBe(200);
    await resume(fresh.url, "c2");
    expect(await fakeCalls(fake)).toHaveLength(calls);
    // The restored attempt was retired: fenced, never marked started.
    expect(await fence(captureDir, "r-a1")).toBe(true);
    expect(await ledgerFiles(captureDir)).not.toContain("r-a1.lineage.started");
    expect(await ledgerRows(captureDir, "r-a1")).toBeNull();
  });
  it("is refused even when the retire is cut short by its deadline, and stays refused after forget and resume", async () => {
    const { fake, policy, captureDir } = await setup();
    await respond(policy.url, "r", { input: firstInput() }).expect(200);
    await prepare(policy.url, "c1");
    const { dir } = await commit(policy, "c1", ["r"]);
    await crash(policy);

    const fresh = await startPolicy(fake, { captureDir });
    expect((await restore(fresh, "c2", dir, ["r"])).status).toBe(200);
    const calls = (await fakeCalls(fake)).length;
    const waiting = track(respond(fresh.url, "r-a1", { input: firstInput() }));
    const gate = fresh.server.participant?.gate;
    await expect.poll(() => gate?.waitingCount, POLL).toBe(1);

    const late = await control(fresh.url, "retire", {
      checkpoint_id: "c2",
      deadline_ts: Date.now() / 1000 - 1,
      episode_ids: [ep("r-a1")],
    });
    expect(late.status, JSON.stringify(late.body)).toBe(409);
    expect(late.body.error.code).toBe("deadline_exceeded");
    const refused = await waiting.value;
    expect(refused.status, JSON.stringify(refused.body)).toBe(409);
    expect(refused.body.error.code).toBe("stale_attempt");
    await expect.poll(() => gate?.waitingCount, POLL).toBe(0);

    await control(fresh.url, "forget", { checkpoint_id: "c2", rollout_ids: ["r"] }).expect(200);
    await resume(fresh.url, "c2");
    expect(await fakeCalls(fake)).toHaveLength(calls);
  });
});

describe("retire of a huge attempt number", () => {
  it("answers at once and fences the window, without one file per earlier attempt", async () => {
    const { policy, captureDir } = await setup();
    await respond(policy.url, "big", { input: firstInput() }).expect(200);

    const retired = await control(policy.url, "retire", {
      checkpoint_id: "retire-huge",
      episode_ids: [{ rollout_id: "big", attempt: 100_000_000 }],
    });
    expect(retired.status, JSON.stringify(retired.body)).toBe(200);
    expect(await fence(captureDir, "big")).toBe(true);
    expect(await fence(captureDir, "big-a100000000")).toBe(true);
    expect(await ledgerRows(captureDir, "big")).toBeNull();
    const late = await respond(policy.url, "big-a5000", { input: firstInput() });
    expect(late.status, JSON.stringify(late.body)).toBe(409);
    expect((await status(policy.url)).report.counts).toMatchObject({ inflight: 0 });
  });
});
