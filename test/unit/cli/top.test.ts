import { describe, expect, it } from "vitest";
import { metricsPathOf, parsePrometheus, workRequests } from "#sdk/cli/top.js";
import type { ResolvedDeployment } from "#sdk/wire/deployment.js";

describe("parsePrometheus", () => {
  it("reads names, labels (escapes included) and values, skipping comments", () => {
    const samples = parsePrometheus(
      [
        "# HELP x help",
        "# TYPE x counter",
        'gym_participant_phase{server="a",phase="idle"} 1',
        'http_server_request_duration_seconds_count{http_route="/q\\"x"} 12',
        "plain 3.5",
        "",
      ].join("\n"),
    );
    expect(samples).toEqual([
      { name: "gym_participant_phase", labels: { server: "a", phase: "idle" }, value: 1 },
      {
        name: "http_server_request_duration_seconds_count",
        labels: { http_route: '/q"x' },
        value: 12,
      },
      { name: "plain", labels: {}, value: 3.5 },
    ]);
  });
});

describe("workRequests", () => {
  const scrape = (metricsRoute: string) =>
    parsePrometheus(
      [
        `http_server_request_duration_seconds_count{http_route="/ready",worker="0"} 40`,
        `http_server_request_duration_seconds_count{http_route="${metricsRoute}",worker="0"} 40`,
        `http_server_request_duration_seconds_count{http_route="/health"} 3`,
        `http_server_request_duration_seconds_count{http_route="/ng-control/v1/checkpoint/prepare"} 2`,
        `http_server_request_duration_seconds_count{http_route="/seed_session",worker="0"} 5`,
        `http_server_request_duration_seconds_count{http_route="/seed_session",worker="1"} 6`,
        `http_server_request_duration_seconds_count{http_route="unmatched"} 1`,
        `http_server_request_duration_seconds_sum{http_route="/seed_session"} 9`,
      ].join("\n"),
    );

  it("counts work routes only, across workers: polls, health and control calls are left out", () => {
    expect(workRequests(scrape("/metrics"), "/metrics")).toBe(12);
    // The metrics route the deployment configured is the one left out.
    expect(workRequests(scrape("/prom"), "/prom")).toBe(12);
  });

  it("is null when the scrape lists no request count, 0 when only polls were served", () => {
    expect(workRequests([], "/metrics")).toBeNull();
    expect(
      workRequests(
        parsePrometheus('http_server_request_duration_seconds_count{http_route="/ready"} 4'),
        "/metrics",
      ),
    ).toBe(0);
  });

  it("reads the metrics route from the deployment's telemetry block", () => {
    const base: ResolvedDeployment = { checkpoint: null, servers: {} };
    expect(metricsPathOf(base)).toBe("/metrics");
    const telemetry = { metrics: true, metrics_path: "/prom", request_log_level: "debug" } as const;
    expect(metricsPathOf({ ...base, telemetry })).toBe("/prom");
    expect(metricsPathOf({ ...base, telemetry: { ...telemetry, metrics: false } })).toBeNull();
  });
});
