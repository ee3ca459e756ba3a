/**
 * The AgentServer base in checkpoints, over HTTP with the real control routes (see
 * docs/agent.md): parking at boundaries, held model replies, seeds and closes around an open
 * checkpoint, carried restarts, retire, legacy `/run`, and commit → restore into a fresh server
 * → resume with the replacement continuing and the replaced attempt refused.
 */
import { sessionParticipantOf } from "../../support/agent-participants.js";
import { readFile, readdir } from "node:fs/promises";
import path from "node:path";
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import type { ServerOptions } from "#sdk/server/server.js";
import type { JsonValue } from "#sdk/json/json-value.js";
import { flush, makeTempDir, removeTempDir } from "../../support/test-participant.js";
import {
  CHECKPOINT_ON,
  POLL,
  SEED,
  ScriptedAgent,
  activate,
  closeReq,
  control,
  ep,
  seedBody,
  seeded,
  status,
  track,
} from "../../support/agent-harness.js";

const servers: ScriptedAgent[] = [];
const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
  await Promise.all(dirs.splice(0).map((d) => removeTempDir(d)));
});

async function serve(options: Partial<ServerOptions> = {}) {
  const agent = new ScriptedAgent({ name: "agent", checkpoint: CHECKPOINT_ON, ...options });
  servers.push(agent);
  const { url } = await agent.listen({ port: 0 });
  return { agent, url };
}

async function tempDir(): Promise<string> {
  const dir = await makeTempDir();
  dirs.push(dir);
  return dir;
}

interface StoredRecord {
  episode_id: { rollout_id: string; attempt: number };
  session_key: string;
  session: Record<string, JsonValue>;
  boundary: JsonValue;
  episode: JsonValue;
}

/** The agent records a commit wrote under `dir`, by session key. */
async function records(dir: string): Promise<Record<string, StoredRecord>> {
  const where = path.join(dir, "gym", "agent", "agent");
  const out: Record<string, StoredRecord> = {};
  for (const file of await readdir(where)) {
    if (!file.startsWith("records-")) continue;
    for (const line of (await readFile(path.join(where, file), "utf8")).split("\n")) {
      if (line.trim() === "") continue;
      const record = JSON.parse(line) as StoredRecord;
      out[record.session_key] = record;
    }
  }
  return out;
}

const prepare = (url: string, id: string, extra: Record<string, unknown> = {}) =>
  control(url, "prepare", { checkpoint_id: id, ...extra });
const commit = (url: string, id: string, dir: string, scope: unknown[] | null = null) =>
  control(url, "commit", { checkpoint_id: id, checkpoint_dir: dir, episode_ids: scope });
const resume = (url: string, id: string) => control(url, "resume", { checkpoint_id: id });
const restore = (url: string, id: string, dir: string, scope: unknown[]) =>
  control(url, "restore", { checkpoint_id: id, checkpoint_dir: dir, episode_ids: scope });

