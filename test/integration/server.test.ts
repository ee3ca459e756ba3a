import { readFileSync } from "node:fs";
import fc from "fast-check";
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { Participant } from "#sdk/control/participant.js";
import { ServerReplyError, ServerUnreachableError } from "#sdk/client/errors.js";
import { ConfigError } from "#sdk/errors.js";
import type { EpisodeId } from "#sdk/identity/episode-id.js";
import { dataRoute, type DataRoute } from "#sdk/server/data-route.js";
import { Server, type ServerOptions } from "#sdk/server/server.js";
import { CONTROL_ROUTES } from "#sdk/wire/control-routes.js";
import { prepareReport, type PrepareReport } from "#sdk/wire/control.js";
import { recordSchema } from "#sdk/wire/storage.js";

const TOKEN = "s3cret-token";
const AUTH = `Bearer ${TOKEN}`;

class IdleParticipant extends Participant {
  readonly kind = "resources" as const;
  readonly recordSchema = recordSchema({});
  closeAdmission(): void {}
  openAdmission(): void {}
  readiness(): PrepareReport {
    return prepareReport({ ready: true });
  }
  async retire(_episode: EpisodeId): Promise<void> {}
  async export(): Promise<[]> {
    return [];
  }
  async install(): Promise<void> {}
}

let release: (() => void) | null = null;
/** How many bodies the /fast route's hand check took. */
let fastParses = 0;

class EchoServer extends Server {
  protected override createParticipant(): Participant {
    return new IdleParticipant();
  }
  protected override routes(): readonly DataRoute[] {
    return [
      dataRoute({
        method: "post",
        path: "/echo",
        summary: "Echo a message with the request's rollout",
        rolloutPrefixed: true,
        request: z.strictObject({ message: z.string() }),
        handler: ({ body, rollout }) => ({
          message: body.message,
          capture_key: rollout?.captureKey ?? null,
          attempt: rollout?.episodeId.attempt ?? null,
        }),
      }),
      dataRoute({
        method: "get",
        path: "/boom",
        summary: "Fails unexpectedly",
        handler: () => {
          throw new Error("secret internal detail");
        },
      }),
      dataRoute({
        method: "post",
        path: "/fast",
        summary: "A route with a hand check of its body",
        request: z.strictObject({ n: z.number() }),
        parse: (body) => {
          const n = (body as { n?: unknown } | null)?.n;
          if (typeof n !== "number" || Object.keys(body as object).length !== 1) return null;
          fastParses += 1;
          return { n };
        },
        handler: ({ body }) => ({ doubled: body.n * 2 }),
      }),
      dataRoute({
        method: "get",
        path: "/upstream-down",
        summary: "Fails calling a server that cannot be reached",
        handler: () => {
          throw new ServerUnreachableError("policy", "POST", "/v1/responses", "connect");
        },
      }),
      dataRoute({
        method: "get",
        path: "/upstream-refused",
        summary: "Fails calling a server that refused",
        handler: () => {
          throw new ServerReplyError("counter", "POST", "/verify", 409, "stale_attempt", "retired");
        },
      }),
      dataRoute({
        method: "get",
        path: "/upstream-further",
        summary: "Fails calling a server whose own call to another one failed",
        handler: () => {
          throw new ServerReplyError(
            "agent",
            "POST",
            "/run",
            502,
            "upstream_unreachable",
            "policy: POST /v1/responses failed: cannot connect (is the server running?)",
          );
        },
      }),
      dataRoute({
        method: "get",
        path: "/slow",
        summary: "Answers when the test releases it",
        handler: async () => {
          await new Promise<void>((resolve) => {
            release = resolve;
          });
          return { done: true };
        },
      }),
    ];
  }
}

function server(options: Partial<ServerOptions> = {}): EchoServer {
  return new EchoServer({
    name: "echo",
    logLevel: "silent",
    checkpoint: { enabled: true, control_auth_token: TOKEN },
    ...options,
  });
}

const running: Server[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((s) => s.close()));
});

