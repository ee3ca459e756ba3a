/**
 * The AgentServer base over HTTP (see docs/agent.md): seed validation and idempotence,
 * the session cookie, activation prefix and attempt checks, activation idempotence, close
 * receipts and their window, close stopping the activation, direct calls as restarts, startup
 * refusals and the restart-only agent.
 */
import {
  restartOnlyParticipantOf,
  sessionParticipantOf,
} from "../../support/agent-participants.js";
import request from "supertest";
import { afterEach, describe, expect, it, vi } from "vitest";
import { ConfigError } from "#sdk/errors.js";
import { AgentServer } from "#sdk/server/agent-server.js";
import type { RespondResult } from "#sdk/server/agent/agent-hooks.js";
import type { ServerOptions } from "#sdk/server/server.js";
import { MAX_AGENT_SESSION_ID_LENGTH } from "#sdk/wire/agent.js";
import { flush, makeTempDir, removeTempDir } from "../../support/test-participant.js";
import {
  CHECKPOINT_ON,
  POLL,
  RestartOnlyAgent,
  SEED,
  ScriptedAgent,
  activate,
  closeReq,
  control,
  cookieOf,
  ep,
  prepareNow,
  seedBody,
  seeded,
  status,
  track,
} from "../../support/agent-harness.js";

const servers: AgentServer[] = [];
const dirs: string[] = [];
afterEach(async () => {
  vi.restoreAllMocks();
  await Promise.all(servers.splice(0).map((s) => s.close()));
  await Promise.all(dirs.splice(0).map((d) => removeTempDir(d)));
});

async function serve<T extends ScriptedAgent | RestartOnlyAgent = ScriptedAgent>(
  options: Partial<ServerOptions> & { kind?: new (o: ServerOptions) => T } = {},
): Promise<{ agent: T; url: string }> {
  const { kind, ...rest } = options;
  const Kind = kind ?? (ScriptedAgent as unknown as new (o: ServerOptions) => T);
  const agent = new Kind({ name: "agent", checkpoint: CHECKPOINT_ON, ...rest });
  servers.push(agent);
  const { url } = await agent.listen({ port: 0 });
  return { agent, url };
}

const direct = (grant: string) => ({
  kind: "direct_http",
  name: grant,
  base_url: "http://127.0.0.1:1/ng-rollout/r",
});

describe("seed", () => {
  it("refuses unknown fields and duplicate tool access names with 422, building nothing", async () => {
    const { agent, url } = await serve();
    const unknown = await request(url)
      .post(SEED)
      .send(seedBody("s", ep("r"), { surprise: 1 }));
    expect(unknown.status).toBe(422);
    expect(unknown.body.error.code).toBe("invalid_request");
    const twice = await request(url)
      .post(SEED)
      .send(seedBody("s", ep("r"), { tool_accesses: [direct("tools"), direct("tools")] }));
    expect(twice.status).toBe(422);
    expect(JSON.stringify(twice.body)).toContain("tools");
    const distinct = await request(url)
      .post(SEED)
      .send(seedBody("s", ep("r"), { tool_accesses: [direct("a"), direct("b")] }));
    expect(distinct.status).toBe(200);
    expect(agent.events).toEqual(["seed:s"]);
  });

  it("refuses a session cookie that names another session with 409 and a detail", async () => {
    const { agent, url } = await serve();
    const cookie = await seeded(url, "s1");
    const res = await request(url).post(SEED).set("Cookie", cookie).send(seedBody("s2"));
    expect(res.status).toBe(409);
    expect(res.body).toEqual({ detail: "agent_session_id does not match the session cookie" });
    expect(agent.count("seed:s2")).toBe(0);
  });

  it("an identical seed is idempotent; another body for the same ID is refused", async () => {
    const { agent, url } = await serve();
    const first = await request(url).post(SEED).send(seedBody("s")).expect(200);
    expect(first.body).toEqual({ agent_session_id: "s" });
    expect(cookieOf(first)).toContain("agent_session___agent=");
    const again = await request(url)
      .post(SEED)
      .set("Cookie", cookieOf(first))
      .send(seedBody("s"))
      .expect(200);
    expect(again.body).toEqual({ agent_session_id: "s" });
    expect(agent.count("seed:s")).toBe(1); // nothing rebuilt
    const other = await request(url)
      .post(SEED)
      .send({ ...seedBody("s"), task_id: { taskset: "t", task_id: "other" } });
    expect(other.status).toBe(409);
    expect(other.body).toEqual({
      detail: "agent_session_id is already bound to another seed request",
    });
  });

  it("a seed that fails part way keeps its partial state for the close only", async () => {
    const { agent, url } = await serve();
    agent.partialSetupFailure = new Error("sandbox failed to start");
    const failed = await request(url).post(SEED).send(seedBody("s"));
    expect(failed.status).toBe(500);
    expect(sessionParticipantOf(agent)?.has("s")).toBe(false);
    const again = await request(url).post(SEED).send(seedBody("s"));
    expect(again.status).toBe(409);
    expect(again.body).toEqual({ detail: "Agent session is closing" });
    expect(agent.count("seed:")).toBe(1);
    const receipt = await closeReq(url, "s").expect(200);
    expect(receipt.body.agent_observations).toEqual({ closed: "s", builtFor: "r" });
    expect(agent.count("close:s")).toBe(1);
  });

  it("a seed of a closed session is refused: already closed", async () => {
    const { url } = await serve();
    const cookie = await seeded(url, "s");
    await closeReq(url, "s", ep("r"), cookie).expect(200);
    const res = await request(url).post(SEED).send(seedBody("s"));
    expect(res.status).toBe(409);
    expect(res.body).toEqual({ detail: "Agent session is already closed" });
  });
});