describe("parking and export", () => {
  it("a running activation parks at its next boundary; the commit exports that boundary, built once", async () => {
    const { agent, url } = await serve();
    const cookie = await seeded(url, "s");
    const tool = agent.hold("tool");
    const activation = track(activate(url, cookie, { index: 1 }));
    await tool.entered; // after the policy reply, before its boundary: running
    expect((await status(url)).report).toMatchObject({ ready: false, blockers: ["r"] });
    const prepared = track(prepare(url, "c1"));
    await flush(20);
    expect(prepared.done()).toBe(false);
    tool.release();
    const reply = await prepared.value;
    expect(reply.body).toMatchObject({ phase: "prepared", report: { ready: true } });
    expect(sessionParticipantOf(agent)?.stateOf("s")).toBe("at_boundary");
    expect(agent.snapshots).toBe(0); // boundaries are lazy
    const dir = await tempDir();
    const committed = await commit(url, "c1", dir).expect(200);
    expect(committed.body.episode_ids).toEqual(["r"]);
    expect(agent.snapshots).toBe(1);
    expect(agent.events).toEqual(["seed:s", "export:s"]);
    const saved = (await records(dir)).s;
    expect(saved).toMatchObject({
      episode_id: { rollout_id: "r", attempt: 0 },
      boundary: { step: 1, outputs: ["reply s 1"] },
      episode: null,
      session: {
        request: seedBody("s"),
        state: { builtFor: "r", task: "s" },
        activations: 1,
        completed_activation: 0,
        completed_reply: null,
      },
    });
    expect(activation.done()).toBe(false);
    await resume(url, "c1").expect(200);
    expect((await activation.value).status).toBe(200);
  });

  it("a session the hook describes with a value that is not JSON fails the commit with 422 naming the episode and the path", async () => {
    class DatedAgent extends ScriptedAgent {
      protected override async exportAgentSessions(input: {
        readonly sessionKeys: readonly string[];
        readonly signal: AbortSignal;
      }): Promise<Readonly<Record<string, Record<string, JsonValue>>>> {
        const out = await super.exportAgentSessions(input);
        const dated = new Date(0) as unknown as JsonValue;
        return Object.fromEntries(
          Object.entries(out).map(([key, session]) => [key, { ...session, when: dated }]),
        );
      }
    }
    const agent = new DatedAgent({ name: "agent", checkpoint: CHECKPOINT_ON });
    servers.push(agent);
    const { url } = await agent.listen({ port: 0 });
    await seeded(url, "s");
    await prepare(url, "c1").expect(200);
    const dir = await tempDir();
    const refused = await commit(url, "c1", dir).expect(422);
    expect(refused.body.error.code).toBe("invalid_checkpoint_state");
    expect(refused.body.error.detail).toMatch(
      /episode 'r' is not JSON: \$\.session\.when: a Date is not JSON/,
    );
    // Nothing was published: no manifest in the participant's directory.
    await expect(readdir(path.join(dir, "gym", "agent", "agent"))).resolves.not.toContain(
      "manifest.json",
    );
  });

  it("a model reply arriving after prepare is held at the boundary before the call until resume", async () => {
    const { agent, url } = await serve();
    agent.model.hold = true;
    const cookie = await seeded(url, "s");
    const activation = track(activate(url, cookie, { index: 1 }));
    const call = await agent.model.nth(1);
    await prepare(url, "c1").expect(200);
    call.respond("late reply");
    await flush(20);
    expect(activation.done()).toBe(false);
    expect((await status(url)).report.ready).toBe(true);
    const dir = await tempDir();
    await commit(url, "c1", dir).expect(200); // readiness did not regress
    expect((await records(dir)).s?.boundary).toEqual({ step: 0, outputs: [] });
    await resume(url, "c1").expect(200);
    const res = await activation.value;
    expect(res.status).toBe(200);
    expect(res.body.output).toEqual(["late reply"]);
  });

  it("an activation invoked while a checkpoint is open parks at its first boundary", async () => {
    const { agent, url } = await serve();
    const cookie = await seeded(url, "s");
    await prepare(url, "c1").expect(200);
    const activation = track(activate(url, cookie, { index: 1 }));
    await expect.poll(() => sessionParticipantOf(agent)?.stateOf("s"), POLL).toBe("at_boundary");
    expect(agent.model.calls).toEqual([]);
    const dir = await tempDir();
    await commit(url, "c1", dir).expect(200);
    expect((await records(dir)).s?.boundary).toEqual({ step: 0, outputs: [] });
    await resume(url, "c1").expect(200);
    expect((await activation.value).status).toBe(200);
  });

  it("the export keeps an indexed activation's reply without _ng_trajectory, and no reply for an unindexed one", async () => {
    const { url } = await serve();
    const indexed = await seeded(url, "a", ep("ra"));
    const plain = await seeded(url, "b", ep("rb"));
    await activate(url, indexed, { prefix: "ra", index: 1 }).expect(200);
    await activate(url, plain, { prefix: "rb" }).expect(200);
    await prepare(url, "c1").expect(200);
    const dir = await tempDir();
    await commit(url, "c1", dir).expect(200);
    const saved = await records(dir);
    expect(saved.a?.session).toMatchObject({
      activations: 1,
      completed_activation: 1,
      completed_reply: {
        response: { id: "resp-1", output: ["reply a 1"], invocation_id: "root" },
        cookies: { model_cookie: "loop-1" },
      },
    });
    expect(JSON.stringify(saved.a)).not.toContain("_ng_trajectory");
    expect(saved.b?.session).toMatchObject({ activations: 1, completed_reply: null });
    await resume(url, "c1").expect(200);
  });
});

