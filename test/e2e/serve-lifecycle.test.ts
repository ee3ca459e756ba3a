/**
 * The shell walkthrough with real processes: `gym serve --detach`, `gym ckpt status`,
 * `gym ckpt checkpoint`, `gym ckpt inspect`, a crash with `gym stop --kill`, a restart and
 * `gym ckpt restore`, then a graceful `gym stop`.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { gym, isGone, killEverything, stateServers, waitFor, writeDeployment } from "./helpers.js";

let dir: string;
let deployment: string;
let stateFile: string;
let checkpointDir: string;

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), "gym-e2e-lifecycle-"));
  deployment = writeDeployment(dir, "good.yaml");
  stateFile = path.join(dir, ".gym", "run.json");
  checkpointDir = path.join(dir, "checkpoints", "c1");
});

afterAll(async () => {
  await killEverything(dir, [stateFile]);
  rmSync(dir, { recursive: true, force: true });
});

describe.sequential("serve, checkpoint, crash, restore", { timeout: 90_000 }, () => {
  it("gym serve --detach starts every server in its own process group and records the run", async () => {
    const served = await gym(["serve", deployment, "--detach"]);
    expect(served.code, served.stderr).toBe(0);
    expect(served.stdout).toMatch(/NAME\s+KIND\s+URL\s+SWAGGER\s+PID/);
    expect(served.stdout).toMatch(
      /counter\s+resources\s+http:\/\/127\.0\.0\.1:\d+\s+http:\/\/127\.0\.0\.1:\d+\/docs\s+\d+/,
    );
    expect(served.stdout).toMatch(/echo\s+backend/);

    const servers = stateServers(stateFile);
    expect(servers.map((server) => server.name).sort()).toEqual(["counter", "echo"]);
    for (const server of servers) {
      expect(server.pgid).toBe(server.pid);
      expect(isGone(server.pid)).toBe(false);
      expect(server.supervisor_pid).not.toBeNull();
      const health = await fetch(`${server.url}/health`);
      expect(health.status).toBe(200);
      expect(await health.json()).toEqual({ status: "ok", name: server.name });
      expect(existsSync(path.join(dir, ".gym", "logs", `${server.name}.log`))).toBe(true);
    }
    expect(existsSync(path.join(dir, ".gym", "deployment.resolved.json"))).toBe(true);
    // node_args go to that server's Node.js process, before its script, and to no other.
    const cmdline = (name: string) => {
      const pid = servers.find((server) => server.name === name)?.pid;
      return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    };
    expect(cmdline("echo")[1]).toBe("--max-old-space-size=256");
    expect(cmdline("counter")).not.toContain("--max-old-space-size=256");
  });

  it("gym ckpt status --json finds the run next to --deployment", async () => {
    const status = await gym(["ckpt", "status", "--deployment", deployment, "--json"]);
    expect(status.code, status.stderr).toBe(0);
    const json = JSON.parse(status.stdout) as {
      servers: Record<string, { kind: string; phase: string }>;
      not_participants: string[];
    };
    expect(json.servers.counter).toMatchObject({ kind: "resources", phase: "idle" });
    expect(json.not_participants).toEqual(["echo"]);
  });

  it("gym ckpt checkpoint writes a checkpoint that gym ckpt inspect verifies", async () => {
    const checkpoint = await gym([
      "ckpt",
      "checkpoint",
      "--dir",
      checkpointDir,
      "--state",
      stateFile,
    ]);
    expect(checkpoint.code, checkpoint.stderr).toBe(0);
    expect(checkpoint.stdout).toMatch(
      /STAGE\s+TIME\nprepare\s+\S+.*\ncommit\s+\S+.*\nresume\s+\S+.*\ntotal/,
    );
    expect(checkpoint.stdout).toMatch(/\(3 episode\(s\)\); every participant resumed/);

    const inspected = await gym(["ckpt", "inspect", checkpointDir]);
    expect(inspected.code, inspected.stderr).toBe(0);
    expect(inspected.stdout).toMatch(/1 participant\(s\), 3 episode\(s\), every digest verified/);
    for (const [episode, step] of [
      ["task-1", 1],
      ["task-2", 2],
      ["task-3", 3],
    ] as const) {
      expect(inspected.stdout).toMatch(
        new RegExp(`${episode}\\s+resources/counter\\s+\\{"step":${step},"turn":"tool_call"\\}`),
      );
    }
  });

  it("gym stop --kill kills every process group at once and keeps the logs", async () => {
    const servers = stateServers(stateFile);
    const pids = [
      ...servers.map((server) => server.pid),
      ...servers.map((s) => s.supervisor_pid ?? 0),
    ];
    const stopped = await gym(["stop", "--kill", "--state", stateFile]);
    expect(stopped.code, stopped.stderr).toBe(0);
    expect(stopped.stdout).toMatch(/counter\s+\d+\s+killed \(SIGKILL\)/);
    expect(await waitFor(() => pids.every(isGone), 10_000)).toBe(true);
    expect(existsSync(stateFile)).toBe(false);
    for (const server of servers) {
      expect(readFileSync(server.log, "utf8")).toMatch(/"msg":"listening"/);
    }
  });

  it("after a restart, gym ckpt restore --all continues every episode as its next attempt", async () => {
    const served = await gym(["serve", deployment, "--detach"]);
    expect(served.code, served.stderr).toBe(0);
    const restored = await gym([
      "ckpt",
      "restore",
      "--id",
      "restore-1",
      "--dir",
      checkpointDir,
      "--all",
      "--resume",
      "--state",
      stateFile,
    ]);
    expect(restored.code, restored.stderr).toBe(0);
    expect(restored.stdout).toMatch(
      /restored 3 episode\(s\) as their next attempts: task-1-a1, task-2-a1, task-3-a1/,
    );
    const counter = stateServers(stateFile).find((server) => server.name === "counter");
    const episodes = (await (await fetch(`${counter?.url}/episodes`)).json()) as {
      pending: string[];
    };
    expect(episodes.pending).toEqual(["task-1-a1", "task-2-a1", "task-3-a1"]);
  });

  it("gym stop stops every server gracefully and removes the state file", async () => {
    const servers = stateServers(stateFile);
    const stopped = await gym(["stop", "--state", stateFile]);
    expect(stopped.code, stopped.stderr).toBe(0);
    expect(stopped.stdout).toMatch(/counter\s+\d+\s+stopped \(SIGTERM\)/);
    expect(stopped.stdout).toMatch(/echo\s+\d+\s+stopped \(SIGTERM\)/);
    expect(await waitFor(() => servers.every((server) => isGone(server.pid)), 10_000)).toBe(true);
    expect(existsSync(stateFile)).toBe(false);
    const log = readFileSync(path.join(dir, ".gym", "logs", "counter.log"), "utf8");
    expect(log.match(/=== gym serve: starting counter/g)).toHaveLength(2);
    expect(log).toMatch(/"signal":"SIGTERM","msg":"stopping"/);
  });
});