describe("activation", () => {
  it("with checkpointing on, a session activation without the rollout prefix is refused before any work; off, it runs", async () => {
    const { agent, url } = await serve();
    const cookie = await seeded(url, "s");
    const res = await activate(url, cookie, { prefix: null, index: 1 });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe("rollout_id_required");
    expect(agent.loops).toEqual([]);
    expect(agent.model.calls).toEqual([]);
    const ok = await activate(url, cookie, { index: 1 }); // the index was not consumed
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);

    const off = await serve({ checkpoint: null });
    const offCookie = await seeded(off.url, "s");
    // The activation header is ignored too.
    const plain = await activate(off.url, offCookie, { prefix: null, index: "abc" });
    expect(plain.status, JSON.stringify(plain.body)).toBe(200);
    expect(plain.body.invocation_id).toBe("root");
    expect(off.agent.loops).toHaveLength(1);
    expect(off.agent.loops[0]?.tracked).toBe(false);
  });

  it("an activation under another attempt's prefix is refused as stale_attempt", async () => {
    const { agent, url } = await serve();
    const cookie = await seeded(url, "s", ep("r", 1));
    for (const prefix of ["r", "r-a2", "q-a1"]) {
      const res = await activate(url, cookie, { prefix });
      expect(res.status, prefix).toBe(409);
      expect(res.body.error.code).toBe("stale_attempt");
    }
    expect(agent.loops).toEqual([]);
    await activate(url, cookie, { prefix: "r-a1" }).expect(200);
    const capture = await activate(url, cookie, { prefix: "r-a1/training-token-capture" });
    expect(capture.status).toBe(200);
    expect(capture.body).toMatchObject({ rollout: "r-a1", invocation_id: "activation-2" });
  });

  it("refuses an activation index that is not a positive integer", async () => {
    const { agent, url } = await serve();
    const cookie = await seeded(url, "s");
    for (const index of ["0", "-1", "abc", "1.5", ""]) {
      const res = await activate(url, cookie, { index });
      expect(res.status, `index ${JSON.stringify(index)}`).toBe(409);
      expect(res.body.error.code).toBe("activation_out_of_order");
    }
    expect(agent.loops).toEqual([]);
  });

  it("repeating the completed activation answers its stored reply without running the loop; gaps are refused", async () => {
    const { agent, url } = await serve();
    const cookie = await seeded(url, "s");
    const first = await activate(url, cookie, { index: 1 }).expect(200);
    expect(first.body).toMatchObject({
      id: "resp-1",
      invocation_id: "root",
      output: ["reply s 1"],
    });
    expect(cookieOf(first)).toBe("model_cookie=loop-1");
    const replay = await activate(url, cookie, { index: 1 }).expect(200);
    expect(replay.body).toEqual(first.body);
    expect(cookieOf(replay)).toBe("model_cookie=loop-1");
    expect(agent.loops).toHaveLength(1);
    expect(agent.model.calls).toHaveLength(1);
    const gap = await activate(url, cookie, { index: 3 });
    expect(gap.status).toBe(409);
    expect(gap.body.error.code).toBe("activation_out_of_order");
    const second = await activate(url, cookie, { index: 2 }).expect(200);
    expect(second.body.invocation_id).toBe("activation-2");
    const old = await activate(url, cookie, { index: 1 }); // neither the last nor the next
    expect(old.status).toBe(409);
    expect(old.body.error.code).toBe("activation_out_of_order");
    expect(agent.loops).toHaveLength(2);
  });

  it("an indexed reply and its stored copy carry no _ng_trajectory; an unindexed reply does", async () => {
    const { url } = await serve();
    const indexed = await seeded(url, "a");
    const reply = await activate(url, indexed, { index: 1 }).expect(200);
    expect(reply.body).not.toHaveProperty("_ng_trajectory");
    const replay = await activate(url, indexed, { index: 1 }).expect(200);
    expect(replay.body).not.toHaveProperty("_ng_trajectory");
    const plain = await seeded(url, "b");
    const unindexed = await activate(url, plain).expect(200);
    expect(unindexed.body._ng_trajectory).toEqual({ invocation_id: "root", loop: 2 });
  });

  it("an activation without an index keeps no reply to replay", async () => {
    const { agent, url } = await serve();
    const cookie = await seeded(url, "s");
    await activate(url, cookie).expect(200);
    const replay = await activate(url, cookie, { index: 1 });
    expect(replay.status).toBe(409);
    expect(replay.body.error.code).toBe("activation_out_of_order");
    expect(agent.loops).toHaveLength(1);
    const next = await activate(url, cookie).expect(200); // without an index: a new activation
    expect(next.body.invocation_id).toBe("activation-2");
  });

  it("a request for an activation still running waits for it and gets its reply", async () => {
    const { agent, url } = await serve();
    agent.model.hold = true;
    const cookie = await seeded(url, "s");
    const first = track(activate(url, cookie, { index: 1 }));
    const call = await agent.model.nth(1);
    const again = track(activate(url, cookie, { index: 1 }));
    const unindexed = await activate(url, cookie); // no index to wait on: refused
    expect(unindexed.status).toBe(409);
    expect(unindexed.body.error.code).toBe("checkpoint_error");
    await flush(20);
    expect(again.done()).toBe(false);
    call.respond("the one reply");
    const [a, b] = await Promise.all([first.value, again.value]);
    expect(a.status).toBe(200);
    expect(b.status).toBe(200);
    expect(b.body).toEqual(a.body);
    expect(a.body.output).toEqual(["the one reply"]);
    expect(cookieOf(b)).toBe("model_cookie=loop-1");
    expect(agent.loops).toHaveLength(1);
  });

  it("refuses an activation of a closed or unknown session", async () => {
    const { url } = await serve();
    const cookie = await seeded(url, "s");
    await closeReq(url, "s", ep("r"), cookie).expect(200);
    const res = await activate(url, cookie);
    expect(res.status).toBe(409);
    expect(res.body).toEqual({ detail: "Unknown or closing agent_session_id" });
    const forged = await activate(url, "agent_session___agent=forged");
    expect(forged.status).toBe(409);
    expect(forged.body).toEqual({ detail: "Invalid agent session marker" });
  });
});

