/**
 * The conformance kit against real servers: the reference counter (exported) and weather
 * (stateless, replayable verify) pass every requirement that applies to them, and each
 * deliberately broken participant fails exactly the requirement its bug breaks. All runs share
 * one beforeAll and run at once: each is a few seconds of waiting on HTTP.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runConformance, type ConformanceReport } from "#sdk/conformance/runner.js";
import type { Server } from "#sdk/server/server.js";
import CounterServer from "../../../reference-servers/counter/src/index.js";
import WeatherServer from "../../../reference-servers/weather/src/index.js";
import { brokenParticipants, faultProxy } from "../../fixtures/broken-participants.js";

const TOKEN = "conformance-test-token";
type Listening = Pick<Server, "listen" | "close">;
const closers: (() => Promise<void>)[] = [];

async function listen(server: Listening): Promise<string> {
  const { url } = await server.listen({ port: 0 });
  closers.push(() => server.close());
  return url;
}

function checkpoint(leaseGraceSeconds = 600) {
  return { enabled: true, control_auth_token: TOKEN, lease_grace_seconds: leaseGraceSeconds };
}

const failed = (report: ConformanceReport): string[] =>
  report.results.filter((r) => r.result === "fail").map((r) => r.id);
const reasons = (report: ConformanceReport): string =>
  report.results
    .filter((r) => r.result === "fail")
    .map((r) => `${r.id}: ${r.reason}`)
    .join("\n");

const faults = brokenParticipants();
const reports = new Map<string, ConformanceReport>();

beforeAll(async () => {
  // A short grace on the reference servers, so the lease expiry is checked, not skipped.
  const counter = await listen(
    new CounterServer({ name: "counter", checkpoint: checkpoint(2), logLevel: "silent" }),
  );
  const weather = await listen(
    new WeatherServer({ name: "weather", checkpoint: checkpoint(2), logLevel: "silent" }),
  );
  const broken = await Promise.all(
    faults.map(async (fault) => {
      const inner = await listen(
        new CounterServer({ name: "counter", checkpoint: checkpoint(), logLevel: "silent" }),
      );
      const proxy = await faultProxy(inner, fault);
      closers.push(proxy.close);
      return [fault.bug, proxy.url] as const;
    }),
  );
  const runs = [["counter", counter] as const, ["weather", weather] as const, ...broken];
  await Promise.all(
    runs.map(async ([name, url]) => {
      reports.set(name, await runConformance({ url, token: TOKEN, seed: 7 }));
    }),
  );
}, 120_000);

afterAll(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

describe("the reference servers conform", () => {
  it.each(["counter", "weather"])("%s passes every requirement that applies to it", (name) => {
    const report = reports.get(name) as ConformanceReport;
    expect(failed(report), reasons(report)).toEqual([]);
    expect(report.passed).toBe(true);
    // Skips are for other modes only: nothing that applies is left untested.
    for (const result of report.results.filter((r) => r.result === "skip")) {
      expect(result.reason).toMatch(/^only |--launch/);
    }
  });
});

describe("each broken participant fails the requirement its bug breaks, and only that one", () => {
  it.each(faults.map((fault) => [fault.bug, fault.fails] as const))("%s: %s", (bug, fails) => {
    const report = reports.get(bug) as ConformanceReport;
    expect(failed(report), reasons(report)).toEqual([fails]);
    expect(report.passed).toBe(false);
  });
});
