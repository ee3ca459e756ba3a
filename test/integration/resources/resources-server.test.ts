import { afterEach, describe, expect, it, vi } from "vitest";
import request from "supertest";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { ConfigError } from "#sdk/errors.js";
import { dataRoute } from "#sdk/server/data-route.js";
import { ResourcesServer, type RetireSessionStateInput } from "#sdk/server/resources-server.js";
import type { Server } from "#sdk/server/server.js";
import CounterServer from "../../../reference-servers/counter/src/index.js";
import WeatherServer from "../../../reference-servers/weather/src/index.js";
import { flush, makeTempDir, removeTempDir } from "../../support/test-participant.js";
import { CONTROL, controlRoutes } from "../../support/control-routes.js";

const TOKEN = "resources-test-token";
const AUTH = `Bearer ${TOKEN}`;
const on = { enabled: true, control_auth_token: TOKEN };
const silent = { logLevel: "silent" };

/** Structural: the reference servers are typed against the SDK's built declarations. */
type Listening = Pick<Server, "listen" | "close">;
const started: Listening[] = [];
afterEach(async () => {
  for (const s of started.splice(0)) await s.close();
});

async function listen<S extends Listening>(server: S): Promise<{ server: S; url: string }> {
  started.push(server);
  const { url } = await server.listen({ port: 0 });
  return { server, url };
}

const { control } = controlRoutes(TOKEN);

class Plain extends ResourcesServer {
  protected override verify() {
    return { reward: 1 };
  }
}

describe("resources server: checkpoint modes over HTTP", () => {
  it("a tool call during an open checkpoint waits for resume instead of a 409", async () => {
    const { server, url } = await listen(
      new CounterServer({ name: "counter", checkpoint: on, ...silent }),
    );
    const agent = request.agent(url);
    await agent.post("/ng-rollout/r/seed_session").send({ initial_count: 0 }).expect(200);
    expect((await control(url, "prepare", { checkpoint_id: "c1" })).body.phase).toBe("prepared");
    const admit = vi.spyOn(server.participant!, "admit");
    let done = false;
    const call = agent
      .post("/ng-rollout/r/increment_counter")
      .send({ count: 1 })
      .then((res) => {
        done = true;
        return res;
      });
    // The request has reached admission, and admission holds it: not answered, not counted.
    await expect.poll(() => admit.mock.calls.length, { timeout: 5_000 }).toBe(1);
    await flush();
    expect(done).toBe(false);
    expect([...server.states.values()].map((c) => c.count)).toEqual([0]);
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    expect((await call).status).toBe(200);
    expect([...server.states.values()].map((c) => c.count)).toEqual([1]);
  });

  it("a replayable verify is answered during an open checkpoint", async () => {
    const { url } = await listen(new WeatherServer({ name: "weather", checkpoint: on, ...silent }));
    const agent = request.agent(url);
    const seeded = await agent.post("/ng-rollout/w/seed_session").send({}).expect(200);
    expect(seeded.headers["x-ng-checkpoint-verify"]).toBe("replay");
    expect(seeded.headers["x-ng-checkpoint-restart"]).toBeUndefined();
    const weather = await agent.post("/ng-rollout/w/get_weather").send({ city: "Oslo" });
    await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    const verified = await agent
      .post("/ng-rollout/w/verify")
      .send(weather.body as object)
      .expect(200);
    expect(verified.body.reward).toBe(1);
  });

  it("restart_only: seeds say restart, prepare reports them, a commit naming one is refused", async () => {
    const { url } = await listen(new Plain({ name: "plain", checkpoint: on, ...silent }));
    const agent = request.agent(url);
    const seeded = await agent.post("/ng-rollout/r/seed_session").send({}).expect(200);
    expect(seeded.headers["x-ng-checkpoint-restart"]).toBe("1");
    expect(seeded.headers["x-ng-checkpoint-verify"]).toBe("wait");
    const prepared = await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    expect(prepared.body.report.restarts).toEqual(["r"]);
    const dir = await makeTempDir();
    try {
      const refused = await control(url, "commit", {
        checkpoint_id: "c1",
        checkpoint_dir: dir,
        episode_ids: [{ rollout_id: "r", attempt: 0 }],
      });
      expect(refused.status).toBe(409);
      expect(refused.body.error.code).toBe("restart_in_scope");
    } finally {
      await removeTempDir(dir);
    }
  });

  it("a session start or end without a rollout prefix is refused before its handler runs", async () => {
    const server = new CounterServer({ name: "counter", checkpoint: on, ...silent });
    const app = server.app();
    for (const route of ["/seed_session", "/verify", "/close_session"]) {
      const res = await request(app).post(route).send({ initial_count: 0 });
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe("rollout_id_required");
      expect(res.headers["x-ng-checkpoint-verify"]).toBeUndefined();
    }
    expect(server.states.size).toBe(0);
  });

  it("off means off: no participant, no headers, no prefix needed", async () => {
    const server = new CounterServer({ name: "counter", ...silent });
    const agent = request.agent(server.app());
    const seeded = await agent.post("/seed_session").send({ initial_count: 0, target: 1 });
    expect(seeded.status).toBe(200);
    expect(seeded.headers["x-ng-checkpoint-verify"]).toBeUndefined();
    await agent.post("/increment_counter").send({ count: 1 }).expect(200);
    expect((await agent.post("/verify").send({})).body.reward).toBe(1);
    expect(server.participant).toBeNull();
    await request(server.app()).get(`${CONTROL}/status`).expect(404);
  });
});