describe("close", () => {
  it("returns the close hook's receipt, idempotently, and refuses another episode", async () => {
    const { agent, url } = await serve();
    const cookie = await seeded(url, "s");
    const mismatch = await closeReq(url, "s", ep("r", 1), cookie);
    expect(mismatch.status).toBe(409);
    expect(mismatch.body).toEqual({
      detail: "episode_id does not match the seeded agent session",
    });
    const receipt = await closeReq(url, "s", ep("r"), cookie).expect(200);
    expect(receipt.body).toEqual({
      agent_session_id: "s",
      agent_observations: { closed: "s", builtFor: "r" },
      resources_cookies: { jar: "s" },
    });
    expect(cookieOf(receipt)).toContain("agent_session___agent=");
    const again = await closeReq(url, "s", ep("r"), cookie).expect(200);
    expect(again.body).toEqual(receipt.body);
    expect(agent.count("close:")).toBe(1);
  });

  it("stops a running activation before its close hook runs", async () => {
    const { agent, url } = await serve();
    agent.model.hold = true;
    const cookie = await seeded(url, "s");
    const activation = track(activate(url, cookie, { index: 1 }));
    const call = await agent.model.nth(1);
    const close = await closeReq(url, "s", ep("r"), cookie);
    expect(call.signal.aborted).toBe(true);
    expect(close.status, JSON.stringify(close.body)).toBe(200);
    expect(close.body.agent_observations).toEqual({ closed: "s", builtFor: "r" });
    expect(agent.loops[0]?.ended).toBe(true);
    const stopped = await activation.value;
    expect(stopped.status).toBe(409);
    expect(agent.count("close:s")).toBe(1);
  });

  it("a close cut short while it stops the activation has not run the hook; a retry runs it exactly once", async () => {
    const { agent, url } = await serve();
    agent.model.hold = true;
    agent.model.abortable = false; // the activation takes its time to stop
    const cookie = await seeded(url, "s");
    const activation = track(activate(url, cookie, { index: 1 }));
    const call = await agent.model.nth(1);
    const cut = new AbortController();
    const first = fetch(`${url}/v1/agent_sessions/close`, {
      method: "POST",
      headers: { "content-type": "application/json", cookie },
      body: JSON.stringify({ agent_session_id: "s", episode_id: ep("r") }),
      signal: cut.signal,
    });
    first.catch(() => undefined);
    await expect.poll(() => call.signal.aborted, POLL).toBe(true); // the close cancelled it
    cut.abort();
    await expect(first).rejects.toThrow();
    expect(agent.count("close:")).toBe(0);
    call.respond();
    expect((await activation.value).status).toBe(409);
    const retry = await closeReq(url, "s", ep("r"), cookie);
    expect(retry.status, JSON.stringify(retry.body)).toBe(200);
    expect(retry.body.agent_observations).toEqual({ closed: "s", builtFor: "r" });
    const third = await closeReq(url, "s", ep("r"), cookie).expect(200);
    expect(third.body).toEqual(retry.body);
    expect(agent.count("close:")).toBe(1);
  });

  it("a retire that frees the session while its close waits leaves no receipt; the close gets stale_attempt", async () => {
    const { agent, url } = await serve();
    agent.model.hold = true;
    agent.model.abortable = false;
    const cookie = await seeded(url, "s");
    const activation = track(activate(url, cookie, { index: 1 }));
    const call = await agent.model.nth(1);
    const close = track(closeReq(url, "s", ep("r"), cookie));
    await expect.poll(() => call.signal.aborted, POLL).toBe(true);
    const retire = track(control(url, "retire", { checkpoint_id: "x1", episode_ids: [ep("r")] }));
    await flush(20);
    expect(agent.count("retire:")).toBe(0); // the retire waits for the activation too
    call.respond();
    expect((await retire.value).status).toBe(200);
    expect(agent.events).toEqual(["seed:s", "retire:s"]);
    const refused = await close.value;
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe("stale_attempt");
    expect((await activation.value).status).toBe(409);
    // No receipt was written: a close without the cookie finds nothing.
    const after = await closeReq(url, "s", ep("r")).expect(200);
    expect(after.body).toEqual({
      agent_session_id: "s",
      agent_observations: null,
      resources_cookies: null,
    });
    expect(agent.count("close:")).toBe(0);
  });

  it("refuses a session ID too long for its cookie with 422 naming the field, at seed and close", async () => {
    const { agent, url } = await serve();
    const long = "x".repeat(MAX_AGENT_SESSION_ID_LENGTH + 1);
    for (const refused of [
      await request(url).post(SEED).send(seedBody(long)),
      await closeReq(url, long),
    ]) {
      expect(refused.status).toBe(422);
      expect(refused.body.error.code).toBe("invalid_request");
      expect(JSON.stringify(refused.body)).toContain("agent_session_id");
      expect(refused.headers["set-cookie"]).toBeUndefined();
    }
    // The longest accepted ID seeds and closes, its cookie within what clients read.
    const longest = "y".repeat(MAX_AGENT_SESSION_ID_LENGTH);
    const seed = await request(url).post(SEED).send(seedBody(longest));
    expect(seed.status).toBe(200);
    expect((await closeReq(url, longest, ep("r"), cookieOf(seed))).status).toBe(200);
    expect(agent.events).toEqual([`seed:${longest}`, `close:${longest}`]);
    // IDs costly to encode (control or astral characters) are bounded by their escaped size
    // too: what is accepted makes a cookie under 8 KB (a common proxy limit per header).
    const control = await request(url)
      .post(SEED)
      .send(seedBody("\u0001".repeat(400)));
    expect(control.status).toBe(422);
    expect(JSON.stringify(control.body)).toContain("bytes as escaped JSON");
    for (const costly of ["\u0001".repeat(341), "😀".repeat(512)]) {
      const seeded = await request(url).post(SEED).send(seedBody(costly));
      expect(seeded.status).toBe(200);
      const header = seeded.headers["set-cookie"] as unknown as string[];
      expect(header.join("").length).toBeLessThan(8192);
    }
  });

  it("closing an unknown ID without a cookie stores an empty receipt; a later seed of it is already closed", async () => {
    const { agent, url } = await serve();
    const empty = {
      agent_session_id: "ghost",
      agent_observations: null,
      resources_cookies: null,
    };
    expect((await closeReq(url, "ghost").expect(200)).body).toEqual(empty);
    expect((await closeReq(url, "ghost").expect(200)).body).toEqual(empty);
    const seed = await request(url).post(SEED).send(seedBody("ghost"));
    expect(seed.status).toBe(409);
    expect(seed.body).toEqual({ detail: "Agent session is already closed" });
    expect(agent.events).toEqual([]);
    // With a cookie naming an ID this process does not know, the receipt has expired.
    const other = await serve();
    const cookie = await seeded(other.url, "elsewhere");
    const expired = await closeReq(url, "elsewhere", ep("r"), cookie);
    expect(expired.status).toBe(409);
    expect(expired.body).toEqual({ detail: "Agent close receipt has expired" });
  });

  it("receipts expire after session_close_retry_window_seconds", async () => {
    const { url } = await serve({ config: { session_close_retry_window_seconds: 0.05 } });
    await closeReq(url, "ghost").expect(200);
    let status = 409;
    for (let attempt = 0; attempt < 5000 && status === 409; attempt++) {
      const res = await request(url).post(SEED).send(seedBody("ghost"));
      if (res.status === 409)
        expect(res.body).toEqual({ detail: "Agent session is already closed" });
      status = res.status;
    }
    expect(status).toBe(200); // the receipt expired and was purged; the ID is free again
  });
});

