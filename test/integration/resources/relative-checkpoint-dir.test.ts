/**
 * A commit or restore whose `checkpoint_dir` is a relative path, on the reference counter: it
 * would resolve against the server's working directory, which is not the controller's, so it is
 * refused with 422 `invalid_request` naming `checkpoint_dir` before anything is touched. The
 * prepared checkpoint still commits to an absolute directory afterwards, and a refused restore
 * leaves the process fresh.
 */
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { rm } from "node:fs/promises";
import path from "node:path";
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import CounterServer from "../../../reference-servers/counter/src/index.js";
import { controlRoutes } from "../../support/control-routes.js";
import { makeTempDir, removeTempDir } from "../../support/test-participant.js";

const TOKEN = "relative-dir-token";
const { control, status } = controlRoutes(TOKEN);
const started: CounterServer[] = [];
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const server of started.splice(0)) await server.close();
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

function counter(): CounterServer {
  const server = new CounterServer({
    name: "counter",
    checkpoint: { enabled: true, control_auth_token: TOKEN },
    logLevel: "silent",
  });
  started.push(server);
  return server;
}

/** A relative directory name nothing uses; removed after the test should a server create it. */
function relativeDir(): string {
  const name = `gym-relative-${randomUUID()}`;
  cleanups.push(() => rm(path.resolve(name), { recursive: true, force: true }));
  return name;
}

async function tempDir(): Promise<string> {
  const dir = await makeTempDir();
  cleanups.push(() => removeTempDir(dir));
  return dir;
}

/** Seeds session `s1` of `ep1` and increments it once. */
async function seeded(app: ReturnType<CounterServer["app"]>): Promise<void> {
  const client = request.agent(app);
  await client
    .post("/ng-rollout/ep1/seed_session")
    .send({
      resources_session_id: "s1",
      episode_id: { rollout_id: "ep1", attempt: 0 },
      task_id: { taskset: "counter", task_id: "1" },
      task_data: { initial_count: 0, target: 1 },
    })
    .expect(200);
  await client.post("/ng-rollout/ep1/increment_counter").send({ count: 1 }).expect(200);
}

function expectRelativeRefused(res: request.Response): void {
  expect(res.status, JSON.stringify(res.body)).toBe(422);
  expect(res.body.error.code).toBe("invalid_request");
  expect(res.body.error.detail).toMatch(/checkpoint_dir: must be an absolute path/);
  expect(res.body.error.issues.map((issue: { path: unknown }) => issue.path)).toEqual([
    ["checkpoint_dir"],
  ]);
}

describe("a relative checkpoint_dir", () => {
  it("is refused on commit with 422 before anything is written; an absolute one then commits", async () => {
    const server = counter();
    const app = server.app();
    await seeded(app);
    await control(app, "prepare", { checkpoint_id: "c1" }).expect(200);
    const relative = relativeDir();
    const refused = await control(app, "commit", {
      checkpoint_id: "c1",
      checkpoint_dir: relative,
      episode_ids: null,
    });
    expectRelativeRefused(refused);
    expect(existsSync(path.resolve(relative))).toBe(false);
    expect((await status<{ phase: string }>(app)).phase).toBe("prepared");

    // The same checkpoint commits to an absolute directory: the refusal tied it to nothing.
    const dir = path.join(await tempDir(), "ckpt");
    const committed = await control(app, "commit", {
      checkpoint_id: "c1",
      checkpoint_dir: dir,
      episode_ids: null,
    });
    expect(committed.status, JSON.stringify(committed.body)).toBe(200);
    expect(committed.body.episode_ids).toEqual(["ep1"]);
    await control(app, "resume", { checkpoint_id: "c1" }).expect(200);
  });

  it("is refused on restore with 422, fencing and installing nothing", async () => {
    // A checkpoint of ep1 under a relative name in this process's working directory: a server
    // started there would find it, which is exactly what must not be relied on.
    const first = counter();
    const firstApp = first.app();
    await seeded(firstApp);
    await control(firstApp, "prepare", { checkpoint_id: "c1" }).expect(200);
    const relative = relativeDir();
    const committed = await control(firstApp, "commit", {
      checkpoint_id: "c1",
      checkpoint_dir: path.resolve(relative),
      episode_ids: null,
    });
    expect(committed.status, JSON.stringify(committed.body)).toBe(200);

    const fresh = counter();
    const app = fresh.app();
    const refused = await control(app, "restore", {
      checkpoint_id: "r1",
      checkpoint_dir: relative,
      episode_ids: [{ rollout_id: "ep1", attempt: 0 }],
    });
    expectRelativeRefused(refused);
    const after = await status<{
      phase: string;
      retired_rollouts: number;
      report: { counts: { sessions: number } };
    }>(app);
    expect(after).toMatchObject({ phase: "idle", retired_rollouts: 0 });
    expect(after.report.counts.sessions).toBe(0);
    expect(fresh.states.size).toBe(0);

    // Given as the absolute path it is, the same checkpoint restores into the same process.
    const restored = await control(app, "restore", {
      checkpoint_id: "r2",
      checkpoint_dir: path.resolve(relative),
      episode_ids: [{ rollout_id: "ep1", attempt: 0 }],
    });
    expect(restored.status, JSON.stringify(restored.body)).toBe(200);
    expect(restored.body.restored).toEqual(["ep1-a1"]);
    expect(fresh.states.get("s1")?.count).toBe(1);
  });
});