describe("checkpointing off", () => {
  it("installs no control route: every one is 404 with the envelope", async () => {
    const app = server({ checkpoint: { enabled: false } }).app();
    for (const route of CONTROL_ROUTES) {
      const res = await request(app)[route.method](route.path).set("Authorization", AUTH);
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe("not_found");
    }
  });

  it("still serves health, data routes and docs without control routes", async () => {
    const app = server({ checkpoint: null }).app();
    expect((await request(app).get("/health")).body).toEqual({ status: "ok", name: "echo" });
    const doc = (await request(app).get("/openapi.json")).body;
    expect(Object.keys(doc.paths)).toContain("/echo");
    expect(Object.keys(doc.paths).some((p) => p.startsWith("/ng-control"))).toBe(false);
  });
});

describe("control routes", () => {
  it("answer status with the bearer token", async () => {
    const res = await request(server().app())
      .get("/ng-control/v1/checkpoint/status")
      .set("Authorization", AUTH);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      kind: "resources",
      instance: "echo",
      phase: "idle",
      checkpoint_id: null,
      lease_expires_at: null,
      retired_rollouts: 0,
      report: { ready: true, blockers: [], blocker_count: 0 },
    });
  });

  it.each([
    ["no header", undefined],
    ["a wrong token", "Bearer wrong"],
    ["another scheme", `Basic ${TOKEN}`],
    ["a lower-case scheme", `bearer ${TOKEN}`],
    ["an empty token", "Bearer "],
  ])("refuse %s with 401 unauthorized on every route", async (_what, header) => {
    const app = server().app();
    for (const route of CONTROL_ROUTES) {
      const req = request(app)[route.method](route.path);
      if (header !== undefined) req.set("Authorization", header);
      const res = await req;
      expect(res.status).toBe(401);
      expect(res.body.error.code).toBe("unauthorized");
    }
  });

  it("check the bearer before parsing the body", async () => {
    const res = await request(server().app())
      .post("/ng-control/v1/checkpoint/prepare")
      .set("Content-Type", "application/json")
      .send("{not json");
    expect(res.status).toBe(401);
  });

  it("answer malformed JSON with 422 invalid_request", async () => {
    const res = await request(server().app())
      .post("/ng-control/v1/checkpoint/prepare")
      .set("Authorization", AUTH)
      .set("Content-Type", "application/json")
      .send("{not json");
    expect(res.status).toBe(422);
    expect(res.body.error.code).toBe("invalid_request");
  });

  it("answer a missing body with 422 naming the missing fields", async () => {
    const res = await request(server().app())
      .post("/ng-control/v1/checkpoint/prepare")
      .set("Authorization", AUTH);
    expect(res.status).toBe(422);
    expect(res.body.error.code).toBe("invalid_request");
  });

  it("answer an unknown field with 422 listing the issue", async () => {
    const res = await request(server().app())
      .post("/ng-control/v1/checkpoint/renew")
      .set("Authorization", AUTH)
      .send({ checkpoint_id: "c1", deadline_ts: 1, surprise: true });
    expect(res.status).toBe(422);
    expect(res.body.error.issues.length).toBeGreaterThan(0);
    expect(JSON.stringify(res.body.error.issues)).toContain("surprise");
  });

  it("run a whole checkpoint over HTTP", async () => {
    const app = server().app();
    const deadline = Date.now() / 1000 + 30;
    const prepared = await request(app)
      .post("/ng-control/v1/checkpoint/prepare")
      .set("Authorization", AUTH)
      .send({ checkpoint_id: "c1", deadline_ts: deadline });
    expect(prepared.body.phase).toBe("prepared");
    const resumed = await request(app)
      .post("/ng-control/v1/checkpoint/resume")
      .set("Authorization", AUTH)
      .send({ checkpoint_id: "c1", deadline_ts: deadline });
    expect(resumed.body).toEqual({ phase: "idle", idempotent: false });
    const stale = await request(app)
      .post("/ng-control/v1/checkpoint/prepare")
      .set("Authorization", AUTH)
      .send({ checkpoint_id: "c1", deadline_ts: deadline });
    expect(stale.status).toBe(409);
    expect(stale.body.error.code).toBe("stale_checkpoint");
  });

  it("answer every invalid control request with a 4xx, never a 5xx", async () => {
    const app = server().app();
    const posts = CONTROL_ROUTES.filter((route) => route.method === "post");
    const bodyArb = fc.oneof(
      fc.jsonValue(),
      fc.record(
        {
          checkpoint_id: fc.oneof(fc.string(), fc.integer(), fc.constant(null)),
          deadline_ts: fc.oneof(fc.double(), fc.string(), fc.constant(null)),
          checkpoint_dir: fc.oneof(fc.string({ maxLength: 3 }), fc.integer()),
          episode_ids: fc.oneof(fc.jsonValue(), fc.array(fc.record({ rollout_id: fc.string() }))),
          rollout_ids: fc.jsonValue(),
          restarts: fc.jsonValue(),
          stop: fc.jsonValue(),
          extra: fc.jsonValue(),
        },
        { requiredKeys: [] },
      ),
    );
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...posts), bodyArb, async (route, body) => {
        const res = await request(app)
          .post(route.path)
          .set("Authorization", AUTH)
          .set("Content-Type", "application/json")
          .send(JSON.stringify(body));
        expect(res.status, JSON.stringify(res.body)).toBeGreaterThanOrEqual(400);
        expect(res.status, JSON.stringify(res.body)).toBeLessThan(500);
        expect(typeof res.body.error.code).toBe("string");
      }),
      { numRuns: 150 },
    );
  });

  it.each([
    ["upper-case", "get", "/NG-CONTROL/v1/checkpoint/STATUS"],
    ["trailing slash", "get", "/ng-control/v1/checkpoint/status/"],
    ["trailing slash", "post", "/ng-control/v1/checkpoint/prepare/"],
    ["another method", "get", "/ng-control/v1/checkpoint/prepare"],
    ["another method", "options", "/ng-control/v1/checkpoint/status"],
    ["another method", "delete", "/ng-control/v1/checkpoint/forget"],
  ] as const)("exist in one spelling only: %s %s %s is 404", async (_what, method, path) => {
    const app = server().app();
    const res = await request(app)[method](path).set("Authorization", AUTH).send({});
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe("not_found");
    const status = await request(app)
      .get("/ng-control/v1/checkpoint/status")
      .set("Authorization", AUTH);
    expect(status.body.phase).toBe("idle"); // nothing was prepared by a misspelt path
  });

  it("check the bearer on every method of a control path, OPTIONS included", async () => {
    const res = await request(server().app()).options("/ng-control/v1/checkpoint/status");
    expect(res.status).toBe(401);
    expect(res.body.error.code).toBe("unauthorized");
  });

  it("are never served under the rollout prefix", async () => {
    const res = await request(server().app())
      .get("/ng-rollout/r/ng-control/v1/checkpoint/status")
      .set("Authorization", AUTH);
    expect(res.status).toBe(404);
  });

  it("refuse to start with checkpointing on and no token", () => {
    expect(() => server({ checkpoint: { enabled: true } })).toThrow(ConfigError);
  });
});

