import {
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
  existsSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { CliError, UsageError } from "#sdk/cli/output.js";
import {
  chooseStateFile,
  findStateFile,
  readLastPrepare,
  readState,
  removeFromState,
  requireState,
  runStateFile,
  statePaths,
  writeLastPrepare,
  writeState,
  type RunState,
  type StateServer,
} from "#sdk/cli/state-file.js";

const temp = mkdtempSync(path.join(tmpdir(), "gym-state-file-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

function entry(name: string, pid: number): StateServer {
  return {
    name,
    kind: "resources",
    url: "http://127.0.0.1:8101",
    pid,
    pgid: pid,
    log: `/logs/${name}.log`,
    supervisor_pid: null,
    started_at: "2025-01-01T00:00:00.000Z",
  };
}

function runState(servers: StateServer[]): RunState {
  return {
    version: 1,
    deployment_file: "/d/deployment.yaml",
    resolved_file: "/d/.gym/deployment.resolved.json",
    deployment: {
      checkpoint: { enabled: true, control_auth_token: "t", lease_grace_seconds: 600 },
      servers: Object.fromEntries(
        servers.map((server) => [
          server.name,
          {
            kind: server.kind,
            url: server.url,
            host: "127.0.0.1",
            port: 8101,
            num_workers: 1,
            config: {},
          },
        ]),
      ),
    },
    servers: Object.fromEntries(servers.map((server) => [server.name, server])),
  };
}

describe("choosing the state file", () => {
  it("prefers --state, then .gym next to --deployment, then .gym in the working directory", () => {
    expect(chooseStateFile({ state: "s/run.json", deployment: "d/x.yaml", cwd: "/w" })).toBe(
      "/w/s/run.json",
    );
    expect(chooseStateFile({ deployment: "d/x.yaml", cwd: "/w" })).toBe("/w/d/.gym/run.json");
    expect(chooseStateFile({ cwd: "/w" })).toBe("/w/.gym/run.json");
  });

  it("without --state or --deployment, finds the nearest .gym/run.json at or above cwd", () => {
    const root = path.join(temp, "tree");
    const deep = path.join(root, "a", "b");
    mkdirSync(deep, { recursive: true });
    writeState(path.join(root, ".gym", "run.json"), runState([entry("counter", 101)]));
    expect(findStateFile(deep)).toBe(path.join(root, ".gym", "run.json"));
    expect(runStateFile({ cwd: deep, command: "gym" })).toBe(path.join(root, ".gym", "run.json"));
    // A nearer run wins, as the nearest .git does.
    writeState(path.join(root, "a", ".gym", "run.json"), runState([entry("echo", 102)]));
    expect(runStateFile({ cwd: deep, command: "gym" })).toBe(
      path.join(root, "a", ".gym", "run.json"),
    );
    // The flags still say exactly where to look.
    expect(runStateFile({ state: "x.json", cwd: deep, command: "gym" })).toBe(
      path.join(deep, "x.json"),
    );
  });

  it("from a directory with no run of its own, finds the one run in a directory just below it", () => {
    // `gym serve sub/deployment.yaml` from here writes sub/.gym/run.json.
    const here = path.join(temp, "below");
    const sub = path.join(here, "reference-servers");
    mkdirSync(path.join(here, "docs"), { recursive: true });
    writeState(path.join(sub, ".gym", "run.json"), runState([entry("counter", 101)]));
    expect(findStateFile(here)).toBe(path.join(sub, ".gym", "run.json"));
    expect(runStateFile({ cwd: here, command: "gym" })).toBe(path.join(sub, ".gym", "run.json"));
    // Hidden directories and node_modules are not searched.
    writeState(path.join(here, "node_modules", "x", ".gym", "run.json"), runState([]));
    writeState(path.join(here, ".cache", ".gym", "run.json"), runState([]));
    expect(runStateFile({ cwd: here, command: "gym" })).toBe(path.join(sub, ".gym", "run.json"));
    // The working directory's own run wins over one below it.
    writeState(path.join(here, ".gym", "run.json"), runState([entry("echo", 102)]));
    expect(runStateFile({ cwd: here, command: "gym" })).toBe(path.join(here, ".gym", "run.json"));
  });

  it("prefers a run just below the working directory to one above it", () => {
    const root = path.join(temp, "below-and-above");
    const here = path.join(root, "work");
    writeState(path.join(root, ".gym", "run.json"), runState([entry("counter", 101)]));
    writeState(path.join(here, "sub", ".gym", "run.json"), runState([entry("echo", 102)]));
    expect(runStateFile({ cwd: here, command: "gym" })).toBe(
      path.join(here, "sub", ".gym", "run.json"),
    );
  });

  it("refuses to guess between two runs just below the working directory, naming both", () => {
    const here = path.join(temp, "two-below");
    writeState(path.join(here, "a", ".gym", "run.json"), runState([entry("counter", 101)]));
    writeState(path.join(here, "b", ".gym", "run.json"), runState([entry("echo", 102)]));
    expect(findStateFile(here)).toBeNull();
    try {
      runStateFile({ cwd: here, command: "gym" });
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(UsageError);
      expect((error as UsageError).message).toBe(
        `2 runs in the directories just below ${here}: ` +
          `${path.join("a", ".gym", "run.json")}, ${path.join("b", ".gym", "run.json")}`,
      );
      expect((error as UsageError).hint).toMatch(/--state a\/\.gym\/run\.json/);
    }
    // Naming one settles it.
    expect(runStateFile({ cwd: here, state: "b/.gym/run.json", command: "gym" })).toBe(
      path.join(here, "b", ".gym", "run.json"),
    );
  });

  it("keeps every file of a run in the state file's directory", () => {
    expect(statePaths("/w/.gym/run.json")).toEqual({
      stateFile: "/w/.gym/run.json",
      dir: "/w/.gym",
      resolvedFile: "/w/.gym/deployment.resolved.json",
      logsDir: "/w/.gym/logs",
      lastPrepareFile: "/w/.gym/last-prepare.json",
      supervisorLog: "/w/.gym/serve.log",
    });
  });
});

describe("reading and writing", () => {
  it("round-trips a state, readable by its owner only (it holds the control token)", () => {
    const file = path.join(temp, "a", "run.json");
    const state = runState([entry("counter", 101), entry("echo", 102)]);
    writeState(file, state);
    expect(readState(file)).toEqual(state);
    expect(statSync(file).mode & 0o777).toBe(0o600);
  });

  it("reads a missing state file as null, and requireState says how to start a run", () => {
    const file = path.join(temp, "none", "run.json");
    expect(readState(file)).toBeNull();
    expect(() => requireState(file, "gym")).toThrow(CliError);
    expect(() => requireState(file, "gym")).toThrow(/no running deployment/);
  });

  it("after a search that found nothing, says every place it looked and how to name a run", () => {
    const dir = path.join(temp, "nowhere");
    try {
      requireState(path.join(dir, ".gym", "run.json"), "npx gym", dir);
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(CliError);
      expect((error as CliError).message).toBe(
        `no running deployment: there is no .gym/run.json in ${dir}, in a directory just below ` +
          `it (${path.join(dir, "*", ".gym", "run.json")}) or in any directory above it`,
      );
      expect((error as CliError).hint).toMatch(/`npx gym serve <deployment.yaml>`/);
      expect((error as CliError).hint).toMatch(/--state FILE .*--deployment FILE/);
    }
  });

  it("refuses a file that is not a run state, saying what to do", () => {
    const file = path.join(temp, "garbage.json");
    writeFileSync(file, JSON.stringify({ version: 2 }));
    try {
      readState(file);
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(CliError);
      expect((error as CliError).hint).toMatch(/delete it if no deployment is running/);
    }
  });

  it("removes servers, only when their pid still matches, and deletes an empty state", () => {
    const file = path.join(temp, "b", "run.json");
    writeState(file, runState([entry("counter", 101), entry("echo", 102)]));
    removeFromState(file, ["counter"], { counter: 999 });
    expect(Object.keys(readState(file)?.servers ?? {})).toEqual(["counter", "echo"]);
    removeFromState(file, ["counter"], { counter: 101 });
    expect(Object.keys(readState(file)?.servers ?? {})).toEqual(["echo"]);
    removeFromState(file, ["echo"]);
    expect(existsSync(file)).toBe(false);
  });

  it("keeps the last prepare, and reads a missing or broken one as null", () => {
    const file = path.join(temp, "c", "last-prepare.json");
    expect(readLastPrepare(file)).toBeNull();
    const prepare = {
      checkpoint_id: "ckpt-1",
      prepared: true,
      at: "2025-01-01T00:00:00.000Z",
      replies: {
        counter: {
          phase: "prepared" as const,
          report: { ready: true, blockers: [], blocker_count: 0, counts: {}, restarts: ["r"] },
        },
      },
    };
    writeLastPrepare(file, prepare);
    expect(readLastPrepare(file)).toEqual(prepare);
    writeFileSync(file, "{");
    expect(readLastPrepare(file)).toBeNull();
    expect(JSON.parse(readFileSync(path.join(temp, "a", "run.json"), "utf8")).version).toBe(1);
  });
});
