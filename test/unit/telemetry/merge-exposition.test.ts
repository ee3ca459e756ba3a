import { describe, expect, it } from "vitest";
import { mergeExpositions } from "#sdk/telemetry/merge-exposition.js";

const COORDINATOR = [
  "# HELP gym_participant_phase 1 for the participant's current phase",
  "# TYPE gym_participant_phase gauge",
  'gym_participant_phase{phase="idle"} 1',
  "",
].join("\n");

const worker = (count: number): string =>
  [
    "# HELP requests_total Requests served",
    "# TYPE requests_total counter",
    `requests_total{route="/a"} ${count}`,
    `requests_total{} ${count * 2}`,
    "# HELP up Whether it serves",
    "# TYPE up gauge",
    "up 1",
    "",
  ].join("\n");

describe("mergeExpositions", () => {
  it("labels every sample with its process and keeps each family together, once", () => {
    const merged = mergeExpositions([
      { worker: "coordinator", text: COORDINATOR },
      { worker: "0", text: worker(3) },
      { worker: "1", text: worker(5) },
    ]);
    expect(merged.split("\n")).toEqual([
      "# HELP gym_participant_phase 1 for the participant's current phase",
      "# TYPE gym_participant_phase gauge",
      'gym_participant_phase{worker="coordinator",phase="idle"} 1',
      "",
      "# HELP requests_total Requests served",
      "# TYPE requests_total counter",
      'requests_total{worker="0",route="/a"} 3',
      'requests_total{worker="0"} 6',
      'requests_total{worker="1",route="/a"} 5',
      'requests_total{worker="1"} 10',
      "",
      "# HELP up Whether it serves",
      "# TYPE up gauge",
      'up{worker="0"} 1',
      'up{worker="1"} 1',
      "",
    ]);
  });

  it("leaves label values alone, whatever they hold", () => {
    const text = '# TYPE m counter\nm{a="x} {y"} 1\n';
    expect(mergeExpositions([{ worker: "0", text }])).toBe(
      '# TYPE m counter\nm{worker="0",a="x} {y"} 1\n',
    );
  });

  it("is empty when no process reports", () => {
    expect(mergeExpositions([])).toBe("");
    expect(mergeExpositions([{ worker: "0", text: "" }])).toBe("");
  });

  it("keeps a sample's own worker label rather than adding a second one", () => {
    const own = [
      "# TYPE jobs gauge",
      'jobs{queue="q",worker="w7"} 2',
      'jobs{note="worker=\\"x\\""} 1',
      "",
    ];
    const merged = mergeExpositions([{ worker: "0", text: own.join("\n") }]);
    expect(merged.split("\n")).toEqual([
      "# TYPE jobs gauge",
      'jobs{queue="q",worker="w7"} 2',
      'jobs{worker="0",note="worker=\\"x\\""} 1',
      "",
    ]);
  });
});
