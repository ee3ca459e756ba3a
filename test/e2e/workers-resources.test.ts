/**
 * The reference counter with several workers under `gym serve`: sessions made on every worker
 * (each request over a fresh connection), a checkpoint of the whole participant, a crash, and a
 * restore into a different worker count. Every session continues on the worker its old cookie
 * now leads to (the alias table), with the reward only its restored count can give; the
 * records name the workers the sessions lived on; stale attempts are refused by every worker.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { decodeSessionCookie } from "#sdk/server/resources/session-cookie.js";
import { SessionSecret } from "#sdk/server/session-secret.js";
import { gym, killEverything, stateServers, waitFor } from "./helpers.js";
import {
  childPids,
  CounterDeployment,
  committedManifest,
  committedRecords,
  cookieOwner,
  postFresh,
} from "./workers-harness.js";

const SESSIONS = 16;
const TARGET = 3;
const dirs: string[] = [];

afterAll(async () => {
  for (const dir of dirs) {
    await killEverything(dir, [path.join(dir, "run.json")]);
    rmSync(dir, { recursive: true, force: true });
  }
});

function seedBody(i: number, attempt = 0): Record<string, unknown> {
  return {
    resources_session_id: `s${i}`,
    episode_id: { rollout_id: `r${i}`, attempt },
    task_id: { taskset: "t", task_id: String(i) },
    task_data: { target: TARGET },
  };
}

const VERIFY = { responses_create_params: { input: [] }, response: { output: [] } };

/** The sessions the counter's status counts (every worker's, with several). */
async function sessionCount(run: CounterDeployment): Promise<number> {
  const status = await run.control("status");
  return (status.body.report as { counts: Record<string, number> }).counts.sessions ?? -1;
}

/** Seeds fresh sessions (new rollouts) until the cookies have named `count` owners. */
async function ownersOfLiveWorkers(url: string, count: number): Promise<string[]> {
  const owners = new Set<string>();
  for (let probe = 0; owners.size < count && probe < 20 * count; probe++) {
    const reply = await postFresh(url, `/ng-rollout/probe-${probe}/seed_session`, {
      episode_id: { rollout_id: `probe-${probe}`, attempt: 0 },
      task_data: { target: 1 },
    });
    expect(reply.status).toBe(200);
    const owner = cookieOwner(reply.setCookie ?? "");
    if (owner !== null) owners.add(owner);
  }
  return [...owners];
}

describe.each([
  [1, 2],
  [2, 4],
  [2, 1],
])("a counter with %i worker(s) restored into %i", { timeout: 240_000 }, (before, after) => {
  it("continues every session on its owner with the right reward", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), `gym-workers-${before}-${after}-`));
    dirs.push(dir);
    const run = new CounterDeployment(dir);
    await run.serve(before);

    // Consecutive connections go to consecutive workers: the seeds spread over all of them.
    const cookies: string[] = [];
    for (let i = 0; i < SESSIONS; i++) {
      const seeded = await postFresh(run.url, `/ng-rollout/r${i}/seed_session`, seedBody(i));
      expect(seeded.status, JSON.stringify(seeded.body)).toBe(200);
      cookies.push(seeded.setCookie ?? "");
    }
    for (const [i, cookie] of cookies.entries()) {
      const incremented = await postFresh(
        run.url,
        `/ng-rollout/r${i}/increment_counter`,
        { count: 1 },
        { cookie },
      );
      expect(incremented.body).toEqual({ success: true });
    }
    // Signed with the key derived from the control token: a restored process derives it again.
    const key = SessionSecret.fromControlToken(run.token).keyFor("CounterServer___counter");
    for (const [i, cookie] of cookies.entries()) {
      expect(decodeSessionCookie(cookie.slice(cookie.indexOf("=") + 1), key)).toBe(`s${i}`);
    }
    // Live sessions are counted while admission is open, whichever worker holds them.
    expect(
      await waitFor(async () => (await sessionCount(run)) === SESSIONS, 10_000),
      "status counts every live session",
    ).toBe(true);
    const ownersBefore = cookies.map(cookieOwner);
    // One process names no owner (its cookies are unchanged); several spread the sessions.
    expect(new Set(ownersBefore).size).toBe(before === 1 ? 1 : before);
    if (before === 1) expect(ownersBefore[0]).toBeNull();

    const checkpointDir = path.join(dir, "checkpoints", "c1");
    const deadline = (): number => Date.now() / 1000 + 60;
    const prepared = await run.control("prepare", { checkpoint_id: "c1", deadline_ts: deadline() });
    expect(prepared.body.phase).toBe("prepared");
    // Several workers report how many took part; one process reports as it always did.
    expect((prepared.body.report as { counts: Record<string, number> }).counts.workers).toBe(
      before === 1 ? undefined : before,
    );
    const committed = await run.control("commit", {
      checkpoint_id: "c1",
      checkpoint_dir: checkpointDir,
      deadline_ts: deadline(),
      episode_ids: null,
    });
    expect(committed.status, JSON.stringify(committed.body)).toBe(200);

    const records = committedRecords(checkpointDir, "resources", "counter") as {
      session_id: string;
      owner: string | null;
    }[];
    expect(records).toHaveLength(SESSIONS);
    for (const record of records) {
      const i = Number(record.session_id.slice(1));
      expect(record.owner).toBe(ownersBefore[i]);
    }
    if (before > 1) {
      const listed = committedManifest(checkpointDir, "resources", "counter").session_owners;
      expect(listed).toEqual([...new Set(ownersBefore)].sort());
    }

    await run.crash();
    await run.serve(after);
    const scope = Array.from({ length: SESSIONS }, (_, i) => ({ rollout_id: `r${i}`, attempt: 0 }));
    const restored = await run.control("restore", {
      checkpoint_id: "c1",
      checkpoint_dir: checkpointDir,
      deadline_ts: deadline(),
      episode_ids: scope,
    });
    expect(restored.status, JSON.stringify(restored.body)).toBe(200);
    if (after > 1) {
      // Every old owner (a one-process server's sessions as "") leads to a live worker.
      const status = await run.control("status");
      expect(status.body.workers).toBe(after);
      const aliases = status.body.session_aliases as Record<string, string>;
      expect(Object.keys(aliases).sort()).toEqual(
        [...new Set(ownersBefore.map((owner) => owner ?? ""))].sort(),
      );
    }
    expect(
      (await run.control("resume", { checkpoint_id: "c1", deadline_ts: deadline() })).status,
    ).toBe(200);

    for (let i = 0; i < SESSIONS; i++) {
      const cookie = cookies[i] ?? "";
      for (let step = 1; step < TARGET; step++) {
        const incremented = await postFresh(
          run.url,
          `/ng-rollout/r${i}-a1/increment_counter`,
          { count: 1 },
          { cookie },
        );
        expect(incremented.body, `session ${i}`).toEqual({ success: true });
      }
      const verified = await postFresh(run.url, `/ng-rollout/r${i}-a1/verify`, VERIFY, { cookie });
      expect((verified.body as { reward: number }).reward, `session ${i}`).toBe(1);
    }

    // Every restored session verified and ended: the count is back to none.
    expect(
      await waitFor(async () => (await sessionCount(run)) === 0, 10_000),
      "status counts no session once all ended",
    ).toBe(true);

    // Each worker refuses the replaced attempt, whichever one a request reaches.
    if (after > 1) {
      const live = await ownersOfLiveWorkers(run.url, after);
      expect(live).toHaveLength(after);
      for (const owner of live) {
        const stale = await postFresh(run.url, "/ng-rollout/r0/seed_session", seedBody(0), {
          headers: { "x-ng-session-owner": owner },
        });
        expect(stale.status).toBe(409);
        expect((stale.body as { error: { code: string } }).error.code).toBe("stale_attempt");
      }
    }
    await run.stop();
  });
});

