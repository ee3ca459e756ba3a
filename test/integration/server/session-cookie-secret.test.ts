/**
 * Session cookies are signed with a key from the server's session secret, never from public
 * names: a cookie signed with the old name-derived key is refused, servers with different
 * secrets refuse each other's cookies, a fresh process of the same deployment (same control
 * token) accepts the cookies of its predecessor, and the secret shows in no log or document.
 */
import { createHash } from "node:crypto";
import { Writable } from "node:stream";
import { pino } from "pino";
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import { encodeSessionCookie } from "#sdk/server/resources/session-cookie.js";
import { ResourcesServer } from "#sdk/server/resources-server.js";
import type { Server, ServerOptions } from "#sdk/server/server.js";
import { SessionSecret } from "#sdk/server/session-secret.js";
import { CHECKPOINT_ON, ScriptedAgent, activate, seeded } from "../../support/agent-harness.js";

const TOKEN = "cookie-secret-test-token";
const on = { enabled: true, control_auth_token: TOKEN };
const COOKIE = "Echo___e";

class Echo extends ResourcesServer {
  static override checkpointMode = "stateless" as const;
  protected override verify() {
    return { reward: 1 };
  }
}

const started: Pick<Server, "close">[] = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map((s) => s.close()));
});

async function listen(server: Server): Promise<string> {
  started.push(server);
  return (await server.listen({ port: 0 })).url;
}

function echo(options: Partial<ServerOptions> = {}): Echo {
  return new Echo({ name: "e", logLevel: "silent", ...options });
}

/** The session ID a cookie (`name=payload.signature`) names, signature unchecked. */
function idIn(cookie: string): string {
  const value = cookie.slice(cookie.indexOf("=") + 1);
  const payload = value.slice(0, value.lastIndexOf("."));
  const data = JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as {
    session_id: string;
  };
  return data.session_id;
}

/** What a server made of a request's cookie. */
interface Outcome {
  /** Whether it minted a new session (the cookie did not verify, or there was none). */
  readonly fresh: boolean;
  /** The session the request ran in. */
  readonly id: string;
  /** The cookie the client holds afterwards. */
  readonly cookie: string;
}

/** Seeds a session with `cookie` (or none); the reply sets a cookie only for a new session. */
async function seed(url: string, cookie: string | null): Promise<Outcome> {
  let req = request(url).post("/ng-rollout/r/seed_session");
  if (cookie !== null) req = req.set("Cookie", cookie);
  const res = await req.send({});
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  const set = ((res.headers["set-cookie"] ?? []) as unknown as string[]).find((line) =>
    line.startsWith(`${COOKIE}=`),
  );
  if (set === undefined) {
    if (cookie === null) throw new Error("a request without a cookie got none");
    return { fresh: false, id: idIn(cookie), cookie };
  }
  const minted = set.split(";")[0] ?? "";
  return { fresh: true, id: idIn(minted), cookie: minted };
}

/** The key every server signed with before: derived from the cookie name alone. */
function publicNameKey(prefix: string, cookieName: string): Buffer {
  return createHash("sha256").update(`${prefix}:${cookieName}`).digest();
}

