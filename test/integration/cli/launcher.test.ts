/**
 * The pieces `gym serve` is made of, in-process: building servers from module exports,
 * starting one from a resolved deployment, planning a run (ports, state checks), and stopping
 * process groups (with real `sleep`-like children).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { planServe } from "#sdk/cli/launcher.js";
import { serverEnv, supervisorEnv, takeSupervisorSecrets } from "#sdk/cli/session-secrets.js";
import { planFileText } from "#sdk/cli/supervisor.js";
import { CliError, UsageError, type Io } from "#sdk/cli/output.js";
import { chooseFreePorts } from "#sdk/cli/ports.js";
import { isGroupAlive, isProcessAlive, stopGroups } from "#sdk/cli/processes.js";
import { importServerModule, isMainModule, startFromDeployment } from "#sdk/cli/run-server.js";
import { ServerModuleError, buildServer, type RunningServer } from "#sdk/server/serve.js";
import { writeState, type RunState } from "#sdk/cli/state-file.js";
import { ResolvedDeploymentSchema } from "#sdk/wire/deployment.js";

const FIXTURES = fileURLToPath(new URL("../../fixtures/", import.meta.url));
const SERVERS = path.join(FIXTURES, "servers");
const GOOD = path.join(FIXTURES, "deployments", "good.yaml");

const temp = mkdtempSync(path.join(tmpdir(), "gym-launcher-"));
const children: ChildProcess[] = [];
const servers: RunningServer[] = [];

afterEach(async () => {
  for (const child of children.splice(0)) {
    if (child.pid !== undefined) {
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {
        // already gone
      }
    }
  }
  await Promise.all(servers.splice(0).map((server) => server.stop()));
});

afterAll(() => rmSync(temp, { recursive: true, force: true }));

function io(command?: string): Io {
  return { out: () => {}, err: () => {}, cwd: temp, env: {}, ...(command ? { command } : {}) };
}

describe("server modules", () => {
  it("builds a server from a class default export and from a factory", async () => {
    const options = { name: "s", logLevel: "silent" };
    const fromClass = await buildServer(
      await importServerModule(path.join(SERVERS, "episodes-resources.ts")),
      options,
    );
    const fromFactory = await buildServer(
      await importServerModule(path.join(SERVERS, "echo-backend.ts")),
      options,
    );
    for (const server of [fromClass, fromFactory]) {
      expect(typeof server.listen).toBe("function");
      expect(typeof server.close).toBe("function");
    }
  });

  it("refuses a module without a usable default export, saying what to export", async () => {
    const file = path.join(temp, "no-default.mjs");
    writeFileSync(file, "export const server = 1;\n");
    await expect(importServerModule(file)).rejects.toThrow(ServerModuleError);
    await expect(importServerModule(file)).rejects.toThrow(/export default your server class/);
  });

  it("refuses a factory that returns something other than a server", async () => {
    await expect(buildServer(() => ({}) as never, { name: "s" })).rejects.toThrow(
      /did not return a server/,
    );
  });

  it("propagates a server that fails while being built", async () => {
    const exported = await importServerModule(path.join(SERVERS, "exit-at-startup.ts"));
    await expect(buildServer(exported, { name: "boom", logLevel: "silent" })).rejects.toThrow(
      /refuses to start/,
    );
  });

  it("starts the named server of a resolved deployment, with its config and the deployment", async () => {
    const [port = 0] = Object.values(
      await chooseFreePorts([{ name: "counter", host: "127.0.0.1" }]),
    );
    const deployment = ResolvedDeploymentSchema.parse({
      checkpoint: { enabled: true, control_auth_token: "t", lease_grace_seconds: 600 },
      servers: {
        counter: {
          kind: "resources",
          url: `http://127.0.0.1:${port}`,
          host: "127.0.0.1",
          port,
          num_workers: 1,
          config: { episodes: ["only-one"] },
        },
      },
    });
    const file = path.join(temp, "resolved.json");
    writeFileSync(file, JSON.stringify(deployment));
    const { pino } = await import("pino");
    const running = await startFromDeployment({
      deploymentFile: file,
      name: "counter",
      entrypoint: path.join(SERVERS, "episodes-resources.ts"),
      logger: pino({ level: "silent" }),
    });
    servers.push(running);
    expect(running.address.port).toBe(port);
    const episodes = await (await fetch(`${running.address.url}/episodes`)).json();
    expect(episodes).toEqual({ live: ["only-one"], pending: [] });
    const status = await fetch(`${running.address.url}/ng-control/v1/checkpoint/status`, {
      headers: { authorization: "Bearer t" },
    });
    expect(status.status).toBe(200);
  });

  it("knows a module imported by another is not the main module", () => {
    expect(isMainModule(import.meta.url)).toBe(false);
  });
});

describe("planning a run", () => {
  function copyGood(): string {
    const dir = mkdtempSync(path.join(temp, "plan-"));
    const file = path.join(dir, "deployment.yaml");
    writeFileSync(file, readFileSync(GOOD, "utf8").replaceAll("../servers/", `${SERVERS}/`));
    return file;
  }

  it("chooses distinct free ports and writes the resolved deployment next to the state file", async () => {
    const file = copyGood();
    const plan = await planServe({ deploymentFile: file }, io());
    const gymDir = path.join(path.dirname(file), ".gym");
    expect(plan.state_file).toBe(path.join(gymDir, "run.json"));
    expect(plan.logs_dir).toBe(path.join(gymDir, "logs"));
    const resolved = ResolvedDeploymentSchema.parse(
      JSON.parse(readFileSync(plan.resolved_file, "utf8")),
    );
    const ports = Object.values(resolved.servers).map((server) => server.port);
    expect(new Set(ports).size).toBe(2);
    expect(ports.every((port) => port > 0)).toBe(true);
    expect(plan.servers.map((server) => server.name)).toEqual(["counter", "echo"]);
    expect(existsSync(plan.state_file)).toBe(false);
  });

  it("keeps a configured session secret out of every file and hands it to its server alone", async () => {
    const secret = "planned-session-secret-0123456789";
    const file = copyGood();
    writeFileSync(
      file,
      readFileSync(file, "utf8").replace(
        "    kind: resources\n",
        '    kind: resources\n    session_secret: "${GYM_TEST_SESSION_SECRET}"\n',
      ),
    );
    const plan = await planServe(
      { deploymentFile: file },
      { ...io(), env: { GYM_TEST_SESSION_SECRET: secret } },
    );
    expect(plan.session_secrets).toEqual({ counter: secret });
    expect(readFileSync(plan.resolved_file, "utf8")).not.toContain(secret);
    expect(planFileText(plan)).not.toContain(secret);
    expect(JSON.parse(planFileText(plan))).not.toHaveProperty("session_secrets");
    // The detached supervisor gets them in its environment and takes them out again.
    const supervisor = supervisorEnv(
      { PATH: "/bin", GYM_SESSION_SECRET: "inherited" },
      {
        counter: secret,
      },
    );
    expect(supervisor.GYM_SESSION_SECRET).toBeUndefined();
    expect(takeSupervisorSecrets(supervisor)).toEqual({ counter: secret });
    expect(supervisor).toEqual({ PATH: "/bin" });
    // Each server's process gets its own secret only; an inherited one never leaks through.
    expect(serverEnv({ PATH: "/bin" }, secret)).toEqual({
      PATH: "/bin",
      GYM_SESSION_SECRET: secret,
    });
    expect(serverEnv({ PATH: "/bin", GYM_SESSION_SECRET: "inherited" }, undefined)).toEqual({
      PATH: "/bin",
    });
  });

  it("refuses to start over a run that is still alive", async () => {
    const file = copyGood();
    const plan = await planServe({ deploymentFile: file }, io());
    const state: RunState = {
      version: 1,
      deployment_file: file,
      resolved_file: plan.resolved_file,
      deployment: plan.deployment,
      servers: {
        counter: {
          name: "counter",
          kind: "resources",
          url: "http://127.0.0.1:1",
          pid: process.pid,
          pgid: process.pid,
          log: "x",
          supervisor_pid: null,
          started_at: "t",
        },
      },
    };
    writeState(plan.state_file, state);
    await expect(planServe({ deploymentFile: file }, io())).rejects.toThrow(CliError);
    await expect(planServe({ deploymentFile: file }, io())).rejects.toThrow(/already running/);
    // --only: the restarted server keeps its known port; the others must be running.
    await expect(planServe({ deploymentFile: file, only: ["counter"] }, io())).rejects.toThrow(
      /server counter is already running/,
    );
    // --only echo: counter runs, so only echo is planned and counter is kept.
    const only = await planServe({ deploymentFile: file, only: ["echo"] }, io());
    expect(Object.keys(only.keep)).toEqual(["counter"]);
  });

  it("names gym as invoked in its advice, and in the plan the supervisor gets", async () => {
    const file = copyGood();
    const plan = await planServe({ deploymentFile: file }, io("npx gym"));
    expect(plan.command).toBe("npx gym");
    expect((await planServe({ deploymentFile: file }, io())).command).toBe("gym");
    await expect(
      planServe({ deploymentFile: file, only: ["echo"] }, io("npm run gym --")),
    ).rejects.toMatchObject({
      hint: expect.stringMatching(/or start everything with `npm run gym -- serve \S+\.yaml`$/),
    });
  });

  it("refuses --only when another server of the deployment is not running", async () => {
    const file = copyGood();
    await expect(planServe({ deploymentFile: file, only: ["echo"] }, io())).rejects.toThrow(
      /server counter is not running .*, and --only does not start it/,
    );
  });

  it("restarts a subset on the ports the others know, keeping the running ones", async () => {
    const file = copyGood();
    const plan = await planServe({ deploymentFile: file }, io());
    const echoPort = plan.deployment.servers.echo?.port;
    const entry = (name: string, pid: number) => ({
      name,
      kind: plan.deployment.servers[name]?.kind ?? "backend",
      url: plan.deployment.servers[name]?.url ?? "",
      pid,
      pgid: pid,
      log: "x",
      supervisor_pid: null,
      started_at: "t",
    });
    // counter alive (this process), echo dead (a pid that cannot exist).
    writeState(plan.state_file, {
      version: 1,
      deployment_file: file,
      resolved_file: plan.resolved_file,
      deployment: plan.deployment,
      servers: { counter: entry("counter", process.pid), echo: entry("echo", 2 ** 22 + 7) },
    });
    const again = await planServe({ deploymentFile: file, only: ["echo"] }, io());
    expect(again.servers.map((server) => server.name)).toEqual(["echo"]);
    expect(again.deployment.servers.echo?.port).toBe(echoPort);
    expect(Object.keys(again.keep)).toEqual(["counter"]);
  });

  it("refuses --only naming a server the deployment does not define (bad usage)", async () => {
    const file = copyGood();
    await expect(planServe({ deploymentFile: file, only: ["nope"] }, io())).rejects.toThrow(
      UsageError,
    );
    await expect(planServe({ deploymentFile: file, only: ["countr"] }, io())).rejects.toThrow(
      /--only names countr, .* \(did you mean 'counter'\?\)/,
    );
  });

  it("refuses a fixed port another process listens on, naming the server and the port", async () => {
    const other = createServer();
    await new Promise<void>((resolve) => other.listen(0, "127.0.0.1", resolve));
    const { port } = other.address() as AddressInfo;
    try {
      const file = copyGood();
      writeFileSync(
        file,
        readFileSync(file, "utf8").replace(
          "    kind: backend\n",
          `    kind: backend\n    port: ${port}\n`,
        ),
      );
      const failure = await planServe({ deploymentFile: file }, io()).then(
        () => null,
        (error: unknown) => error,
      );
      expect(failure).toBeInstanceOf(CliError);
      expect((failure as CliError).message).toMatch(
        new RegExp(
          `server echo: port ${port} on 127\\.0\\.0\\.1 is already in use by another process`,
        ),
      );
      expect((failure as CliError).hint).toMatch(
        /stop the process listening there .*or give echo another port/,
      );
      // Nothing was planned: no resolved deployment was written.
      expect(existsSync(path.join(path.dirname(file), ".gym"))).toBe(false);
    } finally {
      await new Promise((resolve) => other.close(resolve));
    }
  });
});

describe("process groups", () => {
  /** A detached Node child (its own group) that optionally ignores SIGTERM. */
  function child(ignoreTerm: boolean): ChildProcess {
    // The child says "ready" once its handler is installed: the test waits for that line.
    const script = ignoreTerm
      ? "process.on('SIGTERM', () => {}); process.stdout.write('ready\\n'); setInterval(() => {}, 1000);"
      : "process.stdout.write('ready\\n'); setInterval(() => {}, 1000);";
    const proc = spawn(process.execPath, ["-e", script], {
      detached: true,
      stdio: ["ignore", "pipe", "ignore"],
    });
    children.push(proc);
    return proc;
  }

  async function started(proc: ChildProcess): Promise<number> {
    const pid = proc.pid as number;
    await new Promise<void>((resolve, reject) => {
      proc.stdout?.once("data", () => resolve());
      proc.once("exit", () => reject(new Error("the child exited before it was ready")));
    });
    proc.stdout?.destroy();
    return pid;
  }

  it("stops a group with SIGTERM, and SIGKILLs one that ignores it after the grace", async () => {
    const polite = await started(child(false));
    const stubborn = await started(child(true));
    const outcomes = await stopGroups([polite, stubborn], { graceMs: 500 });
    expect(outcomes).toEqual([
      { pgid: polite, outcome: "term" },
      { pgid: stubborn, outcome: "kill" },
    ]);
    expect(isGroupAlive(polite)).toBe(false);
    expect(isProcessAlive(stubborn)).toBe(false);
  });

  it("kills every group at once with kill", async () => {
    const a = await started(child(true));
    const b = await started(child(true));
    // With a 60 s grace, only an immediate SIGKILL lets this finish within the test timeout.
    const outcomes = await stopGroups([a, b], { graceMs: 60_000, kill: true });
    expect(outcomes.map((o) => o.outcome)).toEqual(["kill", "kill"]);
  });

  it("reports a group that is not running as gone", async () => {
    expect(await stopGroups([2 ** 22 + 11], { graceMs: 100 })).toEqual([
      { pgid: 2 ** 22 + 11, outcome: "gone" },
    ]);
  });
});
