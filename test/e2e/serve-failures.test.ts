/**
 * `gym serve` when things go wrong, and its other modes, with real processes: a bad deployment
 * file starts nothing; a server that exits at startup or never answers fails the whole start and
 * stops the others; the default foreground mode streams logs and stops everything on Ctrl-C;
 * a server module runs on its own through `serveMain`.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chooseFreePorts } from "#sdk/cli/ports.js";
import { writeState, type RunState } from "#sdk/cli/state-file.js";
import type { ResolvedDeployment } from "#sdk/wire/deployment.js";
import {
  CLI,
  FIXTURES,
  REPO,
  gym,
  isGone,
  killEverything,
  processesMentioning,
  stateServers,
  waitFor,
  writeDeployment,
} from "./helpers.js";

let root: string;

function caseDir(): string {
  return mkdtempSync(path.join(root, "case-"));
}

beforeAll(() => {
  root = mkdtempSync(path.join(tmpdir(), "gym-e2e-failures-"));
});

afterAll(async () => {
  const stateFiles = readdirSync(root)
    .map((entry) => path.join(root, entry, ".gym", "run.json"))
    .filter((file) => existsSync(file));
  await killEverything(root, stateFiles);
  rmSync(root, { recursive: true, force: true });
});

describe("gym serve failures", { timeout: 90_000 }, () => {
  it("a bad deployment file starts nothing and names the line", async () => {
    const dir = caseDir();
    const deployment = writeDeployment(dir, "bad-kind.yaml");
    const served = await gym(["serve", deployment, "--detach"]);
    expect(served.code).toBe(1);
    expect(served.stderr).toContain(`${deployment}:6: bad kind "database" for server echo`);
    expect(served.stderr).toMatch(/nothing was started/);
    expect(served.stderr).toMatch(/what to do: fix what each line above names/);
    expect(existsSync(path.join(dir, ".gym"))).toBe(false);
    expect(processesMentioning(dir)).toEqual([]);
  });

  it("a server exiting at startup fails the start with its log lines and stops the others", async () => {
    const dir = caseDir();
    const deployment = writeDeployment(dir, "failing-startup.yaml");
    const served = await gym(["serve", deployment, "--detach"]);
    expect(served.code).toBe(1);
    expect(served.stderr).toMatch(
      /server broken failed to start: it exited with code 1 during startup/,
    );
    expect(served.stderr).toMatch(/last \d+ lines of .*broken\.log:/);
    expect(served.stderr).toMatch(/\| fixture broken: startup line 3/);
    expect(served.stderr).toMatch(/refuses to start \(on purpose\)/);
    expect(served.stderr).toMatch(/stopped the 1 other server started with it/);
    expect(existsSync(path.join(dir, ".gym", "run.json"))).toBe(false);
    expect(await waitFor(() => processesMentioning(dir).length === 0, 10_000)).toBe(true);
  });

  it("a server that never answers GET /health fails the start after --health-timeout", async () => {
    const dir = caseDir();
    const deployment = writeDeployment(dir, "never-healthy.yaml");
    const served = await gym(["serve", deployment, "--detach", "--health-timeout", "4s"]);
    expect(served.code).toBe(1);
    expect(served.stderr).toMatch(
      /server silent failed to start: it did not answer GET http:\/\/127\.0\.0\.1:\d+\/health within 4 s/,
    );
    expect(served.stderr).toMatch(/\| fixture never-healthy: listening on .*, answering nothing/);
    expect(existsSync(path.join(dir, ".gym", "run.json"))).toBe(false);
    expect(await waitFor(() => processesMentioning(dir).length === 0, 10_000)).toBe(true);
  });
});

describe("gym ckpt against a deployment that is down", { timeout: 90_000 }, () => {
  it("exits 1 saying which server cannot be reached, not silently mid-retry", async () => {
    const dir = caseDir();
    const [port] = Object.values(await chooseFreePorts([{ name: "gone", host: "127.0.0.1" }]));
    const url = `http://127.0.0.1:${String(port)}`;
    const server = {
      kind: "resources",
      url,
      host: "127.0.0.1",
      port: port ?? 0,
      num_workers: 1,
      config: {},
    };
    const checkpoint = { enabled: true, control_auth_token: "t", lease_grace_seconds: 60 };
    const stateFile = path.join(dir, "run.json");
    const state: RunState = {
      version: 1,
      deployment_file: path.join(dir, "deployment.yaml"),
      resolved_file: path.join(dir, "deployment.resolved.json"),
      deployment: { checkpoint, servers: { gone: server } } as ResolvedDeployment,
      servers: {
        gone: {
          name: "gone",
          kind: "resources",
          url,
          pid: 999_999_999,
          pgid: 999_999_999,
          log: path.join(dir, "gone.log"),
          supervisor_pid: null,
          started_at: new Date().toISOString(),
        },
      },
    };
    writeState(stateFile, state);
    const status = await gym(["ckpt", "status", "--state", stateFile]);
    expect(status.code, status.stderr).toBe(1);
    expect(status.stderr).toMatch(/discovering the participants failed/);
    expect(status.stderr).toMatch(/gone\s+-\s+GET .*cannot connect/);
  });
});

describe("gym serve in the foreground, and a server on its own", { timeout: 90_000 }, () => {
  it("streams every log prefixed by its name and stops every group on Ctrl-C", async () => {
    const dir = caseDir();
    const deployment = writeDeployment(dir, "good.yaml");
    const stateFile = path.join(dir, ".gym", "run.json");
    const child = spawn(
      process.execPath,
      ["--import", "tsx", CLI, "serve", deployment, "--foreground"],
      {
        cwd: REPO,
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
    const exited = new Promise<number | null>((resolve) =>
      child.once("close", (code) => resolve(code)),
    );
    try {
      expect(await waitFor(() => /press Ctrl-C/.test(stdout), 30_000), stderr).toBe(true);
      const servers = stateServers(stateFile);
      expect(servers.map((server) => server.name).sort()).toEqual(["counter", "echo"]);
      expect(servers.every((server) => server.supervisor_pid === child.pid)).toBe(true);
      // Log lines are streamed as they are written, in a separate poll from the table.
      const streamed = (): boolean =>
        /^counter \| .*"msg":"listening"/m.test(stdout) &&
        /^echo {4}\| .*"msg":"listening"/m.test(stdout);
      expect(await waitFor(streamed, 10_000), stdout).toBe(true);
      child.kill("SIGINT");
      expect(await exited).toBe(0);
      expect(stderr).toMatch(/stopped 2 servers; logs kept/);
      expect(servers.every((server) => isGone(server.pid))).toBe(true);
      expect(existsSync(stateFile)).toBe(false);
      expect(existsSync(path.join(dir, ".gym", "logs", "counter.log"))).toBe(true);
    } finally {
      child.kill("SIGKILL");
    }
  });

  it("runs a server module on its own with serveMain", async () => {
    const dir = caseDir();
    const config = path.join(dir, "settings.yaml");
    writeFileSync(config, "episodes: [solo-1, solo-2]\n");
    const child = spawn(
      process.execPath,
      [
        "--import",
        "tsx",
        path.join(FIXTURES, "servers", "episodes-resources.ts"),
        "--port",
        "0",
        "--config",
        config,
        "--name",
        "solo",
        "--checkpoint-token",
        "solo-token",
      ],
      { cwd: REPO, stdio: ["ignore", "pipe", "pipe"] },
    );
    let stdout = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")));
    const exited = new Promise<number | null>((resolve) =>
      child.once("close", (code) => resolve(code)),
    );
    try {
      expect(
        await waitFor(() => /solo listening on http:\/\/127\.0\.0\.1:\d+/.test(stdout), 30_000),
      ).toBe(true);
      const url = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(stdout)?.[1];
      expect(await (await fetch(`${url}/episodes`)).json()).toEqual({
        live: ["solo-1", "solo-2"],
        pending: [],
      });
      const status = await fetch(`${url}/ng-control/v1/checkpoint/status`, {
        headers: { authorization: "Bearer solo-token" },
      });
      expect(await status.json()).toMatchObject({
        kind: "resources",
        instance: "solo",
        phase: "idle",
      });
      child.kill("SIGTERM");
      expect(await exited).toBe(0);
    } finally {
      child.kill("SIGKILL");
    }
  });
});