describe("seeds and closes around a checkpoint", () => {
  it("a seed arriving while a checkpoint is open waits for resume and is not exported", async () => {
    const { agent, url } = await serve();
    await seeded(url, "a", ep("ra"));
    await prepare(url, "c1").expect(200);
    const seed = track(
      request(url)
        .post(SEED)
        .send(seedBody("b", ep("rb"))),
    );
    await flush(20);
    expect(seed.done()).toBe(false);
    expect(agent.count("seed:b")).toBe(0);
    const dir = await tempDir();
    const committed = await commit(url, "c1", dir).expect(200);
    expect(committed.body.episode_ids).toEqual(["ra"]);
    await resume(url, "c1").expect(200);
    expect((await seed.value).status).toBe(200);
  });

  it("a seed in progress when admission closes holds up prepare, and its session is exported", async () => {
    const { agent, url } = await serve();
    const gate = agent.hold("seed");
    const seed = track(request(url).post(SEED).send(seedBody("s")));
    await gate.entered;
    const prepared = track(prepare(url, "c1"));
    await expect.poll(async () => (await status(url)).phase, POLL).toBe("preparing");
    expect((await status(url)).report.blockers).toEqual(["r"]);
    expect(prepared.done()).toBe(false);
    gate.release();
    expect((await seed.value).status).toBe(200);
    expect((await prepared.value).body.phase).toBe("prepared");
    const dir = await tempDir();
    const committed = await commit(url, "c1", dir).expect(200);
    expect(committed.body.episode_ids).toEqual(["r"]);
    await resume(url, "c1").expect(200);
  });

  it("a close that arrives after prepare waits for resume, and the commit exports its session", async () => {
    const { agent, url } = await serve();
    const cookie = await seeded(url, "s");
    await prepare(url, "c1").expect(200);
    const close = track(closeReq(url, "s", ep("r"), cookie));
    await flush(20);
    expect(close.done()).toBe(false);
    const dir = await tempDir();
    const committed = await commit(url, "c1", dir).expect(200);
    expect(committed.body.episode_ids).toEqual(["r"]);
    expect(agent.count("close:")).toBe(0);
    await resume(url, "c1").expect(200);
    const receipt = await close.value;
    expect(receipt.status).toBe(200);
    expect(receipt.body.agent_observations).toEqual({ closed: "s", builtFor: "r" });
    expect(agent.count("close:s")).toBe(1);
  });

  it("a restore is refused while a seed is in progress", async () => {
    const source = await serve();
    await seeded(source.url, "a", ep("ra"));
    await prepare(source.url, "c1").expect(200);
    const dir = await tempDir();
    await commit(source.url, "c1", dir).expect(200);
    await resume(source.url, "c1").expect(200);

    const { agent, url } = await serve();
    const gate = agent.hold("seed");
    const seed = track(
      request(url)
        .post(SEED)
        .send(seedBody("b", ep("rb"))),
    );
    await gate.entered;
    const refused = await restore(url, "c2", dir, [ep("ra")]);
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe("checkpoint_error");
    expect(agent.count("restore:")).toBe(0);
    gate.release();
    expect((await seed.value).status).toBe(200);
  });
});

