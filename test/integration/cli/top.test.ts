/**
 * `gym top` reads each server's `/ready` and metrics route; its request rate and count are of
 * work only, so its own polling (and a controller's control calls) do not show as traffic on an
 * idle server.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { snapshotOf } from "#sdk/cli/top.js";
import type { Server } from "#sdk/server/server.js";
import EpisodesResourcesServer from "../../fixtures/servers/episodes-resources.js";

const TOKEN = "top-token";
let server: Server;
let url: string;

beforeAll(async () => {
  const checkpoint = { enabled: true, control_auth_token: TOKEN, lease_grace_seconds: 600 };
  server = new EpisodesResourcesServer({
    name: "counter",
    config: {},
    checkpoint,
    logLevel: "silent",
  });
  ({ url } = await server.listen({ port: 0 }));
});
afterAll(async () => {
  await server.close();
});

describe("gym top's request count", () => {
  it("does not count its own polls of /ready and /metrics, nor control or health calls", async () => {
    const first = await snapshotOf({ url });
    expect(first.ready).toBe("ready");
    expect(first.requests).toBe(0);
    // Polls, a health check, a control call and the OpenAPI document: none of them is work.
    await snapshotOf({ url });
    expect((await fetch(`${url}/health`)).status).toBe(200);
    const status = await fetch(`${url}/ng-control/v1/checkpoint/status`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(status.status).toBe(200);
    expect((await fetch(`${url}/openapi.json`)).status).toBe(200);
    expect((await snapshotOf({ url })).requests).toBe(0);
    // Work is counted, once per request.
    expect((await fetch(`${url}/episodes`)).status).toBe(200);
    expect((await fetch(`${url}/episodes`)).status).toBe(200);
    expect((await snapshotOf({ url })).requests).toBe(2);
    expect((await snapshotOf({ url })).requests).toBe(2);
  });
});