describe("direct /v1/responses calls", () => {
  it("with a rollout prefix, one is a restart while in flight; without one, it is refused", async () => {
    const { agent, url } = await serve();
    agent.model.hold = true;
    const call = track(activate(url, null, { prefix: "d1" }));
    const made = await agent.model.nth(1);
    expect(made.sessionKey).toBeNull();
    const prepared = await prepareNow(url, "c1").expect(200);
    expect(prepared.body).toMatchObject({
      phase: "prepared",
      report: { ready: true, blockers: [], restarts: ["d1"] },
    });
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    made.respond();
    const res = await call.value;
    expect(res.status).toBe(200);
    expect(res.body.invocation_id).toBe("root");
    expect((await status(url)).report.restarts).toEqual([]);
    const bare = await activate(url, null, { prefix: null });
    expect(bare.status).toBe(400);
    expect(bare.body.error.code).toBe("rollout_id_required");
    expect(agent.loops).toHaveLength(1);
  });

  it("a retire stops a direct call of its attempt", async () => {
    const { agent, url } = await serve();
    agent.model.hold = true;
    const call = track(activate(url, null, { prefix: "d1" }));
    const made = await agent.model.nth(1);
    await control(url, "retire", { checkpoint_id: "x1", episode_ids: [ep("d1")] }).expect(200);
    expect(made.signal.aborted).toBe(true);
    const res = await call.value;
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe("stale_attempt");
    expect((await status(url)).report.restarts).toEqual([]);
  });

  it("with checkpointing off, a direct call needs no prefix", async () => {
    const { agent, url } = await serve({ checkpoint: null });
    const res = await activate(url, null, { prefix: null });
    expect(res.status).toBe(200);
    expect(agent.loops[0]?.tracked).toBe(false);
  });
});