describe("restarts", () => {
  it("restarts carried in prepare's body neither block it nor are exported; their activation still parks until resume", async () => {
    const { agent, url } = await serve();
    const slow = await seeded(url, "s", ep("r"));
    await seeded(url, "t", ep("q"));
    const tool = agent.hold("tool");
    const activation = track(activate(url, slow, { index: 1 }));
    await tool.entered; // r is inside a slow tool call
    const prepared = await prepare(url, "c1", { restarts: ["r"] }).expect(200);
    expect(prepared.body).toMatchObject({
      phase: "prepared",
      report: { ready: true, blockers: [] },
    });
    const dir = await tempDir();
    const committed = await commit(url, "c1", dir).expect(200);
    expect(committed.body.episode_ids).toEqual(["q"]);
    expect(agent.events).toContain("export:t");
    tool.release();
    await expect.poll(() => sessionParticipantOf(agent)?.stateOf("s"), POLL).toBe("at_boundary");
    await flush(20);
    expect(activation.done()).toBe(false);
    await resume(url, "c1").expect(200);
    expect((await activation.value).status).toBe(200);
  });
});

describe("retire", () => {
  it("cancels the activation and waits for it before the retire hook; the attempt is refused until forget", async () => {
    const { agent, url } = await serve();
    agent.model.hold = true;
    agent.model.abortable = false;
    const cookie = await seeded(url, "s");
    const activation = track(activate(url, cookie, { index: 1 }));
    const call = await agent.model.nth(1);
    const retire = track(control(url, "retire", { checkpoint_id: "x1", episode_ids: [ep("r")] }));
    await expect.poll(() => call.signal.aborted, POLL).toBe(true);
    await flush(20);
    expect(retire.done()).toBe(false);
    expect(agent.count("retire:")).toBe(0);
    call.respond();
    expect((await retire.value).status).toBe(200);
    expect(agent.events).toEqual(["seed:s", "retire:s"]);
    const stopped = await activation.value;
    expect(stopped.status).toBe(409);
    expect(stopped.body.error.code).toBe("stale_attempt");
    const late = await activate(url, cookie, { index: 1 });
    expect(late.status).toBe(409);
    const reseed = await request(url).post(SEED).send(seedBody("s2"));
    expect(reseed.status).toBe(409);
    expect(reseed.body.error.code).toBe("stale_attempt");
    await control(url, "forget", { checkpoint_id: "x2", rollout_ids: ["r"] }).expect(200);
    await seeded(url, "s2");
  });

  it("a seed whose attempt is retired while it builds frees what it built before the retire replies", async () => {
    const { agent, url } = await serve();
    const gate = agent.hold("seed");
    const seed = track(request(url).post(SEED).send(seedBody("s")));
    await gate.entered;
    const retire = track(control(url, "retire", { checkpoint_id: "x1", episode_ids: [ep("r")] }));
    await flush(20);
    expect(retire.done()).toBe(false); // it waits for the seed in progress
    gate.release();
    const refused = await seed.value;
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe("stale_attempt");
    expect((await retire.value).status).toBe(200);
    expect(agent.events).toEqual(["seed:s", "retire:s"]);
    expect(sessionParticipantOf(agent)?.has("s")).toBe(false);
  });
});

