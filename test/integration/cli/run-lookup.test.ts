/**
 * How the commands that act on a running deployment find it and report on it: the state file is
 * looked for in the working directory, then in each directory just below it (where
 * `gym serve sub/deployment.yaml` run from here puts it), then in each directory above it (as
 * git finds `.git`), and a server whose process is gone is named with its pid. The servers run in this process; the
 * state file names them with this process's pid, or with a pid that cannot exist for a dead one.
 */
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { chooseFreePorts } from "#sdk/cli/ports.js";
import { findStateFile } from "#sdk/cli/state-file.js";
import type { Server } from "#sdk/server/server.js";
import type { ResolvedDeployment } from "#sdk/wire/deployment.js";
import createEchoBackend from "../../fixtures/servers/echo-backend.js";
import EpisodesResourcesServer from "../../fixtures/servers/episodes-resources.js";
import { runGym, writeRunState, type GymOutcome } from "../../support/gym-in-process.js";

const TOKEN = "run-lookup-token";
/** Above pid_max (at most 2^22 on Linux): no process has it. */
const DEAD_PID = 2 ** 22 + 7;

const temp = mkdtempSync(path.join(tmpdir(), "gym-run-lookup-"));
const running: Server[] = [];
let runs = 0;
afterEach(async () => {
  await Promise.all(running.splice(0).map((server) => server.close()));
});
afterAll(() => rmSync(temp, { recursive: true, force: true }));

/**
 * A run whose state file is `<root>/.gym/run.json` (where `gym serve <root>/deployment.yaml`
 * writes it); `dead` servers are not started and carry a pid no process has.
 */
async function deploy(
  dead: readonly string[] = [],
  root = path.join(temp, `run-${++runs}`),
): Promise<{ root: string; stateFile: string }> {
  const ports = await chooseFreePorts([
    { name: "counter", host: "127.0.0.1" },
    { name: "echo", host: "127.0.0.1" },
  ]);
  const checkpoint = { enabled: true, control_auth_token: TOKEN, lease_grace_seconds: 600 };
  const entry = (kind: "resources" | "backend", port: number) => ({
    kind,
    url: `http://127.0.0.1:${port}`,
    host: "127.0.0.1",
    port,
    num_workers: 1,
    config: {},
  });
  const deployment: ResolvedDeployment = {
    checkpoint,
    servers: {
      counter: entry("resources", ports.counter ?? 0),
      echo: entry("backend", ports.echo ?? 0),
    },
  };
  const common = { checkpoint, deployment, logLevel: "silent" };
  if (!dead.includes("counter")) {
    const counter = new EpisodesResourcesServer({ name: "counter", config: {}, ...common });
    running.push(counter);
    await counter.listen({ port: ports.counter });
  }
  if (!dead.includes("echo")) {
    const echo = createEchoBackend({ name: "echo", ...common });
    running.push(echo);
    await echo.listen({ port: ports.echo });
  }
  const stateFile = path.join(root, ".gym", "run.json");
  const pidOf = (name: string): number => (dead.includes(name) ? DEAD_PID : process.pid);
  writeRunState(
    {
      stateFile,
      deploymentFile: path.join(root, "deployment.yaml"),
      resolvedFile: path.join(root, ".gym", "deployment.resolved.json"),
      logDir: path.join(root, ".gym", "logs"),
    },
    deployment,
    pidOf,
  );
  return { root, stateFile };
}

/** Runs `gym` in-process from `cwd`. */
async function gymIn(cwd: string, ...argv: string[]): Promise<GymOutcome> {
  return await runGym({ cwd }, argv);
}

function subdirectory(root: string): string {
  const dir = path.join(root, "src", "deep");
  mkdirSync(dir, { recursive: true });
  return dir;
}

describe("the state file is found in the working directory or a directory above it", () => {
  it("gym ckpt status run from a subdirectory finds the run, and says where it is", async () => {
    const { root, stateFile } = await deploy();
    const { code, out, err } = await gymIn(subdirectory(root), "ckpt", "status");
    expect(code, err).toBe(0);
    expect(out).toMatch(/^counter\s+resources\s+idle/m);
    expect(err).toContain(`gym: using the run in ${stateFile}`);
    // From the run's own directory there is nothing to say.
    const here = await gymIn(root, "ckpt", "status");
    expect(here.code, here.err).toBe(0);
    expect(here.err).not.toMatch(/using the run/);
  });

  it("gym top and gym stop find it from a subdirectory too", async () => {
    const { root } = await deploy(["counter", "echo"]);
    const dir = subdirectory(root);
    const top = await gymIn(dir, "top", "--once");
    expect(top.code, top.err).toBe(0);
    expect(top.out).toMatch(/^counter\s+resources/m);
    const stopped = await gymIn(dir, "stop", "--json");
    expect(stopped.code, stopped.err).toBe(0);
    expect(JSON.parse(stopped.out)).toMatchObject({
      state_file: path.join(root, ".gym", "run.json"),
      servers: { counter: { outcome: "gone" }, echo: { outcome: "gone" } },
    });
  });

  // Only meaningful where no directory above the temporary one holds a run of its own.
  it.skipIf(findStateFile(temp) !== null)(
    "says where it looked when no directory here, just below or up to the root holds a run",
    async () => {
      const dir = subdirectory(path.join(temp, "empty"));
      const status = await gymIn(dir, "ckpt", "status");
      expect(status.code).toBe(1);
      expect(status.err).toContain(
        `no running deployment: there is no .gym/run.json in ${dir}, in a directory just below ` +
          `it (${path.join(dir, "*", ".gym", "run.json")}) or in any directory above it`,
      );
      expect(status.err).toMatch(/what to do: .*--state FILE .*--deployment FILE/);
      const stopped = await gymIn(dir, "stop");
      expect(stopped.code).toBe(0);
      expect(stopped.err).toMatch(/or in any directory above it; nothing to stop/);
    },
  );
});

