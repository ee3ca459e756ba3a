import { describe, expect, it } from "vitest";
import { parsePrometheus } from "#sdk/cli/top.js";

describe("parsePrometheus", () => {
  it("reads names, labels (escapes included) and values, skipping comments", () => {
    const samples = parsePrometheus(
      [
        "# HELP x help",
        "# TYPE x counter",
        'gym_participant_phase{server="a",phase="idle"} 1',
        'http_server_request_duration_count{http_route="/q\\"x"} 12',
        "plain 3.5",
        "",
      ].join("\n"),
    );
    expect(samples).toEqual([
      { name: "gym_participant_phase", labels: { server: "a", phase: "idle" }, value: 1 },
      { name: "http_server_request_duration_count", labels: { http_route: '/q"x' }, value: 12 },
      { name: "plain", labels: {}, value: 3.5 },
    ]);
  });
});
