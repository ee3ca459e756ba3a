/**
 * The resources checkpoint rules (see docs/resources-server.md), over HTTP through the real control
 * routes. Synchronisation is by deferreds (handlers that park on a gate) and bounded polls.
 */
import http from "node:http";
import { readFile } from "node:fs/promises";
import path from "node:path";
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import type { CheckpointMode, CheckpointVerify } from "#sdk/participants/resources/declarations.js";
import { dataRoute } from "#sdk/server/data-route.js";
import {
  ResourcesServer,
  resourcesSession,
  type SessionRouteInput,
} from "#sdk/server/resources-server.js";
import { encodeSessionCookie } from "#sdk/server/resources/session-cookie.js";
import { SessionSecret } from "#sdk/server/session-secret.js";
import { deferred, type Deferred } from "#sdk/util/deferred.js";
import type { JsonValue } from "#sdk/json/json-value.js";
import { makeTempDir, removeTempDir } from "../../support/test-participant.js";
import { CONTROL, controlRoutes } from "../../support/control-routes.js";

const TOKEN = "resources-rules-token";
const AUTH = `Bearer ${TOKEN}`;
const on = { enabled: true, control_auth_token: TOKEN };
const silent = { logLevel: "silent" };
/** A deadline that passes while the test waits on the call (a prepare or retire cut short). */
const soon = (): number => Date.now() / 1000 + 0.2;
const poll = { timeout: 5000, interval: 5 };

/** A handler parks on a gate until released; `entered` settles when it gets there. */
interface Hold {
  readonly entered: Promise<void>;
  release(): void;
}

interface Options {
  readonly mode?: CheckpointMode;
  readonly verify?: CheckpointVerify;
  readonly starts?: readonly string[];
}

/**
 * A resources server for these tests: a counter per session, routes that can park on a gate,
 * and a `{"stream": true}` body that starts the reply and then waits for the client to leave.
 */
function gated(options: Options = {}) {
  return class Gated extends ResourcesServer {
    static override checkpointMode: CheckpointMode = options.mode ?? "exported";
    static override checkpointVerify: CheckpointVerify = options.verify ?? "wait";
    static override checkpointSessionStarts: readonly string[] = options.starts ?? [
      "/seed_session",
    ];
    readonly states = new Map<string, number>();
    readonly retiredIds: string[] = [];
    readonly #gates = new Map<string, { gate: Deferred<void>; entered: Deferred<void> }>();
    failRetire = false;

    /** Parks the next handlers of `name` (`seed`, `tool`, `verify`, `close`, `export`) on a gate. */
    hold(name: string): Hold {
      const entry = { gate: deferred<void>(), entered: deferred<void>() };
      this.#gates.set(name, entry);
      return {
        entered: entry.entered.promise,
        release: () => {
          if (this.#gates.get(name) === entry) this.#gates.delete(name);
          entry.gate.resolve();
        },
      };
    }

    async #pass(name: string): Promise<void> {
      const entry = this.#gates.get(name);
      if (entry === undefined) return;
      entry.entered.resolve();
      await entry.gate.promise;
    }

    /** Starts the reply, then waits until the client goes away. */
    async #stream(input: SessionRouteInput): Promise<boolean> {
      if ((input.body as { stream?: boolean } | undefined)?.stream !== true) return false;
      input.res.writeHead(200, { "content-type": "application/json" });
      input.res.write("{");
      const gone = deferred<void>();
      if (input.signal.aborted) gone.resolve();
      input.signal.addEventListener("abort", () => gone.resolve(), { once: true });
      await gone.promise;
      input.res.end();
      return true;
    }

    protected override async seedSession(input: SessionRouteInput) {
      const body = (input.body ?? {}) as { id?: string };
      if (typeof body.id === "string") input.session.replaceId(body.id);
      if (!this.states.has(input.session.id)) this.states.set(input.session.id, 0);
      await this.#pass("seed");
      if (await this.#stream(input)) return undefined;
      return { session: input.session.id };
    }

    protected override tools() {
      const tool = async (input: SessionRouteInput) => {
        const id = input.session.id;
        if (this.states.has(id)) this.states.set(id, (this.states.get(id) ?? 0) + 1);
        await this.#pass("tool");
        if (await this.#stream(input)) return undefined;
        return { count: this.states.get(id) ?? null };
      };
      return [
        dataRoute({
          method: "post",
          path: "/tool",
          summary: "Count",
          handler: (input) => tool({ ...input, session: resourcesSession(input) }),
        }),
        dataRoute({
          method: "post",
          path: "/reset",
          summary: "A declared session start",
          handler: (input) => this.seedSession({ ...input, session: resourcesSession(input) }),
        }),
      ];
    }

    protected override async verify(input: SessionRouteInput<Record<string, unknown>>) {
      await this.#pass("verify");
      const reward = this.states.has(input.session.id) ? 1 : 0;
      await this.#stream(input);
      return { reward };
    }

    protected override async closeSession(input: SessionRouteInput) {
      this.states.delete(input.session.id);
      await this.#pass("close");
      if (await this.#stream(input)) return undefined;
      return { resources_session_id: input.session.id };
    }

    protected override async exportSessionStates({
      sessionIds,
    }: {
      sessionIds: readonly string[];
    }): Promise<Record<string, JsonValue>> {
      await this.#pass("export");
      const held = sessionIds.filter((id) => this.states.has(id));
      return Object.fromEntries(held.map((id) => [id, { count: this.states.get(id) ?? 0 }]));
    }

    protected override restoreSessionStates({
      states,
    }: {
      states: Readonly<Record<string, JsonValue>>;
    }): Promise<void> {
      for (const [id, state] of Object.entries(states)) {
        this.states.set(id, (state as { count: number }).count);
      }
      return Promise.resolve();
    }

    protected override async retireSessionState({ sessionId }: { sessionId: string }) {
      await this.#pass("retire");
      if (this.failRetire) throw new Error("sandbox busy");
      this.retiredIds.push(sessionId);
      this.states.delete(sessionId);
    }
  };
}

type Gated = InstanceType<ReturnType<typeof gated>>;
const started: Gated[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const s of started.splice(0)) await s.close();
  for (const d of dirs.splice(0)) await removeTempDir(d);
});

