/**
 * The participant's side of clock skew: its status reply carries its clock (`now`), and a
 * control call naming the controller's clock (`x-ng-controller-time`) sets
 * `gym_clock_offset_seconds`, which `gym top` shows.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clockCell, clockOffsetOf, parsePrometheus, snapshotOf } from "#sdk/cli/top.js";
import { ServerClient } from "#sdk/client/server-client.js";
import type { Server } from "#sdk/server/server.js";
import { stopTelemetry } from "#sdk/telemetry/setup.js";
import type { StatusReply } from "#sdk/wire/control.js";
import EpisodesResourcesServer from "../../fixtures/servers/episodes-resources.js";

const TOKEN = "clock-token";
let server: Server;
let url: string;

beforeAll(async () => {
  await stopTelemetry(); // the server installs its own, with the Prometheus route
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
  await stopTelemetry();
});

async function offsetSamples(): Promise<number[]> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return parsePrometheus(text)
    .filter((s) => s.name === "gym_clock_offset_seconds" && s.labels.server === "counter")
    .map((s) => s.value);
}

async function statusWith(headers: Record<string, string>): Promise<Response> {
  return await fetch(`${url}/ng-control/v1/checkpoint/status`, {
    headers: { authorization: `Bearer ${TOKEN}`, ...headers },
  });
}

describe("a participant's clock", () => {
  it("is in its status reply as now, Unix seconds with milliseconds", async () => {
    const client = new ServerClient({
      checkpoint: { enabled: true, control_auth_token: TOKEN, lease_grace_seconds: 600 },
      servers: {
        counter: {
          kind: "resources",
          url,
          host: new URL(url).hostname,
          port: Number(new URL(url).port),
          num_workers: 1,
          config: {},
        },
      },
    });
    try {
      const before = Date.now() / 1000;
      const reply = await client.controlWithReply<StatusReply>("counter", "status", null, {
        token: TOKEN,
        timeoutMs: 10_000,
      });
      const after = Date.now() / 1000;
      expect(reply.body.now).toBeGreaterThanOrEqual(before);
      expect(reply.body.now).toBeLessThanOrEqual(after);
      expect(typeof reply.headers.date).toBe("string");
    } finally {
      await client.close();
    }
  });

  it("is exported against the controller's clock a control call names", async () => {
    // A controller 60 s behind this server's clock (the same machine's: the header says so).
    const res = await statusWith({ "x-ng-controller-time": String(Date.now() / 1000 - 60) });
    expect(res.status).toBe(200);
    const [offset, ...more] = await offsetSamples();
    expect(more).toEqual([]);
    expect(offset).toBeGreaterThan(59.5);
    expect(offset).toBeLessThan(61);
    const snapshot = await snapshotOf({ url });
    expect(snapshot.clockOffset).toBe(offset);
    expect(clockCell(snapshot.clockOffset)).toMatch(/^\+60\.\d\ds$/);
  });

  it("ignores a malformed header and a caller without the token", async () => {
    await statusWith({ "x-ng-controller-time": String(Date.now() / 1000 + 5) });
    const [ahead] = await offsetSamples();
    expect(ahead).toBeLessThan(-4);
    await statusWith({ "x-ng-controller-time": "yesterday" });
    const unauthenticated = await fetch(`${url}/ng-control/v1/checkpoint/status`, {
      headers: { "x-ng-controller-time": String(Date.now() / 1000 - 1000) },
    });
    expect(unauthenticated.status).toBe(401);
    expect(await offsetSamples()).toEqual([ahead]);
  });
});

describe("gym top's clock column", () => {
  it("shows the largest offset of a scrape's workers, signed, or - before any control call", () => {
    const samples = parsePrometheus(
      [
        'gym_clock_offset_seconds{server="a",worker="0"} 0.012',
        'gym_clock_offset_seconds{server="a",worker="1"} -2.014',
      ].join("\n"),
    );
    expect(clockOffsetOf(samples)).toBe(-2.014);
    expect(clockCell(clockOffsetOf(samples))).toBe("-2.01s");
    expect(clockCell(clockOffsetOf([]))).toBe("-");
    expect(clockCell(0.004)).toBe("+0.00s");
  });
});
