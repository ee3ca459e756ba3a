/**
 * What a failed `gym serve` start prints: only this start's log lines (a server's log is
 * appended to across runs), and advice that fits the failure (a health timeout points at
 * `--health-timeout`).
 */
import { appendFileSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { lastLines, startFailureReport } from "#sdk/cli/supervisor.js";

const temp = mkdtempSync(path.join(tmpdir(), "gym-supervisor-report-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

describe("lastLines", () => {
  it("reads only the lines written from the given offset on", () => {
    const log = path.join(temp, "server.log");
    writeFileSync(log, "=== gym serve: starting s (run 1) ===\nold line 1\nold line 2\n");
    appendFileSync(log, "=== gym serve: starting s (run 2) ===\n");
    const from = statSync(log).size;
    appendFileSync(log, "new line 1\nnew line 2\n");
    expect(lastLines(log, 20, from)).toEqual(["new line 1", "new line 2"]);
    expect(lastLines(log, 1, from)).toEqual(["new line 2"]);
    expect(lastLines(log, 20)).toHaveLength(6);
  });

  it("returns nothing for a file that cannot be read, or nothing written since", () => {
    expect(lastLines(path.join(temp, "missing.log"), 20)).toEqual([]);
    const log = path.join(temp, "quiet.log");
    writeFileSync(log, "earlier run\n");
    expect(lastLines(log, 20, statSync(log).size)).toEqual([]);
  });
});

describe("startFailureReport", () => {
  const exited = {
    name: "broken",
    log: "/logs/broken.log",
    lines: ["boom"],
    reason: "exited with code 1 during startup",
    timedOut: false,
  };
  const slow = {
    name: "slow",
    log: "/logs/slow.log",
    lines: [],
    reason: "did not answer GET http://127.0.0.1:1/health within 30 s",
    timedOut: true,
  };

  it("says to fix a server that exited, with its log lines", () => {
    const report = startFailureReport([exited], 1, 30_000, "gym");
    expect(report.message).toMatch(/server broken failed to start: it exited with code 1/);
    expect(report.message).toMatch(/last 1 lines of \/logs\/broken\.log:\n {2}\| boom/);
    expect(report.message).toMatch(/stopped the 1 other server started with it/);
    expect(report.hint).toBe("fix the server (its log is above) and run `gym serve` again");
    expect(report.hint).not.toMatch(/--health-timeout/);
  });

  it("names gym as it was invoked", () => {
    expect(startFailureReport([exited], 0, 30_000, "npx gym").hint).toBe(
      "fix the server (its log is above) and run `npx gym serve` again",
    );
  });

  it("points a server that never answered at --health-timeout", () => {
    const report = startFailureReport([slow], 0, 30_000, "gym");
    expect(report.message).toMatch(/ {2}\(empty\)/);
    expect(report.hint).toMatch(
      /if slow is only slow to start, give it longer with --health-timeout 60s/,
    );
    expect(startFailureReport([exited, slow], 0, 45_000, "gym").hint).toMatch(
      /--health-timeout 90s/,
    );
  });

  it("names a port another process holds, and says to stop it or pick another", () => {
    const busy = {
      ...exited,
      url: "http://127.0.0.1:8101",
      lines: ["Error: listen EADDRINUSE: address already in use 127.0.0.1:8101"],
    };
    const report = startFailureReport([busy], 0, 30_000, "gym");
    expect(report.message).toMatch(
      /server broken failed to start: it exited with code 1 during startup: port 8101 is already in use by another process/,
    );
    expect(report.hint).toBe(
      "stop the process holding port 8101 (server broken), or give the server another port in the deployment file (port: 0 picks a free one), then run `gym serve` again",
    );
  });
});
