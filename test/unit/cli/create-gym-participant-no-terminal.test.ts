/**
 * `create-gym-participant --interactive` with nothing to read answers from (stdin is not a
 * terminal): a wrong command line, exit 2 with what to do, instead of waiting on a prompt no
 * one can answer (Node then exits 13, silently). Kept here beside the `gym` CLI tests; the
 * scaffolder's other tests are in test/templates.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { create, type CreateIo } from "../../../templates/src/create.js";
import type { Prompter } from "../../../templates/src/prompts.js";

const REPO = fileURLToPath(new URL("../../../", import.meta.url));
const cwd = mkdtempSync(path.join(tmpdir(), "create-no-terminal-"));
afterAll(() => rmSync(cwd, { recursive: true, force: true }));

const unanswerable: Prompter = {
  intro: () => undefined,
  select: () => Promise.reject(new Error("asked without a terminal")),
  text: () => Promise.reject(new Error("asked without a terminal")),
  confirm: () => Promise.reject(new Error("asked without a terminal")),
};

async function run(argv: string[], canPrompt: boolean | undefined) {
  const out: string[] = [];
  const err: string[] = [];
  const io: CreateIo = {
    cwd,
    env: {},
    isTTY: false,
    ...(canPrompt === undefined ? {} : { canPrompt }),
    prompter: unanswerable,
    out: (line) => out.push(line),
    err: (line) => err.push(line),
    packageDir: path.join(REPO, "templates"),
    version: "0.1.0",
  };
  const code = await create(argv, io);
  return { code, out: out.join("\n"), err: err.join("\n") };
}

describe("--interactive without a terminal on stdin", () => {
  it("exits 2 saying to pass the choices as flags, and writes nothing", async () => {
    // A resources server asks for its checkpoint mode: a question no one can answer.
    const result = await run(["app", "--interactive", "--kind", "resources"], false);
    expect(result.code).toBe(2);
    expect(result.err).toMatch(
      /--interactive needs a terminal to read the answers from, but standard input is not one/,
    );
    expect(result.err).toMatch(
      /what to do: pass the choices as flags instead, e\.g\.\n {2}npx create-gym-participant app --kind resources --no-interactive\nor run it in a terminal/,
    );
    expect(readdirSync(cwd)).toEqual([]);
  });

  it("runs when the flags already answer every question", async () => {
    const result = await run(["app", "--interactive", "--kind", "agent"], false);
    expect(result.code, result.err).toBe(0);
    expect(readdirSync(path.join(cwd, "app"))).toContain("package.json");
    rmSync(path.join(cwd, "app"), { recursive: true, force: true });
  });

  it("exits 2 as a real process with stdin from /dev/null", () => {
    const result = spawnSync(
      process.execPath,
      [
        "--import",
        pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href,
        path.join(REPO, "templates", "src", "index.ts"),
        "--interactive",
      ],
      { cwd, stdio: ["ignore", "pipe", "pipe"], encoding: "utf8", timeout: 20_000 },
    );
    expect(result.status).toBe(2);
    expect(result.stderr).toMatch(/--interactive needs a terminal/);
    expect(result.stderr).toMatch(/--kind <resources\|agent\|environment> --no-interactive/);
  });
});