describe("startup", () => {
  it("builds with num_workers > 1 and checkpointing on, for both participant kinds", () => {
    const deployment = {
      checkpoint: null,
      servers: {
        agent: {
          kind: "agent",
          url: "http://127.0.0.1:1",
          host: "127.0.0.1",
          port: 1,
          num_workers: 2,
          config: {},
        },
      },
    } as never;
    for (const Kind of [ScriptedAgent, RestartOnlyAgent]) {
      const agent = new Kind({ name: "agent", checkpoint: CHECKPOINT_ON, deployment });
      expect(agent.participant).not.toBeNull();
      expect(() => new Kind({ name: "agent", deployment }).app()).not.toThrow();
    }
  });

  it("checkpointSessionsSupported without the session hooks is a ConfigError", () => {
    class NoHooks extends AgentServer {
      static override checkpointSessionsSupported = true;
      protected override respond(): Promise<RespondResult> {
        return Promise.resolve({ response: {} });
      }
    }
    class TwoHooks extends NoHooks {
      protected override exportAgentSessions() {
        return Promise.resolve({});
      }
      protected override restoreAgentSessions() {
        return Promise.resolve({});
      }
    }
    expect(() => new NoHooks({ name: "agent", logLevel: "silent" })).toThrow(ConfigError);
    expect(() => new TwoHooks({ name: "agent", logLevel: "silent" })).toThrow(/retireAgentSession/);
    expect(() => new ScriptedAgent({ name: "agent" })).not.toThrow();
  });
});