describe("the state file is found in a directory just below the working directory", () => {
  it("gym ckpt status and gym top run where `gym serve sub/deployment.yaml` ran find the run", async () => {
    // As in the README: `gym serve reference-servers/deployment.yaml --detach` from the repository.
    const repository = path.join(temp, `repository-${++runs}`);
    const { stateFile } = await deploy([], path.join(repository, "reference-servers"));
    mkdirSync(path.join(repository, "docs"), { recursive: true });
    const status = await gymIn(repository, "ckpt", "status");
    expect(status.code, status.err).toBe(0);
    expect(status.out).toMatch(/^counter\s+resources\s+idle/m);
    expect(status.err).toContain(`gym: using the run in ${path.relative(repository, stateFile)}`);
    const top = await gymIn(repository, "top", "--once");
    expect(top.code, top.err).toBe(0);
    expect(top.out).toMatch(/^counter\s+resources\s+ready/m);
  });

  it("refuses two runs just below, naming both and how to pick one", async () => {
    const repository = path.join(temp, `repository-${++runs}`);
    await deploy(["counter", "echo"], path.join(repository, "a"));
    await deploy(["counter", "echo"], path.join(repository, "b"));
    const runsBelow = `2 runs in the directories just below ${repository}: a/.gym/run.json, b/.gym/run.json`;
    for (const argv of [["ckpt", "status"], ["top", "--once"], ["stop"]]) {
      const outcome = await gymIn(repository, ...argv);
      expect(outcome.code, argv.join(" ")).toBe(2);
      expect(outcome.err).toContain(`gym: ${runsBelow}`);
      expect(outcome.err).toContain(
        "what to do: say which with --state FILE (e.g. --state a/.gym/run.json)",
      );
    }
    const picked = await gymIn(repository, "top", "--once", "--state", "b/.gym/run.json");
    expect(picked.code, picked.err).toBe(0);
  });
});

describe("a server whose process is gone is named with its pid", () => {
  it("gym ckpt status names it and says how to restart it, in commands that work from here", async () => {
    const { root } = await deploy(["counter"]);
    const dir = subdirectory(root);
    const { code, err } = await gymIn(dir, "ckpt", "status", "--deadline", "5s");
    expect(code).toBe(1);
    expect(err).toContain(
      `gym: server counter (pid ${DEAD_PID}) is not running: its process is gone`,
    );
    expect(err).toContain(`its log: ${path.join(root, ".gym", "logs", "counter.log")}`);
    // The state file is the one `serve` and `stop` find from here: no --state needed.
    expect(err).toContain(
      `what to do: counter is not running (named above): restart it with ` +
        `\`gym serve --only counter ${path.join(root, "deployment.yaml")}\`, or stop the run with \`gym stop\``,
    );
  });

  it("adds --state to the advice when the run is not where the commands would look", async () => {
    const { root, stateFile } = await deploy(["counter"]);
    const { err } = await gymIn(temp, "ckpt", "status", "--state", stateFile, "--deadline", "5s");
    const shown = path.relative(temp, stateFile);
    expect(err).toContain(
      `restart it with \`gym serve --only counter ${path.relative(temp, path.join(root, "deployment.yaml"))}\`` +
        `, or stop the run with \`gym stop --state ${shown}\``,
    );
  });

  it("gym top shows it as exited with its pid, and gym stop names it", async () => {
    const { root } = await deploy(["counter"]);
    const top = await gymIn(root, "top", "--once");
    expect(top.code, top.err).toBe(0);
    expect(top.out).toMatch(
      new RegExp(`^counter\\s+resources\\s+exited \\(pid ${DEAD_PID}\\)`, "m"),
    );
    expect(top.err).toContain(`server counter (pid ${DEAD_PID}) is not running`);
    const stopped = await gymIn(root, "stop", "--only", "counter");
    expect(stopped.code, stopped.err).toBe(0);
    expect(stopped.err).toContain(`server counter (pid ${DEAD_PID}) is not running`);
    expect(stopped.out).toMatch(new RegExp(`^counter\\s+${DEAD_PID}\\s+was not running`, "m"));
  });
});