describe("data routes", () => {
  it("see the rollout of a prefixed request, with the prefix stripped", async () => {
    const res = await request(server().app())
      .post("/ng-rollout/task-3-a2/echo")
      .send({ message: "hi" });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ message: "hi", capture_key: "task-3-a2", attempt: 2 });
  });

  it("see no rollout without a prefix", async () => {
    const res = await request(server().app()).post("/echo").send({ message: "hi" });
    expect(res.body.capture_key).toBeNull();
  });

  it.each(["/ng-rollout/.bad/echo", "/ng-rollout/r-a1-a2/echo"])(
    "refuse the malformed prefix %s with 400 invalid_rollout_id",
    async (path) => {
      const res = await request(server().app()).post(path).send({ message: "hi" });
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe("invalid_rollout_id");
    },
  );

  it("take a body through the route's hand check, and leave the rest to its schema", async () => {
    fastParses = 0;
    const ok = await request(server().app()).post("/fast").send({ n: 4 });
    expect(ok.status).toBe(200);
    expect(ok.body).toEqual({ doubled: 8 });
    expect(fastParses).toBe(1);
    const bad = await request(server().app()).post("/fast").send({ n: "4" });
    expect(bad.status).toBe(422);
    expect(bad.body.error.code).toBe("invalid_request");
    expect(bad.body.error.issues[0].path).toEqual(["n"]);
    expect(fastParses).toBe(1);
  });

  it("answer an invalid body with 422 and its issues", async () => {
    const res = await request(server().app()).post("/echo").send({ message: 5 });
    expect(res.status).toBe(422);
    expect(res.body.error.issues[0].path).toEqual(["message"]);
  });

  it("answer an unexpected failure with a generic 500 that leaks nothing", async () => {
    const res = await request(server().app()).get("/boom");
    expect(res.status).toBe(500);
    expect(res.body.error.code).toBe("internal_error");
    expect(JSON.stringify(res.body)).not.toContain("secret");
  });

  it("answer a failed call to another server with 502 naming that server, not a 500", async () => {
    const down = await request(server().app()).get("/upstream-down");
    expect(down.status).toBe(502);
    expect(down.body.error).toEqual({
      code: "upstream_unreachable",
      detail: "policy: POST /v1/responses failed: cannot connect (is the server running?)",
    });
    const refused = await request(server().app()).get("/upstream-refused");
    expect(refused.status).toBe(502);
    expect(refused.body.error).toEqual({
      code: "upstream_error",
      detail: "counter: POST /verify → HTTP 409 stale_attempt: retired",
    });
    // A failure further upstream is passed on as that server reported it.
    const further = await request(server().app()).get("/upstream-further");
    expect(further.status).toBe(502);
    expect(further.body.error).toEqual({
      code: "upstream_unreachable",
      detail: "policy: POST /v1/responses failed: cannot connect (is the server running?)",
    });
  });
});