describe("resources session cookies", () => {
  it("refuse a cookie signed with the public-name key: the request gets a fresh session", async () => {
    for (const options of [{ checkpoint: on }, { sessionSecret: "configured" }, {}]) {
      const url = await listen(echo(options));
      const key = publicNameKey("gym-resources-session", COOKIE);
      const forged = await seed(url, `${COOKIE}=${encodeSessionCookie("victim", key)}`);
      expect(forged.fresh, JSON.stringify(options)).toBe(true);
      expect(forged.id).not.toBe("victim");
    }
  });

  it("are signed with the key derived from the control token, so a fresh process accepts them", async () => {
    const first = await listen(echo({ checkpoint: on }));
    const minted = await seed(first, null);
    const derived = SessionSecret.fromControlToken(TOKEN).keyFor(COOKIE);
    expect(minted.cookie).toBe(`${COOKIE}=${encodeSessionCookie(minted.id, derived)}`);
    // After a crash: a new server of the same deployment (same class, name and token).
    const restored = await listen(echo({ checkpoint: on }));
    expect(await seed(restored, minted.cookie)).toEqual({ ...minted, fresh: false });
  });

  it("are refused by a server with another secret", async () => {
    const other = { enabled: true, control_auth_token: "another-token" };
    const pairs: [string, Partial<ServerOptions>, Partial<ServerOptions>][] = [
      ["configured", { sessionSecret: "alpha" }, { sessionSecret: "beta" }],
      ["token", { checkpoint: on }, { checkpoint: other }],
      ["configured beats token", { checkpoint: on }, { checkpoint: on, sessionSecret: "alpha" }],
      ["random (checkpointing off)", {}, {}],
    ];
    for (const [what, a, b] of pairs) {
      const urlA = await listen(echo(a));
      const urlB = await listen(echo(b));
      const minted = await seed(urlA, null);
      expect(await seed(urlA, minted.cookie), `${what}: A keeps its own`).toEqual({
        ...minted,
        fresh: false,
      });
      const atB = await seed(urlB, minted.cookie);
      expect(atB.fresh, `${what}: B refuses A's`).toBe(true);
      expect(atB.id).not.toBe(minted.id);
    }
  });

  it("are accepted by another server configured with the same secret", async () => {
    const urlA = await listen(echo({ sessionSecret: "shared" }));
    const urlB = await listen(echo({ sessionSecret: "shared", checkpoint: on }));
    const minted = await seed(urlA, null);
    expect(await seed(urlB, minted.cookie)).toEqual({ ...minted, fresh: false });
  });
});

describe("agent session cookies", () => {
  const token = CHECKPOINT_ON.control_auth_token;

  async function agent(options: Partial<ServerOptions> = {}): Promise<string> {
    return await listen(
      new ScriptedAgent({
        name: "agent",
        checkpoint: CHECKPOINT_ON,
        logLevel: "silent",
        ...options,
      }),
    );
  }

  it("refuse a marker signed with the public-name key as forged", async () => {
    const url = await agent();
    await seeded(url, "s");
    const key = publicNameKey("gym-agent-session", "agent");
    const forged = await activate(url, `agent_session___agent=${encodeSessionCookie("s", key)}`);
    expect(forged.status).toBe(409);
    expect(forged.body).toEqual({ detail: "Invalid agent session marker" });
  });

  it("verify in a fresh process of the same deployment, and not under another secret", async () => {
    const url = await agent();
    const cookie = await seeded(url, "s");
    const derived = SessionSecret.fromControlToken(token).keyFor("agent_session___agent");
    expect(cookie).toBe(`agent_session___agent=${encodeSessionCookie("s", derived)}`);
    // The fresh process has no session "s" (nothing was restored), but the marker is valid.
    const restored = await activate(await agent(), cookie);
    expect(restored.status).toBe(409);
    expect(restored.body).toEqual({ detail: "Unknown or closing agent_session_id" });
    const elsewhere = await activate(await agent({ sessionSecret: "another" }), cookie);
    expect(elsewhere.body).toEqual({ detail: "Invalid agent session marker" });
  });
});

describe("the session secret", () => {
  const SECRET = "s3cr3t-that-must-never-show-0123456789";

  it("shows in no log line, OpenAPI document or serialized server", async () => {
    let logged = "";
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        logged += chunk.toString("utf8");
        done();
      },
    });
    const server = new Echo({
      name: "e",
      checkpoint: on,
      sessionSecret: SECRET,
      logger: pino({ level: "trace" }, sink),
      telemetry: { request_log_level: "info" },
    });
    const url = await listen(server);
    const minted = await seed(url, null);
    await seed(url, minted.cookie);
    await request(url).post("/ng-rollout/r/verify").set("Cookie", minted.cookie).send({});
    await request(url).post("/nope").send({});
    expect(logged).toContain('"session_secret":"configured"');
    expect(logged).toContain("/seed_session");
    const openapi = await request(url).get("/openapi.json").expect(200);
    const shown = [logged, JSON.stringify(openapi.body), JSON.stringify(server)];
    for (const text of shown) expect(text).not.toContain(SECRET);
  });
});