async function serve(options: Options = {}): Promise<{ server: Gated; url: string }> {
  const Server = gated(options);
  const server = new Server({ name: "g", checkpoint: on, ...silent });
  started.push(server);
  const { url } = await server.listen({ port: 0 });
  return { server, url };
}

async function tempDir(): Promise<string> {
  const dir = await makeTempDir();
  dirs.push(dir);
  return dir;
}

/** The cookie a client of session `id` sends (the key is derived from the control token). */
function cookie(id: string): string {
  const key = SessionSecret.fromControlToken(TOKEN).keyFor("Gated___g");
  return `Gated___g=${encodeSessionCookie(id, key)}`;
}

function post(url: string, route: string, id: string, body: object = {}) {
  return request(url).post(route).set("Cookie", cookie(id)).send(body);
}

const { control } = controlRoutes(TOKEN);

async function status(url: string) {
  const res = await request(url).get(`${CONTROL}/status`).set("Authorization", AUTH).expect(200);
  return res.body as {
    mode: string;
    verify: string;
    retired_sessions: number;
    report: {
      ready: boolean;
      blockers: string[];
      restarts: string[];
      counts: { inflight: number; sessions: number };
    };
  };
}

/** Commits into a fresh directory; returns the reply body and the records written. */
async function commit(url: string, id: string, scope: string[] | null) {
  const dir = await tempDir();
  const episodeIds =
    scope === null
      ? null
      : scope.map((key) => {
          const m = /^(.*)-a([1-9][0-9]*)$/.exec(key);
          return m === null
            ? { rollout_id: key, attempt: 0 }
            : { rollout_id: m[1], attempt: Number(m[2]) };
        });
  const res = await control(url, "commit", {
    checkpoint_id: id,
    checkpoint_dir: dir,
    episode_ids: episodeIds,
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return { dir, body: res.body as { episode_ids: string[] }, records: await records(dir) };
}

async function records(dir: string): Promise<{ session_id: string; state: unknown }[]> {
  const base = path.join(dir, "gym", "resources", "g");
  const manifest = JSON.parse(await readFile(path.join(base, "manifest.json"), "utf8")) as {
    records_file: string;
  };
  const text = await readFile(path.join(base, manifest.records_file), "utf8");
  return text
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as { session_id: string; state: unknown });
}

/** Sends a request, resolves with the reply head, then goes away before the reply ends. */
function startThenLeave(
  url: string,
  route: string,
  id: string,
  body: object,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: http.IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${url}${route}`,
      {
        method: "POST",
        headers: { "content-type": "application/json", cookie: cookie(id), ...headers },
      },
      (res) => {
        resolve({ status: res.statusCode ?? 0, headers: res.headers });
        req.destroy();
      },
    );
    req.on("error", reject);
    req.end(JSON.stringify({ ...body, stream: true }));
  });
}

/** Settles with the outcome of `work` and lets a test check whether it has settled yet. */
function track<T>(work: PromiseLike<T>): { done: () => boolean; value: Promise<T> } {
  let settled = false;
  const value = Promise.resolve(work).finally(() => {
    settled = true;
  });
  value.catch(() => undefined); // a request the test leaves behind must not fail the run
  return { done: () => settled, value };
}

describe("sessions are tracked when the response starts", () => {
  it("a seed that replaces the session ID is tracked, exported and used under the new ID", async () => {
    const { server, url } = await serve();
    const seeded = await post(url, "/ng-rollout/r/seed_session", "minted", { id: "native-1" });
    expect(seeded.status).toBe(200);
    const p = server.participant;
    expect(p?.sessionEpisode("native-1")).toEqual({ rollout_id: "r", attempt: 0 });
    expect(p?.sessionEpisode("minted")).toBeNull();
    // The reply's cookie names the new ID, and the next request works on it.
    const next = await request(url)
      .post("/ng-rollout/r/tool")
      .set("Cookie", seeded.headers["set-cookie"] as unknown as string[])
      .send({})
      .expect(200);
    expect(next.body.count).toBe(1);
    await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    const { records: written } = await commit(url, "c1", null);
    expect(written.map((r) => r.session_id)).toEqual(["native-1"]);
  });

  it("a seed whose reply has started is counted before the reply ends", async () => {
    const { url } = await serve({ mode: "restart_only" });
    const head = await startThenLeave(url, "/ng-rollout/r/seed_session", "s", {});
    expect(head.headers["x-ng-checkpoint-restart"]).toBe("1");
    // The client has the reply head: the session is tracked right now.
    const prepared = await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    expect(prepared.body.report.counts.sessions).toBe(1);
    expect(prepared.body.report.restarts).toEqual(["r"]);
  });

  it("a client that leaves after the reply started is not counted in flight, and prepare becomes ready", async () => {
    const { server, url } = await serve({ mode: "exported" });
    await post(url, "/ng-rollout/r/seed_session", "s").expect(200);
    await post(url, "/ng-rollout/q/seed_session", "t").expect(200);
    // A tool reply, a seed reply and a close reply each start, then their clients go away.
    await startThenLeave(url, "/ng-rollout/r/tool", "s", {});
    await startThenLeave(url, "/ng-rollout/n/seed_session", "u", {});
    await startThenLeave(url, "/ng-rollout/q/close_session", "t", {});
    await expect.poll(async () => (await status(url)).report.counts.inflight, poll).toBe(0);
    const p = server.participant;
    expect(p?.sessionEpisode("u")).toEqual({ rollout_id: "n", attempt: 0 });
    expect(p?.sessionEpisode("t")).toBeNull();
    const prepared = await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    expect(prepared.body.phase).toBe("prepared");
  });

  it("a handler that ignores its signal stays counted in flight after its client left, until it settles", async () => {
    const { server, url } = await serve({ mode: "exported" });
    await post(url, "/ng-rollout/r/seed_session", "s").expect(200);
    const hold = server.hold("tool");
    const req = http.request(`${url}/ng-rollout/r/tool`, {
      method: "POST",
      headers: { "content-type": "application/json", cookie: cookie("s") },
    });
    req.on("error", () => undefined);
    req.end("{}");
    await hold.entered;
    req.destroy(); // the client leaves before any reply; the handler keeps running
    await expect.poll(async () => (await status(url)).report.counts.inflight, poll).toBe(1);
    const early = await control(url, "prepare", { checkpoint_id: "c1", deadline_ts: soon() });
    expect(early.body.phase).toBe("preparing");
    hold.release();
    await expect.poll(async () => (await status(url)).report.counts.inflight, poll).toBe(0);
    const prepared = await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    expect(prepared.body.phase).toBe("prepared");
  });

  it("a verify whose reply started ends the session even when its client leaves", async () => {
    const { server, url } = await serve({ mode: "exported" });
    await post(url, "/ng-rollout/r/seed_session", "s").expect(200);
    const head = await startThenLeave(url, "/ng-rollout/r/verify", "s", {});
    expect(head.status).toBe(200);
    await expect.poll(async () => (await status(url)).report.counts.inflight, poll).toBe(0);
    expect(server.participant?.isOpen("s")).toBe(false);
  });
});

describe("restore into a used process", () => {
  it("is refused with checkpoint_error while sessions are tracked", async () => {
    const { url: source } = await serve();
    await post(source, "/ng-rollout/r/seed_session", "s").expect(200);
    await control(source, "prepare", { checkpoint_id: "c1" }).expect(200);
    const { dir } = await commit(source, "c1", null);

    const { server, url } = await serve();
    await post(url, "/ng-rollout/other/seed_session", "x").expect(200);
    const refused = await control(url, "restore", {
      checkpoint_id: "c2",
      checkpoint_dir: dir,
      episode_ids: [{ rollout_id: "r", attempt: 0 }],
    });
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe("checkpoint_error");
    expect(server.states.has("s")).toBe(false);
  });

  it("is refused with checkpoint_error while a request is in flight", async () => {
    const { url: source } = await serve();
    await post(source, "/ng-rollout/r/seed_session", "s").expect(200);
    await control(source, "prepare", { checkpoint_id: "c1" }).expect(200);
    const { dir } = await commit(source, "c1", null);

    const { server, url } = await serve();
    const hold = server.hold("tool");
    const call = track(post(url, "/tool", "x"));
    await hold.entered;
    const refused = await control(url, "restore", {
      checkpoint_id: "c2",
      checkpoint_dir: dir,
      episode_ids: [{ rollout_id: "r", attempt: 0 }],
    });
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe("checkpoint_error");
    hold.release();
    expect((await call.value).status).toBe(200);
  });

  it("with records is refused with checkpoint_error by a restart_only server", async () => {
    const { url: source } = await serve();
    await post(source, "/ng-rollout/r/seed_session", "s").expect(200);
    await control(source, "prepare", { checkpoint_id: "c1" }).expect(200);
    const { dir } = await commit(source, "c1", null);

    const { url } = await serve({ mode: "restart_only" });
    const refused = await control(url, "restore", {
      checkpoint_id: "c2",
      checkpoint_dir: dir,
      episode_ids: [{ rollout_id: "r", attempt: 0 }],
    });
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe("checkpoint_error");
  });
});

describe("verify and close during a checkpoint", () => {
  it("x-ng-checkpoint-close-follows on a replayable verify keeps the session exported until its close", async () => {
    const { server, url } = await serve({ mode: "exported", verify: "replay" });
    await post(url, "/ng-rollout/r/seed_session", "s").expect(200);
    await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    // Admitted at once during the checkpoint; the caller says it closes afterwards.
    await post(url, "/ng-rollout/r/verify", "s")
      .set("x-ng-checkpoint-close-follows", "1")
      .expect(200);
    const { records: written } = await commit(url, "c1", null);
    expect(written.map((r) => r.session_id)).toEqual(["s"]);
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    expect(server.participant?.isOpen("s")).toBe(true);
    await post(url, "/ng-rollout/r/close_session", "s").expect(200);
    expect(server.participant?.isOpen("s")).toBe(false);
  });

  it("a close-follows verify that finished before resources prepare is exported, and runs again after a restore", async () => {
    const first = await serve({ mode: "exported", verify: "replay" });
    await post(first.url, "/ng-rollout/r/seed_session", "s").expect(200);
    await post(first.url, "/ng-rollout/r/tool", "s").expect(200);
    const verified = await post(first.url, "/ng-rollout/r/verify", "s")
      .set("x-ng-checkpoint-close-follows", "1")
      .expect(200);
    expect(verified.body.reward).toBe(1);
    await control(first.url, "prepare", { checkpoint_id: "c1" }).expect(200);
    const { dir, records: written } = await commit(first.url, "c1", null);
    expect(written).toEqual([expect.objectContaining({ session_id: "s", state: { count: 1 } })]);

    const fresh = await serve({ mode: "exported", verify: "replay" });
    await control(fresh.url, "restore", {
      checkpoint_id: "c2",
      checkpoint_dir: dir,
      episode_ids: [{ rollout_id: "r", attempt: 0 }],
    }).expect(200);
    await control(fresh.url, "resume", { checkpoint_id: "c2" }).expect(200);
    const again = await post(fresh.url, "/ng-rollout/r-a1/verify", "s")
      .set("x-ng-checkpoint-close-follows", "1")
      .expect(200);
    expect(again.body.reward).toBe(1);
    expect(fresh.server.participant?.isOpen("s")).toBe(true);
    await post(fresh.url, "/ng-rollout/r-a1/close_session", "s").expect(200);
    expect(fresh.server.participant?.isOpen("s")).toBe(false);
    expect(fresh.server.states.has("s")).toBe(false);
  });

  it("a replayable verify without the header, and a wait-mode verify with it, end the session", async () => {
    const replay = await serve({ mode: "exported", verify: "replay" });
    await post(replay.url, "/ng-rollout/r/seed_session", "s").expect(200);
    await post(replay.url, "/ng-rollout/r/verify", "s").expect(200);
    expect(replay.server.participant?.isOpen("s")).toBe(false);

    const wait = await serve({ mode: "exported", verify: "wait" });
    await post(wait.url, "/ng-rollout/r/seed_session", "s").expect(200);
    await post(wait.url, "/ng-rollout/r/verify", "s")
      .set("x-ng-checkpoint-close-follows", "1")
      .expect(200);
    expect(wait.server.participant?.isOpen("s")).toBe(false);
  });

  it("a close during a checkpoint waits for resume, then ends the session", async () => {
    const { server, url } = await serve({ mode: "exported" });
    await post(url, "/ng-rollout/r/seed_session", "s").expect(200);
    await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
    const close = track(post(url, "/ng-rollout/r/close_session", "s"));
    const { records: written } = await commit(url, "c1", null);
    expect(written.map((r) => r.session_id)).toEqual(["s"]);
    expect(close.done()).toBe(false);
    expect(server.states.has("s")).toBe(true);
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    expect((await close.value).status).toBe(200);
    expect(server.participant?.isOpen("s")).toBe(false);
  });
});

describe("declared session starts", () => {
  for (const mode of ["restart_only", "stateless", "exported"] as const) {
    it(`${mode}: a declared start during a commit's export waits for resume and has no record`, async () => {
      const { server, url } = await serve({ mode, starts: ["/reset"] });
      await post(url, "/ng-rollout/a/reset", "a").expect(200);
      const prepared = await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
      expect(prepared.body.phase).toBe("prepared");
      const hold = server.hold("export");
      const dir = await tempDir();
      const committing = control(url, "commit", {
        checkpoint_id: "c1",
        checkpoint_dir: dir,
        episode_ids: mode === "restart_only" ? [] : null,
      });
      const committed = track(committing);
      if (mode === "exported") await hold.entered;
      const reset = track(post(url, "/ng-rollout/b/reset", "b"));
      hold.release();
      expect((await committed.value).status).toBe(200);
      const keys = (await records(dir)).map((r) => r.session_id);
      expect(keys).not.toContain("b");
      expect(reset.done()).toBe(false);
      expect(server.states.has("b")).toBe(false);
      await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
      const done = await reset.value;
      expect(done.status).toBe(200);
      expect(done.headers["x-ng-checkpoint-verify"]).toBe("wait");
      expect(server.participant?.sessionEpisode("b")).toEqual({ rollout_id: "b", attempt: 0 });
    });
  }

  for (const route of ["/seed_session", "/reset"]) {
    it(`restart_only: a ${route} in flight when admission closes is reported as a restart`, async () => {
      const { server, url } = await serve({
        mode: "restart_only",
        starts: ["/seed_session", "/reset"],
      });
      const hold = server.hold("seed");
      const reset = track(post(url, `/ng-rollout/r${route}`, "s"));
      await hold.entered;
      const prepared = await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
      expect(prepared.body.report.restarts).toEqual(["r"]);
      hold.release();
      expect((await reset.value).headers["x-ng-checkpoint-restart"]).toBe("1");
      // The commit of the remaining scope succeeds.
      await commit(url, "c1", []);
    });
  }

  for (const route of ["/seed_session", "/reset"]) {
    it(`exported: a ${route} in flight holds up prepare and is exported; one arriving later waits`, async () => {
      const { server, url } = await serve({
        mode: "exported",
        starts: ["/seed_session", "/reset"],
      });
      const hold = server.hold("seed");
      const reset = track(post(url, `/ng-rollout/r${route}`, "s"));
      await hold.entered;
      const early = await control(url, "prepare", { checkpoint_id: "c1", deadline_ts: soon() });
      expect(early.body.phase).toBe("preparing");
      expect(early.body.report.counts.inflight).toBe(1);
      hold.release();
      expect((await reset.value).status).toBe(200);
      const prepared = await control(url, "prepare", { checkpoint_id: "c1" }).expect(200);
      expect(prepared.body.phase).toBe("prepared");
      const late = track(post(url, `/ng-rollout/q${route}`, "t"));
      const { records: written } = await commit(url, "c1", null);
      expect(written.map((r) => r.session_id)).toEqual(["s"]);
      expect(late.done()).toBe(false);
      await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
      expect((await late.value).status).toBe(200);
    });
  }
});