describe("resources server: the counter's state survives a crash", () => {
  it("exports to a real checkpoint directory and restores into a fresh server", async () => {
    const dir = await makeTempDir();
    try {
      const first = await listen(new CounterServer({ name: "counter", checkpoint: on, ...silent }));
      const agent = request.agent(first.url);
      const seeded = await agent
        .post("/ng-rollout/r/seed_session")
        .send({ initial_count: 0, target: 3 })
        .expect(200);
      const cookie = seeded.headers["set-cookie"] as unknown as string[];
      for (let i = 0; i < 3; i++) {
        await agent.post("/ng-rollout/r/increment_counter").send({ count: 1 }).expect(200);
      }
      await control(first.url, "prepare", { checkpoint_id: "c1" }).expect(200);
      const committed = await control(first.url, "commit", {
        checkpoint_id: "c1",
        checkpoint_dir: dir,
        episode_ids: [{ rollout_id: "r", attempt: 0 }],
      }).expect(200);
      expect(committed.body.episode_ids).toEqual(["r"]);
      expect(committed.body.manifest.record_count).toBe(1);
      const manifest = JSON.parse(
        await readFile(path.join(dir, "gym", "resources", "counter", "manifest.json"), "utf8"),
      ) as { records_file: string };
      const line = (
        await readFile(path.join(dir, "gym", "resources", "counter", manifest.records_file), "utf8")
      ).trim();
      expect(JSON.parse(line)).toMatchObject({ state: { count: 3, target: 3 } });

      // The crash: a fresh process of the same server; the client keeps its cookie.
      const fresh = await listen(new CounterServer({ name: "counter", checkpoint: on, ...silent }));
      const restored = await control(fresh.url, "restore", {
        checkpoint_id: "c2",
        checkpoint_dir: dir,
        episode_ids: [{ rollout_id: "r", attempt: 0 }],
      }).expect(200);
      expect(restored.body.restored).toEqual(["r-a1"]);
      await control(fresh.url, "resume", { checkpoint_id: "c2" }).expect(200);
      const stale = await request(fresh.url)
        .post("/ng-rollout/r/verify")
        .set("Cookie", cookie)
        .send({});
      expect(stale.body.error.code).toBe("stale_attempt");
      const cookieOnly = await request(fresh.url)
        .post("/get_counter_value")
        .set("Cookie", cookie)
        .send({});
      expect(cookieOnly.body.error.code).toBe("rollout_id_required");
      const verified = await request(fresh.url)
        .post("/ng-rollout/r-a1/verify")
        .set("Cookie", cookie)
        .send({})
        .expect(200);
      expect(verified.body.reward).toBe(1);

      // Negative control: the same client against a fresh server that skipped the restore.
      const unrestored = await listen(
        new CounterServer({ name: "counter", checkpoint: on, ...silent }),
      );
      const control0 = await request(unrestored.url)
        .post("/ng-rollout/r-a1/verify")
        .set("Cookie", cookie)
        .send({})
        .expect(200);
      expect(control0.body.reward).toBe(0);
    } finally {
      await removeTempDir(dir);
    }
  });
});

