/**
 * `gym serve --term-grace`: an engine's preemption signals every process of the job at once.
 * With a term grace the servers keep serving after that SIGTERM until the controller's
 * checkpoint commits, then leave on their own (a backend once the participants are gone), so
 * the stop checkpoint finds them; `gym stop` still stops such a run at once.
 */
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { gym, isGone, killEverything, stateServers, waitFor, writeDeployment } from "./helpers.js";

let dir: string;
let deployment: string;
let stateFile: string;
const run = (args: readonly string[]) => gym(args, { compiled: true });

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), "gym-e2e-term-grace-"));
  deployment = writeDeployment(dir, "good.yaml");
  stateFile = path.join(dir, ".gym", "run.json");
});

afterAll(async () => {
  await killEverything(dir, [stateFile]);
  rmSync(dir, { recursive: true, force: true });
});

/** SIGTERM to every process of the run at once, as Slurm's requeue sends it. */
function preempt(): void {
  for (const server of stateServers(stateFile)) {
    process.kill(-server.pgid, "SIGTERM");
    if (server.supervisor_pid !== null) process.kill(server.supervisor_pid, "SIGTERM");
  }
}

describe.sequential("a term grace", { timeout: 90_000 }, () => {
  it("keeps the servers serving after SIGTERM until the checkpoint commits, then they leave", async () => {
    const served = await run(["serve", deployment, "--detach", "--term-grace", "60s"]);
    expect(served.code, served.stderr).toBe(0);
    const servers = stateServers(stateFile);
    const counter = servers.find((server) => server.name === "counter");
    const echo = servers.find((server) => server.name === "echo");
    if (counter === undefined || echo === undefined) throw new Error("servers missing");
    preempt();
    // Without a term grace nothing answers from here on.
    const prepared = await run(["ckpt", "prepare", "--id", "stop-1", "--state", stateFile]);
    expect(prepared.code, prepared.stderr).toBe(0);
    expect(isGone(counter.pid)).toBe(false);
    const checkpointDir = path.join(dir, "ckpt", "stop-1");
    const committed = await run([
      "ckpt",
      "commit",
      "--id",
      "stop-1",
      "--dir",
      checkpointDir,
      "--scope",
      "all",
      "--state",
      stateFile,
    ]);
    expect(committed.code, committed.stderr).toBe(0);
    expect(
      existsSync(path.join(checkpointDir, "gym", "resources", "counter", "manifest.json")),
    ).toBe(true);
    // Committed: the participant leaves on its own, long before the 60 s grace, and the
    // backend after it.
    expect(await waitFor(() => isGone(counter.pid), 20_000)).toBe(true);
    expect(await waitFor(() => isGone(echo.pid), 20_000)).toBe(true);
    expect(await waitFor(() => isGone(counter.supervisor_pid ?? 0), 20_000)).toBe(true);
  });

  it("gym stop stops a run started with a term grace at once (SIGINT)", async () => {
    const served = await run(["serve", deployment, "--detach", "--term-grace", "60s"]);
    expect(served.code, served.stderr).toBe(0);
    const pids = stateServers(stateFile).map((server) => server.pid);
    const stopped = await run(["stop", "--state", stateFile, "--grace", "30s"]);
    expect(stopped.code, stopped.stderr).toBe(0);
    expect(stopped.stdout).toMatch(/stopped \(SIGINT\)/);
    for (const pid of pids) expect(isGone(pid)).toBe(true);
  });
});