describe("status", () => {
  it("reports the verify mode and the retired sessions until forget", async () => {
    const { url } = await serve({ mode: "stateless", verify: "replay" });
    await post(url, "/ng-rollout/r/seed_session", "s1").expect(200);
    await post(url, "/ng-rollout/r/seed_session", "s2").expect(200);
    await post(url, "/ng-rollout/q/seed_session", "t").expect(200);
    expect(await status(url)).toMatchObject({
      mode: "stateless",
      verify: "replay",
      retired_sessions: 0,
    });
    await control(url, "retire", {
      checkpoint_id: "x1",
      episode_ids: [{ rollout_id: "r", attempt: 0 }],
    }).expect(200);
    expect((await status(url)).retired_sessions).toBe(2);
    // A stateless server drains and refuses a retired session too.
    expect((await post(url, "/tool", "s1")).body.error.code).toBe("stale_attempt");
    await control(url, "forget", { checkpoint_id: "x2", rollout_ids: ["r"] }).expect(200);
    expect((await status(url)).retired_sessions).toBe(0);
  });
});

describe("retire", () => {
  it("a retire cut short while a seed is in flight still fences the attempt's existing session", async () => {
    const { server, url } = await serve();
    await post(url, "/ng-rollout/r/seed_session", "old").expect(200);
    const hold = server.hold("seed");
    const seed = track(post(url, "/ng-rollout/r/seed_session", "new"));
    await hold.entered;
    const cut = await control(url, "retire", {
      checkpoint_id: "x1",
      deadline_ts: soon(),
      episode_ids: [{ rollout_id: "r", attempt: 0 }],
    });
    expect(cut.body.error.code).toBe("deadline_exceeded");
    expect((await post(url, "/tool", "old")).body.error.code).toBe("stale_attempt");
    // The seed finishes after the cut-short retire: its session is registered as retired.
    hold.release();
    expect((await seed.value).status).toBe(200);
    expect((await post(url, "/tool", "new")).body.error.code).toBe("stale_attempt");
    await control(url, "prepare", { checkpoint_id: "c1", deadline_ts: soon() });
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    const forget = await control(url, "forget", { checkpoint_id: "x2", rollout_ids: ["r"] });
    expect(forget.body.error.code).toBe("retire_incomplete");
    await control(url, "retire", {
      checkpoint_id: "x3",
      episode_ids: [{ rollout_id: "r", attempt: 0 }],
    }).expect(200);
    expect(server.retiredIds.sort()).toEqual(["new", "old"]);
    await control(url, "forget", { checkpoint_id: "x4", rollout_ids: ["r"] }).expect(200);
  });

  it("a retired session a late seed left is not exported", async () => {
    const { server, url } = await serve();
    const hold = server.hold("seed");
    const seed = track(post(url, "/ng-rollout/r/seed_session", "s"));
    await hold.entered;
    const cut = await control(url, "retire", {
      checkpoint_id: "x1",
      deadline_ts: soon(),
      episode_ids: [{ rollout_id: "r", attempt: 0 }],
    });
    expect(cut.body.error.code).toBe("deadline_exceeded");
    hold.release();
    await seed.value;
    await post(url, "/ng-rollout/q/seed_session", "t").expect(200);
    const prepared = await control(url, "prepare", { checkpoint_id: "c1", deadline_ts: soon() });
    expect(prepared.body.report.blockers).toEqual(["r"]);
    expect(await server.participant?.export(null, new AbortController().signal)).toMatchObject([
      { session_id: "t" },
    ]);
  });

  it("forget is refused while a seed of a retired attempt is in flight; its session is refused afterwards", async () => {
    const { server, url } = await serve({ mode: "stateless" });
    const hold = server.hold("seed");
    const seed = track(post(url, "/ng-rollout/r/seed_session", "s"));
    await hold.entered;
    const cut = await control(url, "retire", {
      checkpoint_id: "x1",
      deadline_ts: soon(),
      episode_ids: [{ rollout_id: "r", attempt: 0 }],
    });
    expect(cut.body.error.code).toBe("deadline_exceeded");
    const forget = await control(url, "forget", { checkpoint_id: "x2", rollout_ids: ["r"] });
    expect(forget.body.error.code).toBe("retire_incomplete");
    hold.release();
    await seed.value;
    expect((await post(url, "/tool", "s")).body.error.code).toBe("stale_attempt");
  });

  it("a retire that arrives after its deadline still fences the attempt's sessions", async () => {
    const { server, url } = await serve();
    await post(url, "/ng-rollout/r/seed_session", "s").expect(200);
    const hold = server.hold("tool");
    const call = track(post(url, "/tool", "s"));
    await hold.entered;
    const late = await control(url, "retire", {
      checkpoint_id: "x1",
      deadline_ts: Date.now() / 1000 - 1,
      episode_ids: [{ rollout_id: "r", attempt: 0 }],
    });
    expect(late.body.error.code).toBe("deadline_exceeded");
    hold.release();
    expect((await call.value).status).toBe(200);
    expect((await post(url, "/tool", "s")).body.error.code).toBe("stale_attempt");
    expect(server.participant?.sessionEpisode("s")).not.toBeNull(); // left for a retry
  });

  it("a request on a session from another rollout is refused", async () => {
    const { server, url } = await serve();
    await post(url, "/ng-rollout/r/seed_session", "s").expect(200);
    const other = await post(url, "/ng-rollout/q/tool", "s");
    expect(other.status).toBe(409);
    expect(other.body.error.code).toBe("stale_attempt");
    expect(server.states.get("s")).toBe(0);
  });
});

