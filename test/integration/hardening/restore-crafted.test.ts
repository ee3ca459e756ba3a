/**
 * Restores of checkpoints no commit writes, on the reference counter: states that fail the
 * server's own schema, a session held twice, a session claimed by two episodes. Each is a typed
 * refusal naming what is wrong, nothing is installed, and the correct checkpoint still restores
 * into the same process afterwards. Session IDs named like Object.prototype members survive a
 * commit and restore like any other.
 */
import path from "node:path";
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import CounterServer from "../../../reference-servers/counter/src/index.js";
import { controlRoutes } from "../../support/control-routes.js";
import { rewriteRecords } from "../../support/craft-checkpoint.js";
import { makeTempDir, removeTempDir } from "../../support/test-participant.js";

const TOKEN = "restore-crafted-token";
const { control, status } = controlRoutes(TOKEN);
const started: CounterServer[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const server of started.splice(0)) await server.close();
  for (const dir of dirs.splice(0)) await removeTempDir(dir);
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

/** Seeds `sessions` (session ID → episode), increments each `count` times, and commits them. */
async function committed(sessions: Record<string, string>, count: number) {
  const dir = path.join(await makeTempDir(), "ckpt");
  dirs.push(path.dirname(dir));
  const server = counter();
  const app = server.app();
  for (const [sessionId, rollout] of Object.entries(sessions)) {
    const client = request.agent(app);
    const seed = await client.post(`/ng-rollout/${rollout}/seed_session`).send({
      resources_session_id: sessionId,
      episode_id: { rollout_id: rollout, attempt: 0 },
      task_id: { taskset: "counter", task_id: "1" },
      task_data: { initial_count: 0, target: count },
    });
    expect(seed.status, JSON.stringify(seed.body)).toBe(200);
    for (let i = 0; i < count; i++) {
      await client.post(`/ng-rollout/${rollout}/increment_counter`).send({ count: 1 }).expect(200);
    }
  }
  await control(app, "prepare", { checkpoint_id: "c1" }).expect(200);
  const commit = await control(app, "commit", {
    checkpoint_id: "c1",
    checkpoint_dir: dir,
    episode_ids: null,
  });
  expect(commit.status, JSON.stringify(commit.body)).toBe(200);
  await control(app, "resume", { checkpoint_id: "c1" }).expect(200);
  const episodes = [...new Set(Object.values(sessions))].map((rollout_id) => ({
    rollout_id,
    attempt: 0,
  }));
  return { dir, episodes };
}

function restore(
  app: ReturnType<CounterServer["app"]>,
  id: string,
  dir: string,
  episodes: object[],
) {
  return control(app, "restore", { checkpoint_id: id, checkpoint_dir: dir, episode_ids: episodes });
}

describe("a restore of a crafted counter checkpoint", () => {
  it.each([
    ["a count that is not a number", { count: "x", target: 2 }],
    ["a state that is null", null],
  ])("refuses %s with 422 naming the episode, installs nothing, then restores", async (_, bad) => {
    const { dir, episodes } = await committed({ s1: "ep1" }, 2);
    const good = `${dir}-good`;
    await import("node:fs/promises").then(({ cp }) => cp(dir, good, { recursive: true }));
    await rewriteRecords(dir, "resources", "counter", (records) =>
      records.map((record) => ({ ...record, state: bad })),
    );
    const fresh = counter();
    const app = fresh.app();
    const refused = await restore(app, "r1", dir, episodes);
    expect(refused.status, JSON.stringify(refused.body)).toBe(422);
    expect(refused.body.error.code).toBe("invalid_checkpoint_state");
    expect(refused.body.error.detail).toContain("episode 'ep1'");
    expect(fresh.states.size).toBe(0);
    expect((await status<{ phase: string }>(app)).phase).toBe("idle");
    // The correct checkpoint restores into the same process.
    const restored = await restore(app, "r2", good, episodes);
    expect(restored.status, JSON.stringify(restored.body)).toBe(200);
    expect(restored.body.restored).toEqual(["ep1-a1"]);
    expect(fresh.states.get("s1")?.count).toBe(2);
  });

  it("refuses a session held twice, and a session claimed by two episodes (409)", async () => {
    const { dir, episodes } = await committed({ s1: "ep1", s2: "ep2" }, 1);
    const twice = `${dir}-twice`;
    await import("node:fs/promises").then(({ cp }) => cp(dir, twice, { recursive: true }));
    // The same record twice, with another count: "last record wins" would install 5.
    await rewriteRecords(twice, "resources", "counter", (records) => [
      ...records,
      { ...(records[0] as Record<string, unknown>), state: { count: 5, target: 1 } },
    ]);
    // Session s1 claimed by ep2 as well.
    await rewriteRecords(dir, "resources", "counter", (records) =>
      records.map((record) => ({ ...record, session_id: "s1" })),
    );
    for (const crafted of [twice, dir]) {
      const fresh = counter();
      const app = fresh.app();
      const refused = await restore(app, "r1", crafted, episodes);
      expect(refused.status, JSON.stringify(refused.body)).toBe(409);
      expect(refused.body.error.code).toBe("checkpoint_error");
      expect(refused.body.error.detail).toContain("resources session 's1' twice");
      expect(fresh.states.size).toBe(0);
    }
  });
});

describe("session IDs named like Object.prototype members", () => {
  it("survive commit and restore with their state", async () => {
    const sessions = {
      __proto__: "ep1",
      constructor: "ep2",
      hasOwnProperty: "ep3",
      toString: "ep4",
    };
    // An object literal's __proto__ sets the prototype: build the map with own keys instead.
    const own = Object.fromEntries(Object.entries(sessions)) as Record<string, string>;
    Object.defineProperty(own, "__proto__", { value: "ep1", enumerable: true });
    const { dir, episodes } = await committed(own, 3);
    const fresh = counter();
    const app = fresh.app();
    const restored = await restore(app, "r1", dir, episodes);
    expect(restored.status, JSON.stringify(restored.body)).toBe(200);
    expect(restored.body.restored).toEqual(["ep1-a1", "ep2-a1", "ep3-a1", "ep4-a1"]);
    for (const id of ["__proto__", "constructor", "hasOwnProperty", "toString"]) {
      expect(fresh.states.get(id)?.count, id).toBe(3);
    }
    // The continuing attempt reads the restored count through its session.
    await control(app, "resume", { checkpoint_id: "r1" }).expect(200);
    expect(Object.keys(own)).toContain("__proto__");
  });
});