describe("a worker that dies", { timeout: 120_000 }, () => {
  it("shows in health and status, and makes prepare fail with worker_lost naming it", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "gym-workers-lost-"));
    dirs.push(dir);
    const run = new CounterDeployment(dir);
    await run.serve(2);
    const coordinator = stateServers(run.stateFile)[0]?.pid ?? -1;
    const workers = childPids(coordinator);
    expect(workers).toHaveLength(2);
    const victim = workers[1] ?? -1;
    process.kill(victim, "SIGKILL");

    // Whichever worker answers says so (the dead one accepts nothing any more). Bounded
    // calls: a connection handed to the worker in the instant it died is never answered.
    expect(
      await waitFor(async () => {
        const res = await fetch(`${run.url}/health`, { signal: AbortSignal.timeout(2_000) }).catch(
          () => null,
        );
        if (res === null) return false;
        return (
          res.status === 503 && ((await res.json()) as { status: string }).status === "worker_lost"
        );
      }, 10_000),
    ).toBe(true);
    // The coordinator names how it ended once the process supervisor reports the exit.
    let status = await run.control("status");
    expect(
      await waitFor(async () => {
        status = await run.control("status");
        return JSON.stringify(status.body.lost_workers).includes("signal SIGKILL");
      }, 10_000),
    ).toBe(true);
    expect(status.body.lost_workers).toEqual([
      expect.objectContaining({ pid: victim, exit: "signal SIGKILL" }),
    ]);
    expect((status.body.report as { blockers: string[] }).blockers).toContain(
      "resources-worker-lost",
    );
    // The surviving worker's health names how it ended too.
    expect(
      await waitFor(async () => {
        const res = await fetch(`${run.url}/health`, { signal: AbortSignal.timeout(2_000) }).catch(
          () => null,
        );
        return res !== null && (await res.text()).includes("signal SIGKILL");
      }, 10_000),
    ).toBe(true);

    const prepared = await run.control("prepare", {
      checkpoint_id: "c1",
      deadline_ts: Date.now() / 1000 + 30,
    });
    expect(prepared.status).toBe(409);
    const error = (prepared.body as { error: { code: string; detail: string } }).error;
    expect(error.code).toBe("worker_lost");
    expect(error.detail).toContain(`pid ${victim}`);
    // Nothing was left half-done: the participant is idle, admission open.
    expect((await run.control("status")).body.phase).toBe("idle");

    const shown = await gym(["ckpt", "status", "--state", run.stateFile], { compiled: true });
    expect(shown.stdout).toContain("WORKERS");
    expect(shown.stdout).toContain(`pid ${victim}`);
    await run.stop();
  });
});