describe("commit scope and restored sessions", () => {
  async function restoredPair() {
    const { url: source } = await serve();
    await post(source, "/ng-rollout/r/seed_session", "s").expect(200);
    await post(source, "/ng-rollout/q/seed_session", "t").expect(200);
    await post(source, "/ng-rollout/q/tool", "t").expect(200);
    await control(source, "prepare", { checkpoint_id: "c1" }).expect(200);
    const { dir } = await commit(source, "c1", null);
    const fresh = await serve();
    const restored = await control(fresh.url, "restore", {
      checkpoint_id: "c2",
      checkpoint_dir: dir,
      episode_ids: [
        { rollout_id: "r", attempt: 0 },
        { rollout_id: "q", attempt: 0 },
      ],
    }).expect(200);
    expect(restored.body.restored).toEqual(["q-a1", "r-a1"]);
    return { ...fresh, dir };
  }

  it("a commit exports only sessions in its scope and deletes unclaimed restored ones without fencing", async () => {
    const { server, url } = await restoredPair();
    await control(url, "resume", { checkpoint_id: "c2" }).expect(200);
    await post(url, "/ng-rollout/live/seed_session", "live").expect(200);
    await control(url, "prepare", { checkpoint_id: "c3" }).expect(200);
    const { records: written } = await commit(url, "c3", ["q-a1"]);
    expect(written.map((r) => r.session_id)).toEqual(["t"]);
    expect(server.retiredIds).toEqual(["s"]); // the unclaimed r-a1 session, through the hook
    expect(server.participant?.isOpen("live")).toBe(true); // live, out of scope, kept
    await control(url, "resume", { checkpoint_id: "c3" }).expect(200);
    // The controller may start r over as r-a1: nothing refuses it.
    await post(url, "/ng-rollout/r-a1/seed_session", "s").expect(200);
    await post(url, "/ng-rollout/r-a1/tool", "s").expect(200);
  });

  it("a restored session the server dropped before any request does not break the commit", async () => {
    const { server, url } = await restoredPair();
    await control(url, "resume", { checkpoint_id: "c2" }).expect(200);
    server.states.delete("t");
    await control(url, "prepare", { checkpoint_id: "c3" }).expect(200);
    const { records: written } = await commit(url, "c3", ["q-a1", "r-a1"]);
    expect(written.map((r) => r.session_id)).toEqual(["s"]);
    expect(server.participant?.sessionEpisode("t")).toBeNull();
  });

  it("after a restore, a close from the replaced attempt is refused and keeps the session", async () => {
    const { server, url } = await restoredPair();
    await control(url, "resume", { checkpoint_id: "c2" }).expect(200);
    const stale = await post(url, "/ng-rollout/q/close_session", "t");
    expect(stale.body.error.code).toBe("stale_attempt");
    expect(server.states.get("t")).toBe(1);
    expect(server.participant?.restoredPending()).toContainEqual({ rollout_id: "q", attempt: 1 });
  });

  it("across two restores the replaced attempts are refused and claim nothing", async () => {
    const first = await restoredPair();
    await control(first.url, "resume", { checkpoint_id: "c2" }).expect(200);
    await post(first.url, "/ng-rollout/q-a1/tool", "t").expect(200);
    await control(first.url, "prepare", { checkpoint_id: "c3" }).expect(200);
    const { dir } = await commit(first.url, "c3", ["q-a1"]);
    const second = await serve();
    await control(second.url, "restore", {
      checkpoint_id: "c4",
      checkpoint_dir: dir,
      episode_ids: [{ rollout_id: "q", attempt: 1 }],
    }).expect(200);
    await control(second.url, "resume", { checkpoint_id: "c4" }).expect(200);
    for (const stale of ["/ng-rollout/q/tool", "/ng-rollout/q-a1/tool"]) {
      expect((await post(second.url, stale, "t")).body.error.code).toBe("stale_attempt");
    }
    expect((await post(second.url, "/tool", "t")).body.error.code).toBe("rollout_id_required");
    expect(second.server.states.get("t")).toBe(2);
    expect(second.server.participant?.restoredPending()).toEqual([{ rollout_id: "q", attempt: 2 }]);
    expect((await post(second.url, "/ng-rollout/q-a2/tool", "t")).body.count).toBe(3);
  });

  it("a seed still waiting out a restore does not hold up a retire and is refused after it", async () => {
    const { url } = await restoredPair();
    const seed = track(post(url, "/ng-rollout/n/seed_session", "n"));
    await control(url, "retire", {
      checkpoint_id: "c2",
      episode_ids: [{ rollout_id: "n", attempt: 0 }],
    }).expect(200);
    expect(seed.done()).toBe(false);
    await control(url, "resume", { checkpoint_id: "c2" }).expect(200);
    expect((await seed.value).body.error.code).toBe("stale_attempt");
  });
});

