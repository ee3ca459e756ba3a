/**
 * The conformance kit's crash profile with `--launch`: the kit starts the reference counter as
 * a process, kills it and starts it again. The counter passes every crash requirement; a counter
 * that installs half a restore fails exactly the all-or-nothing one; without `--launch` each
 * crash requirement is skipped, saying why, never passed.
 */
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runConformance, type ConformanceReport } from "#sdk/conformance/runner.js";
import CounterServer from "../../../reference-servers/counter/src/index.js";

const TOKEN = "conformance-launch-token";
const FIXTURE = path.resolve(import.meta.dirname, "../../fixtures/broken-participants-launch.ts");
const command = (extra = ""): string =>
  `exec ${JSON.stringify(process.execPath)} --import tsx ${JSON.stringify(FIXTURE)} --port {port} --token {token}${extra}`;

const failed = (report: ConformanceReport): string[] =>
  report.results.filter((r) => r.result === "fail").map((r) => r.id);
const reasons = (report: ConformanceReport): string =>
  report.results.map((r) => `${r.id}: ${r.result} ${r.reason ?? ""}`).join("\n");

const reports = new Map<string, ConformanceReport>();
let closeCounter: (() => Promise<void>) | null = null;

beforeAll(async () => {
  const counter = new CounterServer({
    name: "counter",
    checkpoint: { enabled: true, control_auth_token: TOKEN },
    logLevel: "silent",
  });
  const { url } = await counter.listen({ port: 0 });
  closeCounter = () => counter.close();
  const runs = await Promise.all([
    runConformance({ launch: { command: command() }, token: TOKEN, only: ["crash"] }),
    runConformance({
      launch: { command: command(" --fault half-restore") },
      token: TOKEN,
      only: ["crash"],
    }),
    runConformance({ url, token: TOKEN, only: ["crash"] }),
  ]);
  reports.set("counter", runs[0]);
  reports.set("half-restore", runs[1]);
  reports.set("not launched", runs[2]);
}, 180_000);

afterAll(async () => {
  await closeCounter?.();
});

describe("the crash profile, with the server launched by the kit", () => {
  it("the reference counter passes every crash requirement, each in a fresh process", () => {
    const report = reports.get("counter") as ConformanceReport;
    expect(
      report.results.map((r) => [r.id, r.result]),
      reasons(report),
    ).toEqual([
      ["crash.restore.fresh-process", "pass"],
      ["crash.fencing.stale-after-restore", "pass"],
      ["crash.restore.all-or-nothing", "pass"],
      ["crash.restore.corrupt-then-good", "pass"],
    ]);
    expect(report.passed).toBe(true);
  });

  it("a counter installing half a restore fails the all-or-nothing requirement only", () => {
    const report = reports.get("half-restore") as ConformanceReport;
    expect(failed(report), reasons(report)).toEqual(["crash.restore.all-or-nothing"]);
    expect(report.results.find((r) => r.result === "fail")?.reason).toMatch(/installed/);
    expect(report.passed).toBe(false);
  });

  it("without --launch each crash requirement is skipped with why, never passed", () => {
    const report = reports.get("not launched") as ConformanceReport;
    expect(report.results.length).toBe(4);
    for (const result of report.results) {
      expect(result.result).toBe("skip");
      expect(result.reason).toMatch(/--launch/);
    }
  });
});