describe("legacy /run", () => {
  it("needs a rollout; a running /run holds up prepare, parks at its next boundary, and is exported as run:<rollout>", async () => {
    const { agent, url } = await serve();
    const none = await request(url)
      .post("/run")
      .send({ responses_create_params: { input: "x" } });
    expect(none.status).toBe(400);
    expect(none.body.error.code).toBe("rollout_id_required");
    const gate = agent.hold("run");
    const run = track(
      request(url)
        .post("/run")
        .send({ responses_create_params: { input: "x" }, _ng_rollout_id: "job" }),
    );
    await gate.entered;
    const prepared = track(prepare(url, "c1"));
    await expect.poll(async () => (await status(url)).phase, POLL).toBe("preparing");
    expect((await status(url)).report.blockers).toEqual(["job"]);
    const refused = await request(url)
      .post("/run")
      .send({ responses_create_params: { input: "x" }, _ng_rollout_id: "other" });
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe("admission_closed");
    gate.release();
    expect((await prepared.value).body.phase).toBe("prepared");
    const dir = await tempDir();
    await commit(url, "c1", dir).expect(200);
    expect((await records(dir))["run:job"]).toMatchObject({
      episode_id: { rollout_id: "job", attempt: 0 },
      session: { activations: 0, completed_activation: 0, completed_reply: null },
      episode: { next: "return", result: { reward: 1, rollout: "job" } },
    });
    expect(agent.events).not.toContain("export:run:job"); // the hook never sees run: keys
    expect(run.done()).toBe(false);
    await resume(url, "c1").expect(200);
    expect((await run.value).body).toEqual({ reward: 1, rollout: "job" });
  });

  it("its self-dispatched /v1/responses is an activation of run:<rollout>, not a restart, and its kept reply is exported", async () => {
    const { agent, url } = await serve();
    const gate = agent.hold("run");
    const run = track(
      request(url)
        .post("/run")
        .send({ responses_create_params: { input: "x" }, _ng_rollout_id: "job" }),
    );
    await gate.entered;
    const loop = await activate(url, null, { prefix: "job", index: 1 }).expect(200);
    expect(loop.body).toMatchObject({ session: "run:job", invocation_id: "root" });
    // A legacy /run has no observation bundle: its loop's indexed reply keeps the trajectory,
    // which the run attaches to its result.
    expect(loop.body).toHaveProperty("_ng_trajectory");
    expect(agent.loops[0]).toMatchObject({ sessionKey: "run:job", tracked: true });
    const prepared = track(prepare(url, "c1"));
    await expect.poll(async () => (await status(url)).phase, POLL).toBe("preparing");
    gate.release(); // the run parks at its next boundary
    expect((await prepared.value).body).toMatchObject({
      phase: "prepared",
      report: { ready: true, restarts: [] },
    });
    const dir = await tempDir();
    await commit(url, "c1", dir).expect(200);
    expect((await records(dir))["run:job"]?.session).toMatchObject({
      activations: 1,
      completed_activation: 1,
      completed_reply: { response: { id: "resp-1", session: "run:job", _ng_trajectory: {} } },
    });
    await resume(url, "c1").expect(200);
    expect((await run.value).status).toBe(200);
    expect(sessionParticipantOf(agent)?.has("run:job")).toBe(false); // the session ends with the run
  });
});