describe("restart-only agent (no session hooks)", () => {
  it("a retire that frees a session while its close hook runs leaves no receipt; the close gets stale_attempt", async () => {
    const { agent, url } = await serve({ kind: RestartOnlyAgent });
    const cookie = await seeded(url, "s");
    const gate = agent.hold("close");
    const close = track(closeReq(url, "s", ep("r"), cookie));
    await gate.entered;
    await control(url, "retire", { checkpoint_id: "x1", episode_ids: [ep("r")] }).expect(200);
    // The base retire hook releases the session through the close hook.
    expect(agent.events).toEqual(["seed:s", "close:s", "close:s"]);
    gate.release();
    const refused = await close.value;
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe("stale_attempt");
    const after = await closeReq(url, "s", ep("r")).expect(200);
    expect(after.body).toEqual({
      agent_session_id: "s",
      agent_observations: null,
      resources_cookies: null,
    });
  });

  it("its seed reply is marked a restart, its /run and /v1/responses calls are restarts, tracked once each", async () => {
    const { agent, url } = await serve({ kind: RestartOnlyAgent });
    expect(sessionParticipantOf(agent)).toBeNull();
    const participant = restartOnlyParticipantOf(agent);
    expect(participant).not.toBeNull();
    const tracked = vi.spyOn(participant!, "track");
    const seed = await request(url).post(SEED).send(seedBody("s")).expect(200);
    expect(seed.headers["x-ng-checkpoint-restart"]).toBe("1");
    const cookie = cookieOf(seed);
    agent.model.hold = true;
    const runGate = agent.hold("run");
    const run = track(
      request(url)
        .post("/run")
        .send({ responses_create_params: { input: "x" }, _ng_rollout_id: "job" }),
    );
    await runGate.entered;
    const activation = track(activate(url, cookie, { prefix: "r" }));
    const call = await agent.model.nth(1);
    expect(tracked).toHaveBeenCalledTimes(2); // once per request: the middleware is installed once
    const st = await status(url);
    expect(st.kind).toBe("agent");
    const prepared = await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    expect(prepared.body).toMatchObject({
      phase: "prepared",
      report: { ready: true, restarts: ["job", "r"] },
    });
    const dir = await makeTempDir();
    dirs.push(dir);
    const refused = await control(url, "commit", {
      checkpoint_id: "c1",
      checkpoint_dir: dir,
      episode_ids: [ep("r")],
    });
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe("restart_in_scope");
    // Rollouts keep running through the checkpoint.
    call.respond();
    expect((await activation.value).status).toBe(200);
    runGate.release();
    expect((await run.value).body).toEqual({ reward: 1, rollout: "job" });
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    const bare = await activate(url, cookie, { prefix: null });
    expect(bare.status).toBe(400);
    expect(bare.body.error.code).toBe("rollout_id_required");
  });
});