describe("resources server: retire and forget", () => {
  it("retire refuses the attempt's sessions and frees them; forget lifts the refusal", async () => {
    const { server, url } = await listen(
      new CounterServer({ name: "counter", checkpoint: on, ...silent }),
    );
    const agent = request.agent(url);
    await agent.post("/ng-rollout/r/seed_session").send({ initial_count: 1 }).expect(200);
    expect(server.states.size).toBe(1);
    await control(url, "retire", {
      checkpoint_id: "x1",
      episode_ids: [{ rollout_id: "r", attempt: 0 }],
    }).expect(200);
    expect(server.states.size).toBe(0);
    const refused = await agent.post("/get_counter_value").send({});
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe("stale_attempt");
    const status = await request(url).get(`${CONTROL}/status`).set("Authorization", AUTH);
    expect(status.body).toMatchObject({
      kind: "resources",
      retired_sessions: 1,
      retired_rollouts: 1,
      verify: "wait",
      mode: "exported",
    });
    await control(url, "forget", { checkpoint_id: "x2", rollout_ids: ["r"] }).expect(200);
    await agent.post("/get_counter_value").send({}).expect(200);
  });

  it("forget is refused with retire_incomplete while a retire left state unfreed", async () => {
    let fail = true;
    class Flaky extends CounterServer {
      protected override async retireSessionState(input: RetireSessionStateInput) {
        if (fail) throw new Error("sandbox busy");
        await super.retireSessionState(input);
      }
    }
    const { url } = await listen(new Flaky({ name: "flaky", checkpoint: on, ...silent }));
    await request(url).post("/ng-rollout/r/seed_session").send({}).expect(200);
    const body = { checkpoint_id: "x1", episode_ids: [{ rollout_id: "r", attempt: 0 }] };
    expect((await control(url, "retire", body)).status).toBe(500);
    const forget = await control(url, "forget", { checkpoint_id: "x2", rollout_ids: ["r"] });
    expect(forget.body.error.code).toBe("retire_incomplete");
    const prepared = await control(url, "prepare", { checkpoint_id: "c1", deadline_ts: 0 });
    expect(prepared.body.report.blockers).toEqual(["r"]);
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    fail = false;
    await control(url, "retire", body).expect(200);
    await control(url, "forget", { checkpoint_id: "x2", rollout_ids: ["r"] }).expect(200);
  });
});

describe("resources server: startup", () => {
  it("refuses an unknown mode or verify value, naming attribute, value and allowed values", () => {
    class Typo extends Plain {
      static override checkpointMode = "exportd" as never;
    }
    class BadVerify extends Plain {
      static override checkpointVerify = "later" as never;
    }
    expect(() => new Typo({ name: "t" })).toThrow(ConfigError);
    expect(() => new Typo({ name: "t" })).toThrow(
      /Typo declares checkpointMode = "exportd"; allowed values: "restart_only", "stateless", "exported"/,
    );
    expect(() => new BadVerify({ name: "t", checkpoint: on })).toThrow(
      /checkpointVerify = "later"/,
    );
  });

  it("refuses exported without its hooks; hooks from an intermediate base count", () => {
    class Half extends Plain {
      static override checkpointMode = "exported" as const;
      protected override exportSessionStates() {
        return Promise.resolve({});
      }
    }
    expect(() => new Half({ name: "h" })).toThrow(
      /Half declares checkpointMode = "exported" but does not implement \[restoreSessionStates, retireSessionState\]/,
    );
    class Base extends Half {
      protected override restoreSessionStates() {
        return Promise.resolve();
      }
      protected override retireSessionState() {
        return Promise.resolve();
      }
    }
    class Leaf extends Base {}
    expect(() => new Leaf({ name: "l" })).not.toThrow();
  });

  it("an override of configureApp cannot leave out the session layer or the checkpoint middleware", async () => {
    class Bypass extends Plain {
      protected override configureApp(): void {}
    }
    const server = new Bypass({ name: "b", checkpoint: on, ...silent });
    const agent = request.agent(server.app());
    const seeded = await agent.post("/ng-rollout/r/seed_session").send({}).expect(200);
    expect(String(seeded.headers["set-cookie"])).toContain("Bypass___b=");
    // The checkpoint middleware tracked the seeded session: it belongs to attempt r now.
    await agent.post("/ng-rollout/r-a1/verify").send({}).expect(409);
    expect(server.participant).not.toBeNull();
  });

  it("a declared session start gets the seed treatment", async () => {
    class Gym extends Plain {
      static override checkpointSessionStarts = ["/reset"];
      protected override tools() {
        return [
          dataRoute({
            method: "post",
            path: "/reset",
            summary: "Reset",
            handler: (input) => ({ ok: input.rollout !== null }),
          }),
        ];
      }
    }
    const app = new Gym({ name: "g", checkpoint: on, ...silent }).app();
    expect((await request(app).post("/reset").send({})).body.error.code).toBe(
      "rollout_id_required",
    );
    const res = await request(app).post("/ng-rollout/r/reset").send({}).expect(200);
    expect(res.headers["x-ng-checkpoint-restart"]).toBe("1");
  });
});

describe("route spellings", () => {
  it.each(["/ng-rollout/r/seed_session/", "/ng-rollout/r/SEED_SESSION", "/seed_session/"])(
    "does not let %s reach the seed handler as an untracked session start",
    async (path) => {
      const counter = new CounterServer({ name: "counter", checkpoint: on, ...silent });
      const res = await request(counter.app())
        .post(path)
        .send({ resources_session_id: "s", episode_id: { rollout_id: "r" } });
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe("not_found");
    },
  );
});

describe("the counter", () => {
  it("keeps no state for a session nobody seeded", async () => {
    const counter = new CounterServer({ name: "counter", ...silent });
    const res = await request(counter.app()).post("/increment_counter").send({ count: 1 });
    expect(res.body).toEqual({ success: false });
    expect(counter.states.size).toBe(0);
  });
});