describe("documentation", () => {
  it("serves Swagger UI at /docs", async () => {
    const res = await request(server().app()).get("/docs/");
    expect(res.status).toBe(200);
    expect(res.text).toContain("swagger-ui");
  });

  it("builds its document on the first request for it, once, not at start-up", async () => {
    class CountingServer extends EchoServer {
      documents = 0;
      override openApiDocument(): ReturnType<EchoServer["openApiDocument"]> {
        this.documents++;
        return super.openApiDocument();
      }
    }
    const counting = new CountingServer({
      name: "echo",
      logLevel: "silent",
      checkpoint: { enabled: true, control_auth_token: TOKEN },
    });
    const app = counting.app();
    expect(counting.documents).toBe(0);
    expect((await request(app).get("/openapi.json")).body.paths["/echo"]).toBeDefined();
    expect((await request(app).get("/docs/")).text).toContain("swagger-ui");
    expect((await request(app).get("/openapi.json")).status).toBe(200);
    expect(counting.documents).toBe(1);
  });

  it("lists data routes and, when on, the control routes in /openapi.json", async () => {
    const doc = (await request(server().app()).get("/openapi.json")).body;
    for (const route of CONTROL_ROUTES) expect(doc.paths[route.path]).toBeDefined();
    expect(doc.paths["/echo"]).toBeDefined();
  });

  it("takes info.version and a description from the SDK's package; a server may publish its own", () => {
    const sdk = JSON.parse(
      readFileSync(new URL("../../sdk/package.json", import.meta.url), "utf8"),
    ) as { name: string; version: string };
    const info = server().openApiDocument().info;
    expect(info.version).toBe(sdk.version);
    expect(info.description).toContain(`${sdk.name} ${sdk.version}`);
    class Versioned extends Server {
      protected override apiInfo() {
        return { version: "2.3.4", description: "mine" };
      }
    }
    const own = new Versioned({ name: "versioned" }).openApiDocument().info;
    expect(own).toMatchObject({ version: "2.3.4", description: "mine" });
  });

  it("gives the same document from openApiDocument() before the server is built or listens", async () => {
    const served = (await request(server().app()).get("/openapi.json")).body;
    const early = server().openApiDocument();
    expect(Object.keys(early.paths ?? {})).toEqual(Object.keys(served.paths));
    for (const route of CONTROL_ROUTES) expect(early.paths?.[route.path]).toBeDefined();
  });
});

describe("lifecycle", () => {
  it("lets an in-flight request finish on close", async () => {
    const s = server();
    const { url } = await s.listen();
    const pending = fetch(`${url}/slow`).then((res) => res.json());
    await expect.poll(() => release !== null, { timeout: 5_000 }).toBe(true);
    const closing = s.close();
    release?.();
    expect(await pending).toEqual({ done: true });
    await closing;
    release = null;
  });

  it("refuses a server name that is not a safe path component", () => {
    expect(() => new EchoServer({ name: "../x", logLevel: "silent" })).toThrow(ConfigError);
  });

  it("serves over a real socket", async () => {
    const s = server();
    running.push(s);
    const { url } = await s.listen();
    const res = await fetch(`${url}/health`);
    expect(await res.json()).toEqual({ status: "ok", name: "echo" });
  });
});