describe("carried restarts", () => {
  it("a request in flight for a restart an earlier stage reported does not hold up prepare or get exported", async () => {
    const { server, url } = await serve({ mode: "exported" });
    await post(url, "/ng-rollout/r/seed_session", "s").expect(200);
    await post(url, "/ng-rollout/q/seed_session", "t").expect(200);
    const hold = server.hold("tool");
    const call = track(post(url, "/tool", "s")); // cookie only: keyed by the session's attempt
    await hold.entered;
    const prepared = await control(url, "prepare", { checkpoint_id: "c1", restarts: ["r"] });
    expect(prepared.body.phase).toBe("prepared");
    const { records: written } = await commit(url, "c1", null);
    expect(written.map((r) => r.session_id)).toEqual(["t"]);
    hold.release();
    expect((await call.value).status).toBe(200);
    await control(url, "resume", { checkpoint_id: "c1" }).expect(200);
    // Cleared at resume: the next prepare waits for r again.
    const again = server.hold("tool");
    const next = track(post(url, "/tool", "s"));
    await again.entered;
    const waiting = await control(url, "prepare", { checkpoint_id: "c2", deadline_ts: soon() });
    expect(waiting.body.phase).toBe("preparing");
    again.release();
    await next.value;
  });
});

describe("the counter example", () => {
  it("leaves a session it no longer holds out of its export and stops tracking it", async () => {
    const { default: CounterServer } =
      await import("../../../reference-servers/counter/src/index.js");
    const server = new CounterServer({ name: "counter", checkpoint: on, ...silent });
    const app = server.app();
    await request(app).post("/ng-rollout/r/seed_session").send({ initial_count: 1 }).expect(200);
    const kept = await request(app)
      .post("/ng-rollout/q/seed_session")
      .send({ initial_count: 2 })
      .expect(200);
    expect(kept.status).toBe(200);
    const [dropped] = [...server.states.keys()];
    server.states.delete(dropped as string);
    const exported = await server.participant?.export(null, new AbortController().signal);
    expect(exported?.map((r) => r.state)).toEqual([{ count: 2, target: null }]);
    expect(server.participant?.sessionEpisode(dropped as string)).toBeNull();
  });
});
