import { describe, expect, it } from "vitest";
import type { Io } from "../../../sdk/src/cli/output.js";
import { runCli } from "../../../sdk/src/cli/program.js";

async function gym(...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = "";
  let err = "";
  const io: Io = {
    out: (text) => void (out += `${text}\n`),
    err: (text) => void (err += `${text}\n`),
    cwd: process.cwd(),
    env: {},
  };
  const code = await runCli(argv, io);
  return { code, out, err };
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

  it("prints the version", async () => {
    const { code, out } = await gym("--version");
    expect(code).toBe(0);
    expect(out.trim()).toMatch(/^\d+\.\d+\.\d+/);
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
    [["ckpt", "status", "--deadline", "30"], /unknown option/],
    [["ckpt", "prepare", "--id", "x", "--deadline", "30"], /add a unit: 30s/],
    [["ckpt", "retire", "--episodes", ","], /--episodes needs at least one item/],
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