describe("commit, restore into a fresh server, resume", () => {
  /** Seeds `s`, parks its first activation inside its second model call, commits; returns the dir. */
  async function checkpointMidActivation() {
    const { agent, url } = await serve();
    agent.steps = 2;
    agent.model.hold = true;
    const cookie = await seeded(url, "s");
    const activation = track(activate(url, cookie, { index: 1 }));
    (await agent.model.nth(1)).respond();
    const second = await agent.model.nth(2); // parked at the boundary after step 1
    await prepare(url, "c1").expect(200);
    const dir = await tempDir();
    const committed = await commit(url, "c1", dir).expect(200);
    expect(committed.body.episode_ids).toEqual(["r"]);
    await resume(url, "c1").expect(200);
    second.respond();
    expect((await activation.value).status).toBe(200);
    return { dir, cookie };
  }

  it("the replacement continues from the boundary and the replaced attempt is refused", async () => {
    const { dir, cookie } = await checkpointMidActivation();
    const { agent, url } = await serve();
    agent.steps = 2;
    const restored = await restore(url, "c2", dir, [ep("r")]).expect(200);
    expect(restored.body.restored).toEqual(["r-a1"]);
    expect(agent.restoredSessions).toEqual([
      [
        {
          sessionKey: "s",
          episodeId: { rollout_id: "r", attempt: 1 },
          session: {
            request: { ...seedBody("s"), tool_accesses: [], sandbox_access: null },
            state: { builtFor: "r", task: "s" },
          },
        },
      ],
    ]);
    expect(sessionParticipantOf(agent)?.isRestoredPending("s")).toBe(true);
    await resume(url, "c2").expect(200);
    const stale = await activate(url, cookie, { prefix: "r", index: 1 });
    expect(stale.status).toBe(409);
    expect(stale.body.error.code).toBe("stale_attempt");
    expect(agent.loops).toEqual([]);
    const res = await activate(url, cookie, { prefix: "r-a1", index: 1 });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(agent.loops[0]?.continuation).toEqual({ step: 1, outputs: ["reply s 1"] });
    expect(res.body).toMatchObject({
      invocation_id: "root", // the continued activation keeps its ID
      output: ["reply s 1", "reply s 2"],
      rollout: "r-a1",
    });
    expect(agent.model.calls.map((c) => c.step)).toEqual([2]); // only the step after the boundary
    expect(sessionParticipantOf(agent)?.isRestoredPending("s")).toBe(false);
    const receipt = await closeReq(url, "s", ep("r", 1), cookie).expect(200);
    expect(receipt.body.agent_observations).toEqual({ closed: "s", builtFor: "r-a1" });
  });

  it("a restored session's activation without the prefix is refused with no model call and no claim", async () => {
    const { dir, cookie } = await checkpointMidActivation();
    const { agent, url } = await serve();
    await restore(url, "c2", dir, [ep("r")]).expect(200);
    await resume(url, "c2").expect(200);
    const res = await activate(url, cookie, { prefix: null, index: 1 });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe("rollout_id_required");
    expect(agent.loops).toEqual([]);
    expect(agent.model.calls).toEqual([]);
    expect(sessionParticipantOf(agent)?.isRestoredPending("s")).toBe(true);
  });

  it("an unclaimed restored session is exported with its boundary while in scope, and freed without a retire mark once a commit leaves it out", async () => {
    const { dir } = await checkpointMidActivation();
    const { agent, url } = await serve();
    await restore(url, "c2", dir, [ep("r")]).expect(200);
    await resume(url, "c2").expect(200);
    await prepare(url, "c3").expect(200);
    const again = await tempDir();
    const kept = await commit(url, "c3", again, [ep("r", 1)]).expect(200);
    expect(kept.body.episode_ids).toEqual(["r-a1"]);
    expect((await records(again)).s).toMatchObject({
      episode_id: { rollout_id: "r", attempt: 1 },
      boundary: { step: 1, outputs: ["reply s 1"] },
    });
    await resume(url, "c3").expect(200);
    expect(agent.count("retire:")).toBe(0);
    await prepare(url, "c4").expect(200);
    const left = await commit(url, "c4", await tempDir(), [ep("other")]).expect(200);
    expect(left.body.episode_ids).toEqual([]);
    expect(agent.events.filter((e) => e.startsWith("retire:"))).toEqual(["retire:s"]);
    await resume(url, "c4").expect(200);
    expect(sessionParticipantOf(agent)?.has("s")).toBe(false);
    // No retire mark: the controller may start that attempt over.
    await seeded(url, "s", ep("r", 1));
  });

  it("the replacement re-seeding a restored session with the same request is idempotent", async () => {
    const { dir, cookie } = await checkpointMidActivation();
    const { agent, url } = await serve();
    await restore(url, "c2", dir, [ep("r")]).expect(200);
    await resume(url, "c2").expect(200);
    const again = await request(url)
      .post(SEED)
      .set("Cookie", cookie)
      .send(seedBody("s", ep("r", 1)));
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    expect(agent.count("seed:")).toBe(0); // nothing rebuilt
    const other = await request(url)
      .post(SEED)
      .send(seedBody("s", ep("r", 1), { sandbox_access: {} }));
    expect(other.status).toBe(409);
    expect(other.body).toEqual({
      detail: "agent_session_id is already bound to another seed request",
    });
  });

  it("a stored reply replayed by a restored session claims it, so a commit leaving it out does not free it", async () => {
    const source = await serve();
    const cookie = await seeded(source.url, "s");
    const original = await activate(source.url, cookie, { index: 1 }).expect(200);
    await prepare(source.url, "c1").expect(200);
    const dir = await tempDir();
    await commit(source.url, "c1", dir).expect(200);
    await resume(source.url, "c1").expect(200);

    const { agent, url } = await serve();
    await restore(url, "c2", dir, [ep("r")]).expect(200);
    await resume(url, "c2").expect(200);
    expect(sessionParticipantOf(agent)?.isRestoredPending("s")).toBe(true);
    const replay = await activate(url, cookie, { prefix: "r-a1", index: 1 }).expect(200);
    expect(replay.body).toEqual(original.body);
    expect(replay.body).not.toHaveProperty("_ng_trajectory");
    expect(agent.loops).toEqual([]);
    expect(agent.model.calls).toEqual([]);
    expect(sessionParticipantOf(agent)?.isRestoredPending("s")).toBe(false);
    await prepare(url, "c3").expect(200);
    await commit(url, "c3", await tempDir(), [ep("other")]).expect(200);
    await resume(url, "c3").expect(200);
    expect(agent.count("retire:")).toBe(0);
    const next = await activate(url, cookie, { prefix: "r-a1", index: 2 }).expect(200);
    expect(next.body.invocation_id).toBe("activation-2");
  });
});

