import { createServer, type IncomingMessage, type Server as HttpServer } from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import {
  ServerReplyError,
  ServerUnreachableError,
  UnknownServerError,
} from "#sdk/client/errors.js";
import { ServerClient } from "#sdk/client/server-client.js";
import { Participant } from "#sdk/control/participant.js";
import { ConfigError } from "#sdk/errors.js";
import { episodeId } from "#sdk/identity/episode-id.js";
import { dataRoute, type DataRoute } from "#sdk/server/data-route.js";
import { Server } from "#sdk/server/server.js";
import { prepareReport } from "#sdk/wire/control.js";
import type { ResolvedDeployment } from "#sdk/wire/deployment.js";
import { recordSchema } from "#sdk/wire/storage.js";
import { deferred, type Deferred } from "#sdk/util/deferred.js";

const TOKEN = "client-token";

class Quiet extends Participant {
  readonly kind = "resources" as const;
  readonly recordSchema = recordSchema({});
  closeAdmission(): void {}
  openAdmission(): void {}
  readiness() {
    return prepareReport({ ready: true });
  }
  async retire(): Promise<void> {}
  async export(): Promise<[]> {
    return [];
  }
  async install(): Promise<void> {}
}

let gate: Deferred<void> = deferred();
let held = 0;

class Target extends Server {
  protected override createParticipant() {
    return new Quiet();
  }
  protected override routes(): readonly DataRoute[] {
    return [
      dataRoute({
        method: "post",
        path: "/echo",
        summary: "Echo the path the handler saw and its rollout",
        request: z.unknown(),
        handler: ({ body, rollout, req }) => ({
          body,
          path: req.path,
          rollout: rollout?.captureKey ?? null,
        }),
      }),
      dataRoute({
        method: "get",
        path: "/hold",
        summary: "Holds until the test opens the gate",
        handler: async () => {
          held += 1;
          await gate.promise;
          return { held: true };
        },
      }),
    ];
  }
}

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  gate.resolve();
  await Promise.all(closers.splice(0).map((close) => close()));
  gate = deferred();
  held = 0;
});

type ResolvedServerEntry = ResolvedDeployment["servers"][string];

function deploymentOf(urls: Record<string, string>, checkpoint = true): ResolvedDeployment {
  const servers: ResolvedDeployment["servers"] = {};
  for (const [name, url] of Object.entries(urls)) {
    const parsed = new URL(url);
    servers[name] = {
      kind: "resources",
      url,
      host: parsed.hostname,
      port: Number(parsed.port),
      num_workers: 1,
      config: {},
    };
  }
  return {
    checkpoint: checkpoint
      ? { enabled: true, control_auth_token: TOKEN, lease_grace_seconds: 600 }
      : null,
    servers,
  };
}

async function target(): Promise<string> {
  const server = new Target({
    name: "target",
    logLevel: "silent",
    checkpoint: { enabled: true, control_auth_token: TOKEN },
  });
  const { url } = await server.listen();
  closers.push(() => server.close());
  return url;
}

function client(deployment: ResolvedDeployment, options = {}): ServerClient {
  const c = new ServerClient(deployment, options);
  closers.push(() => c.close());
  return c;
}

