/**
 * Restores of checkpoints no commit writes, on the reference counter: states that fail the
 * server's own schema, a session held twice (the same record, or two different ones), a session
 * claimed by two episodes. Each is a typed refusal (422 `invalid_checkpoint_state`) naming what
 * is wrong, nothing is installed, and the correct checkpoint still restores into the same
 * process afterwards. Session IDs named like Object.prototype members survive a commit and
 * restore like any other.
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

  type Rec = Record<string, unknown>;
  it.each([
    [
      "the same record twice",
      (records: Rec[]) => [...records, { ...(records[0] as Rec) }],
      "resources session 's1' twice (episode 'ep1')",
    ],
    [
      // "Last record wins" would install 5.
      "two different records of one episode's session",
      (records: Rec[]) => [...records, { ...(records[0] as Rec), state: { count: 5, target: 1 } }],
      "resources session 's1' twice (episode 'ep1')",
    ],
    [
      "one session claimed by two episodes",
      (records: Rec[]) => records.map((record) => ({ ...record, session_id: "s1" })),
      "resources session 's1' twice (episodes 'ep1' and 'ep2')",
    ],
  ])(
    "refuses %s with 422 invalid_checkpoint_state, installs nothing, then restores",
    async (_, craft, named) => {
      const { dir, episodes } = await committed({ s1: "ep1", s2: "ep2" }, 1);
      const crafted = `${dir}-crafted`;
      await import("node:fs/promises").then(({ cp }) => cp(dir, crafted, { recursive: true }));
      await rewriteRecords(crafted, "resources", "counter", craft);
      const fresh = counter();
      const app = fresh.app();
      const refused = await restore(app, "r1", crafted, episodes);
      expect(refused.status, JSON.stringify(refused.body)).toBe(422);
      expect(refused.body.error.code).toBe("invalid_checkpoint_state");
      expect(refused.body.error.detail).toContain(named);
      // Nothing installed: no state, no session, and the process still counts as fresh, so the
      // checkpoint as committed restores into it (a resources restore needs a process that
      // holds no session).
      expect(fresh.states.size).toBe(0);
      const after = await status<{ phase: string; report: { counts: { sessions: number } } }>(app);
      expect(after.phase).toBe("idle");
      expect(after.report.counts.sessions).toBe(0);
      const restored = await restore(app, "r2", dir, episodes);
      expect(restored.status, JSON.stringify(restored.body)).toBe(200);
      expect(restored.body.restored).toEqual(["ep1-a1", "ep2-a1"]);
      expect(fresh.states.get("s1")?.count).toBe(1);
      expect(fresh.states.get("s2")?.count).toBe(1);
    },
  );
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