describe("session hooks that return values", () => {
  /** The agent records a commit wrote under `dir`, by session key (a Map: keys are caller-chosen). */
  async function recordMap(dir: string): Promise<Map<string, StoredRecord>> {
    const where = path.join(dir, "gym", "agent", "agent");
    const out = new Map<string, StoredRecord>();
    for (const file of await readdir(where)) {
      if (!file.startsWith("records-")) continue;
      for (const line of (await readFile(path.join(where, file), "utf8")).split("\n")) {
        if (line.trim() === "") continue;
        const record = JSON.parse(line) as StoredRecord;
        out.set(record.session_key, record);
      }
    }
    return out;
  }

  const NAMES = ["__proto__", "constructor"] as const;

  /** Seeds every name under its own rollout, commits them all; returns the dir. */
  async function checkpointNamed(exportAs: "object" | "map"): Promise<string> {
    const { agent, url } = await serve();
    agent.exportAs = exportAs;
    for (const name of NAMES) await seeded(url, name, ep(`r${name}`));
    await prepare(url, "c1").expect(200);
    const dir = await tempDir();
    await commit(url, "c1", dir).expect(200);
    await resume(url, "c1").expect(200);
    return dir;
  }

  it.each(["map", "object"] as const)(
    "an export returned as a %s with sessions keyed __proto__ and constructor round-trips through commit and restore",
    async (exportAs) => {
      const dir = await checkpointNamed(exportAs);
      const stored = await recordMap(dir);
      for (const name of NAMES) {
        expect(stored.get(name)?.session).toMatchObject({
          request: { agent_session_id: name },
          state: { builtFor: `r${name}`, task: name },
          activations: 0,
        });
      }
      const { agent, url } = await serve();
      await restore(
        url,
        "c2",
        dir,
        NAMES.map((name) => ep(`r${name}`)),
      ).expect(200);
      await resume(url, "c2").expect(200);
      for (const name of NAMES) {
        // Installed from what the restore hook returned, its request rebound to the replacement.
        const receipt = await closeReq(url, name, ep(`r${name}`, 1)).expect(200);
        expect(receipt.body.agent_observations).toEqual({
          closed: name,
          builtFor: `r${name}-a1`,
        });
      }
      expect(agent.events.filter((e) => e.startsWith("restore:"))).toHaveLength(1);
    },
  );

  it("a restore hook's session is installed with its stored seed request rebound to the replacement attempt", async () => {
    const dir = await checkpointNamed("map");
    const { agent, url } = await serve();
    await restore(url, "c2", dir, [ep("rconstructor")]).expect(200);
    const view = (
      agent as unknown as {
        sessionView(key: string): { request: { episode_id: unknown } } | undefined;
      }
    ).sessionView("constructor");
    expect(view?.request.episode_id).toEqual(ep("rconstructor", 1));
    await resume(url, "c2").expect(200);
  });

  it("a restore hook that leaves a session out refuses the restore with checkpoint_error naming it, and installs none", async () => {
    const dir = await checkpointNamed("map");
    const { agent, url } = await serve();
    agent.omitFromRestore.add("constructor");
    const refused = await restore(
      url,
      "c2",
      dir,
      NAMES.map((name) => ep(`r${name}`)),
    );
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe("checkpoint_error");
    expect(refused.body.error.detail).toContain("[constructor]");
    const sessionView = (agent as unknown as { sessionView(key: string): unknown }).sessionView;
    for (const name of NAMES) expect(sessionView.call(agent, name)).toBeUndefined();
    expect(sessionParticipantOf(agent)?.has("__proto__")).toBe(false);
  });
});