describe("ServerClient", () => {
  it("prefixes data calls with the rollout's capture key when checkpointing is on", async () => {
    const c = client(deploymentOf({ target: await target() }));
    const reply = await c.post<{ path: string; rollout: string }>(
      "target",
      "/echo",
      { a: 1 },
      {
        rollout: episodeId("task-1", 2),
      },
    );
    expect(reply).toEqual({ body: { a: 1 }, path: "/echo", rollout: "task-1-a2" });
  });

  it("sends no prefix when checkpointing is off or no rollout is given", async () => {
    const url = await target();
    const off = client(deploymentOf({ target: url }, false));
    expect(
      (await off.post<{ rollout: string | null }>("target", "/echo", {}, { rollout: "r" })).rollout,
    ).toBeNull();
    const on = client(deploymentOf({ target: url }));
    expect((await on.post<{ rollout: string | null }>("target", "/echo", {})).rollout).toBeNull();
  });

  it("keeps control calls flowing while every data connection is held", async () => {
    const c = client(deploymentOf({ target: await target() }), {
      dataConnectionsPerServer: 2,
      controlConnectionsPerServer: 1,
    });
    const parked = [c.get("target", "/hold"), c.get("target", "/hold"), c.get("target", "/hold")];
    await expect.poll(() => held, { timeout: 5_000 }).toBe(2);
    const status = await c.control<{ phase: string }>("target", "status", null, {
      token: TOKEN,
      timeoutMs: 5_000,
    });
    expect(status.phase).toBe("idle");
    // The third data call is still queued behind the two held connections.
    expect(held).toBe(2);
    gate.resolve();
    expect(await Promise.all(parked)).toEqual([{ held: true }, { held: true }, { held: true }]);
  });

  it("caps connections to a resources server (short calls in bursts), not to other kinds", async () => {
    const url = await target();
    const deployment = deploymentOf({ target: url });
    const resources = client(deployment, { resourcesConnectionsPerServer: 3 });
    const parked = Array.from({ length: 5 }, () => resources.get("target", "/hold"));
    await expect.poll(() => held, { timeout: 5_000 }).toBe(3);
    // Let the event loop turn: the two calls over the cap stay queued in the client.
    for (let i = 0; i < 20; i += 1) await new Promise((resolve) => setImmediate(resolve));
    expect(held).toBe(3);
    gate.resolve();
    await Promise.all(parked);
    gate = deferred();
    held = 0;
    const asAgent = {
      ...deployment,
      servers: {
        target: { ...(deployment.servers.target as ResolvedServerEntry), kind: "agent" as const },
      },
    };
    const agent = client(asAgent, { resourcesConnectionsPerServer: 3 });
    const free = Array.from({ length: 5 }, () => agent.get("target", "/hold"));
    await expect.poll(() => held, { timeout: 5_000 }).toBe(5);
    gate.resolve();
    await Promise.all(free);
  });

  it("turns an error envelope into a typed error with the remote code", async () => {
    const c = client(deploymentOf({ target: await target() }));
    const error = await c
      .control("target", "prepare", Buffer.from("{}"), { token: TOKEN, timeoutMs: 5_000 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ServerReplyError);
    expect((error as ServerReplyError).code).toBe("invalid_request");
    expect((error as ServerReplyError).status).toBe(422);
    const unauthorized = await c
      .control("target", "status", null, { token: "wrong", timeoutMs: 5_000 })
      .catch((e: unknown) => e);
    expect((unauthorized as ServerReplyError).code).toBe("unauthorized");
  });

  it("bounds every call", async () => {
    const c = client(deploymentOf({ target: await target() }));
    const error = await c.get("target", "/hold", { timeoutMs: 100 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ServerUnreachableError);
    expect((error as ServerUnreachableError).reason).toBe("timeout");
  });

  it("never sends a /run again after the connection dropped", async () => {
    let runs = 0;
    const raw: HttpServer = createServer((req: IncomingMessage) => {
      runs += 1;
      req.socket.destroy();
    });
    await new Promise<void>((resolve) => raw.listen(0, "127.0.0.1", resolve));
    closers.push(() => new Promise<void>((resolve) => raw.close(() => resolve())));
    const port = (raw.address() as { port: number }).port;
    const c = client(deploymentOf({ env: `http://127.0.0.1:${port}` }));
    const error = await c.post("env", "/run", { _ng_rollout_id: "r" }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ServerUnreachableError);
    expect((error as ServerUnreachableError).reason).toBe("connection_lost");
    expect(runs).toBe(1);
  });

  it("refuses negative or fractional pool limits at construction", () => {
    const deployment = deploymentOf({});
    expect(() => new ServerClient(deployment, { dataConnectionsPerServer: -1 })).toThrow(
      ConfigError,
    );
    expect(() => new ServerClient(deployment, { controlConnectionsPerServer: 1.5 })).toThrow(
      ConfigError,
    );
    expect(() => new ServerClient(deployment, { dataTimeoutMs: 0 })).toThrow(ConfigError);
  });

  it("names the known servers when asked for an unknown one", async () => {
    const c = client(deploymentOf({ target: await target() }));
    await expect(c.post("nope", "/x", {})).rejects.toThrow(UnknownServerError);
    await expect(c.post("nope", "/x", {})).rejects.toThrow(/known: target/);
  });

  it("reports a server that is not running as unreachable", async () => {
    const c = client(deploymentOf({ ghost: "http://127.0.0.1:1" }));
    const error = await c.get("ghost", "/health").catch((e: unknown) => e);
    expect((error as ServerUnreachableError).reason).toBe("connect");
  });
});
