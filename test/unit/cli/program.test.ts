import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { runGym, type GymOutcome } from "../../support/gym-in-process.js";

const SDK_DIR = fileURLToPath(new URL("../../../sdk/", import.meta.url));
const SDK_VERSION = (
  JSON.parse(readFileSync(path.join(SDK_DIR, "package.json"), "utf8")) as { version: string }
).version;
const COMPILED_MAIN = path.join(SDK_DIR, "dist", "cli", "main.js");

const temp = mkdtempSync(path.join(tmpdir(), "gym-program-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

/** Runs `gym` in-process as if invoked as `command` (`npx gym`, …); without it, a bare `gym`. */
async function gymAs(command: string | undefined, ...argv: string[]): Promise<GymOutcome> {
  return await runGym({ cwd: process.cwd(), command }, argv);
}

async function gym(...argv: string[]): Promise<GymOutcome> {
  return await gymAs(undefined, ...argv);
}

describe("gym --help and --version", () => {
  it("lists every command, verb and choice", async () => {
    const { code, out } = await gym("--help");
    expect(code).toBe(0);
    for (const word of [
      "serve",
      "stop",
      "openapi",
      "--detach",
      "--foreground",
      "--only",
      "--health-timeout",
      "--kill",
      "--state",
      "--deployment",
      "--json",
      "--deadline",
      "continued|all",
      "status",
      "prepare",
      "commit",
      "resume",
      "checkpoint",
      "restore",
      "retire",
      "forget",
      "inspect",
      "Exit status",
    ]) {
      expect(out).toContain(word);
    }
  });

  it("lists the verbs under gym ckpt --help", async () => {
    const { code, out } = await gym("ckpt", "--help");
    expect(code).toBe(0);
    for (const verb of [
      "status",
      "prepare",
      "commit",
      "resume",
      "checkpoint",
      "restore",
      "retire",
      "forget",
      "inspect",
    ]) {
      expect(out).toMatch(new RegExp(`^  ${verb}`, "m"));
    }
  });

  it("shows the choices of --scope", async () => {
    const { out } = await gym("ckpt", "commit", "--help");
    expect(out).toContain('choices: "continued", "all"');
  });

  it("prints the SDK package's version with --version and -V", async () => {
    for (const flag of ["--version", "-V"]) {
      const { code, out } = await gym(flag);
      expect(code).toBe(0);
      expect(out.trim()).toBe(SDK_VERSION);
    }
  });

  // The version is read next to the running module, so the built CLI finds it too.
  it.skipIf(!existsSync(COMPILED_MAIN))("prints the same version from the built CLI", () => {
    const out = execFileSync(process.execPath, [COMPILED_MAIN, "--version"], { encoding: "utf8" });
    expect(out.trim()).toBe(SDK_VERSION);
  });
});

describe("bad usage exits 2 with a hint", () => {
  it.each([
    [[], /Usage: gym/],
    [["bogus"], /unknown command 'bogus'/],
    [["serve"], /missing required argument 'deployment'/],
    [["ckpt", "prepare"], /required option '--id <id>' not specified/],
    [
      ["ckpt", "commit", "--id", "x", "--dir", "d", "--scope", "some"],
      /Allowed choices are continued, all/,
    ],
    [["ckpt", "prepare", "--id", "bad id"], /--id "bad id" is not a checkpoint ID/],
    [["ckpt", "status", "--deadline", "30"], /add a unit: 30s/],
    [["ckpt", "prepare", "--id", "x", "--deadline", "30"], /add a unit: 30s/],
    [["ckpt", "retire", "--keys", ","], /--keys needs at least one item/],
    [["ckpt", "retire"], /retire needs the attempts to stop/],
    [["ckpt", "retire", "--episodes", "f", "--keys", "k"], /--episodes and --keys cannot be/],
    [
      ["ckpt", "retire", "--episodes", "/nonexistent/task-1-a1"],
      /cannot read the episodes file .*\nwhat to do: .*to name the keys inline, use --keys/,
    ],
    [
      ["ckpt", "status", "deployment.yaml"],
      /too many arguments[\s\S]*what to do: gym ckpt verbs take the deployment as --deployment FILE/,
    ],
    [
      ["ckpt", "status", "--deployment", "/nonexistent/d.yaml"],
      /the deployment file \/nonexistent\/d\.yaml does not exist/,
    ],
    [["stop", "/nonexistent/d.yaml"], /the deployment file \/nonexistent\/d\.yaml does not exist/],
    [["stop", "a.yaml", "--deployment", "b.yaml"], /the deployment file is given twice/],
    [["ckpt", "forget", "--rollouts", "r-a1"], /not a rollout ID/],
    [["serve", "x.yaml", "--detach", "--foreground"], /cannot be combined/],
    [["serve", "x.yaml", "--health-timeout", "0s"], /--health-timeout must be longer than 0/],
    [["ckpt", "restore", "--id", "r", "--dir", "d"], /restore needs the episodes to continue/],
  ])("gym %j", async (argv, message) => {
    const { code, err } = await gym(...(argv as string[]));
    expect(code).toBe(2);
    expect(err).toMatch(message);
  });
});

describe("a missing deployment file is named as such", () => {
  it("gym ckpt status --deployment names it, not a missing state file (exit 2)", async () => {
    const { code, err } = await gym("ckpt", "status", "--deployment", "/nonexistent/d.yaml");
    expect(code).toBe(2);
    expect(err).not.toMatch(/no state file/);
    expect(err).toMatch(/what to do: pass the deployment file the run was started from/);
  });
});

describe("failures exit 1 and say what to do", () => {
  it("a missing state file", async () => {
    const { code, err } = await gym("ckpt", "status", "--state", "/nonexistent/run.json");
    expect(code).toBe(1);
    expect(err).toMatch(
      /no running deployment: there is no state file at \/nonexistent\/run\.json/,
    );
    expect(err).toMatch(/what to do: start one with `gym serve <deployment.yaml>`/);
  });

  it("a deployment file that does not exist", async () => {
    const { code, err } = await gym("serve", "/nonexistent/deployment.yaml");
    expect(code).toBe(1);
    expect(err).toMatch(/no such file/);
  });
});

describe("hints name gym the way it was invoked", () => {
  it("a missing state file, under `npm run gym --`", async () => {
    const { code, err } = await gymAs(
      "npm run gym --",
      "ckpt",
      "status",
      "--state",
      "/nonexistent/run.json",
    );
    expect(code).toBe(1);
    expect(err).toMatch(/what to do: start one with `npm run gym -- serve <deployment.yaml>`/);
  });

  it("a missing deployment file, under `npx gym`", async () => {
    const { code, err } = await gymAs(
      "npx gym",
      "ckpt",
      "status",
      "--deployment",
      "/nonexistent/d.yaml",
    );
    expect(code).toBe(2);
    expect(err).toMatch(/the run was started from \(`npx gym serve FILE`\)/);
  });

  it("a deployment file given twice, under `npx gym`", async () => {
    const { code, err } = await gymAs("npx gym", "stop", "a.yaml", "--deployment", "b.yaml");
    expect(code).toBe(2);
    expect(err).toMatch(
      /what to do: pass it once: npx gym stop FILE, or npx gym stop --deployment FILE/,
    );
  });
});

describe("gym stop is idempotent", () => {
  it("exits 0 saying there is nothing to stop when no state file exists", async () => {
    const { code, err } = await gym("stop", "--state", path.join(temp, "none", "run.json"));
    expect(code).toBe(0);
    expect(err).toMatch(/no running deployment: there is no state file at .*; nothing to stop/);
  });

  it("takes the deployment file as an argument, as gym serve does", async () => {
    const deployment = path.join(temp, "deployment.yaml");
    writeFileSync(deployment, "servers: {}\n");
    const { code, out, err } = await gym("stop", deployment, "--json");
    expect(code).toBe(0);
    expect(JSON.parse(out)).toEqual({
      state_file: path.join(temp, ".gym", "run.json"),
      servers: {},
    });
    expect(err).toMatch(/nothing to stop/);
  });
});
