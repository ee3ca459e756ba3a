/**
 * The scaffolder's flow in process (`templates/src/create.ts`), with its terminal, prompts and
 * output injected: flags and their errors, the TTY rules, the refusal to delete without
 * --overwrite, the SDK dependency, the package manager and the printed next steps.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { create, type CreateIo } from "../../templates/src/create.js";
import type { Prompter, SelectOption } from "../../templates/src/prompts.js";
import { VENDOR_DIR, packVendoredSdk, type VendoredSdk } from "../../templates/src/vendor-sdk.js";

const REPO = fileURLToPath(new URL("../../", import.meta.url));
const TEMPLATES = path.join(REPO, "templates");

let cwd: string;
beforeEach(() => {
  cwd = mkdtempSync(path.join(tmpdir(), "create-gym-test-"));
});
afterEach(() => {
  rmSync(cwd, { recursive: true, force: true });
});

/** A prompter answering from a script, recording every question; a missing answer throws. */
function scripted(answers: Record<string, string | boolean>): Prompter & { asked: string[] } {
  const asked: string[] = [];
  const answer = (message: string): string | boolean => {
    asked.push(message);
    const key = Object.keys(answers).find((k) => message.includes(k));
    if (key === undefined) throw new Error(`unexpected prompt: ${message}`);
    return answers[key] as string | boolean;
  };
  return {
    asked,
    intro: () => undefined,
    select: <T extends string>(message: string, options: readonly SelectOption<T>[]) => {
      const value = answer(message);
      const chosen = options.find((o) => o.value === value);
      if (chosen === undefined) throw new Error(`${String(value)} is not offered by: ${message}`);
      return Promise.resolve(chosen.value);
    },
    text: (message) => Promise.resolve(String(answer(message))),
    confirm: (message) => Promise.resolve(answer(message) === true),
  };
}

/** Writes an empty tarball where `npm pack` would write the SDK's. */
function fakePack(plan: VendoredSdk, projectDir: string): string {
  const file = path.join(projectDir, VENDOR_DIR, plan.tarball);
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, "");
  return file;
}

interface Run {
  readonly code: number;
  readonly out: string;
  readonly err: string;
  readonly asked: string[];
}

async function run(
  argv: string[],
  options: {
    isTTY?: boolean;
    answers?: Record<string, string | boolean>;
    env?: Record<string, string>;
    packSdk?: CreateIo["packSdk"];
  } = {},
): Promise<Run> {
  const out: string[] = [];
  const err: string[] = [];
  const prompter = scripted(options.answers ?? {});
  const io: CreateIo = {
    cwd,
    env: options.env ?? {},
    isTTY: options.isTTY ?? false,
    prompter,
    out: (line) => out.push(line),
    err: (line) => err.push(line),
    packageDir: TEMPLATES,
    version: "0.1.0",
    // `npm pack` takes seconds: the packing itself is tested once, below, with the real one.
    packSdk: options.packSdk ?? fakePack,
  };
  const code = await create(argv, io);
  return { code, out: out.join("\n"), err: err.join("\n"), asked: prompter.asked };
}

const read = (...parts: string[]) => readFileSync(path.join(cwd, ...parts), "utf8");
const manifest = (dir: string) =>
  JSON.parse(read(dir, "package.json")) as { name: string; dependencies: Record<string, string> };

describe("without a terminal", () => {
  it("fails on a missing --kind, naming the flag, and writes nothing", async () => {
    const result = await run(["app"]);
    expect(result.code).toBe(2);
    expect(result.err).toMatch(/missing --kind/);
    expect(result.err).toMatch(/--kind resources .*--no-interactive/);
    expect(result.asked).toEqual([]);
    expect(existsSync(path.join(cwd, "app"))).toBe(false);
  });

  it("takes every choice from the flags, with defaults for the optional ones", async () => {
    const result = await run(["app", "--kind", "resources"]);
    expect(result.code, result.err).toBe(0);
    expect(read("app", "src", "index.ts")).toMatch(/extends SessionStateServer/); // exported mode
    expect(read("app", "src", "index.ts")).toMatch(/checkpointVerify = "wait"/);
    expect(result.out).toMatch(/checkpointMode exported, checkpointVerify wait/);
  });

  it("names the directory after the kind when none is given", async () => {
    expect((await run(["--kind", "agent"])).code).toBe(0);
    expect(manifest("gym-agent").name).toBe("gym-agent");
  });

  it("refuses a non-empty directory without --overwrite, deleting nothing", async () => {
    mkdirSync(path.join(cwd, "app"));
    writeFileSync(path.join(cwd, "app", "keep.txt"), "mine");
    const result = await run(["app", "--kind", "environment"]);
    expect(result.code).toBe(1);
    expect(result.err).toMatch(/not empty; nothing was written or deleted/);
    expect(result.err).toMatch(/--overwrite/);
    expect(read("app", "keep.txt")).toBe("mine");
    expect(existsSync(path.join(cwd, "app", "package.json"))).toBe(false);
  });

  it("empties the directory first with --overwrite, keeping .git", async () => {
    mkdirSync(path.join(cwd, "app", ".git"), { recursive: true });
    writeFileSync(path.join(cwd, "app", "old.txt"), "old");
    const result = await run(["app", "--kind", "environment", "--overwrite"]);
    expect(result.code, result.err).toBe(0);
    expect(existsSync(path.join(cwd, "app", "old.txt"))).toBe(false);
    expect(existsSync(path.join(cwd, "app", ".git"))).toBe(true);
    expect(existsSync(path.join(cwd, "app", "src", "index.ts"))).toBe(true);
  });

  it("refuses flags that do not fit the kind, and unknown choices", async () => {
    const verify = await run(["app", "--kind", "agent", "--verify", "replay"]);
    expect(verify.code).toBe(2);
    expect(verify.err).toMatch(/--verify applies to resources servers only/);
    const mode = await run(["app", "--kind", "environment", "--mode", "stateless"]);
    expect(mode.code).toBe(2);
    expect(mode.err).toMatch(/--mode stateless does not apply to --kind environment/);
    const unknown = await run(["app", "--kind", "robot"]);
    expect(unknown.code).toBe(2);
    expect(unknown.err).toMatch(/robot.*invalid|invalid.*robot/i);
    expect(existsSync(path.join(cwd, "app"))).toBe(false);
  });
});

describe("on a terminal", () => {
  it("asks for every choice the flags left open", async () => {
    const result = await run([], {
      isTTY: true,
      answers: {
        "What kind": "resources",
        "Checkpoint mode": "stateless",
        "Verify declaration": "replay",
        "Project directory": "tools",
      },
    });
    expect(result.code, result.err).toBe(0);
    expect(result.asked).toHaveLength(4);
    const source = read("tools", "src", "index.ts");
    expect(source).toMatch(/checkpointMode = "stateless"/);
    expect(source).toMatch(/checkpointVerify = "replay"/);
  });

  it("asks only what the flags left open", async () => {
    const result = await run(["app", "--kind", "resources", "--mode", "exported"], {
      isTTY: true,
      answers: { "Verify declaration": "wait" },
    });
    expect(result.code, result.err).toBe(0);
    expect(result.asked).toEqual(["Verify declaration (checkpointVerify)?"]);
  });

  it("asks before emptying a non-empty directory; no deletes nothing and fails", async () => {
    mkdirSync(path.join(cwd, "app"));
    writeFileSync(path.join(cwd, "app", "keep.txt"), "mine");
    const no = await run(["app", "--kind", "agent"], {
      isTTY: true,
      answers: { "is not empty": false },
    });
    expect(no.code).toBe(1);
    expect(no.err).toMatch(/cancelled/);
    expect(read("app", "keep.txt")).toBe("mine");
    const yes = await run(["app", "--kind", "agent"], {
      isTTY: true,
      answers: { "is not empty": true },
    });
    expect(yes.code, yes.err).toBe(0);
    expect(existsSync(path.join(cwd, "app", "keep.txt"))).toBe(false);
  });

  it("never asks with --no-interactive, even on a terminal", async () => {
    const result = await run(["app", "--no-interactive"], { isTTY: true });
    expect(result.code).toBe(2);
    expect(result.asked).toEqual([]);
    expect(result.err).toMatch(/missing --kind/);
  });

  it("asks with --interactive, even without a terminal", async () => {
    const result = await run(["app", "--interactive"], { answers: { "What kind": "agent" } });
    expect(result.code, result.err).toBe(0);
    expect(result.asked).toEqual(["What kind of server?"]);
  });
});

describe("what is written", () => {
  it("renames _gitignore to .gitignore and names the package after the directory", async () => {
    expect((await run(["My Tools", "--kind", "resources"])).code).toBe(0);
    expect(read("My Tools", ".gitignore")).toMatch(/node_modules/);
    expect(existsSync(path.join(cwd, "My Tools", "_gitignore"))).toBe(false);
    expect(manifest("My Tools").name).toBe("my-tools");
    expect(read("My Tools", "src", "index.ts")).toMatch(/^ \* my-tools: an `exported`/m);
  });

  it("packs the SDK of this checkout into the project's vendor/ by default", async () => {
    const result = await run(["app", "--kind", "agent"], { packSdk: packVendoredSdk });
    expect(result.code, result.err).toBe(0);
    const { version } = JSON.parse(
      readFileSync(path.join(REPO, "sdk", "package.json"), "utf8"),
    ) as {
      version: string;
    };
    const tarball = `gym-participant-sdk-${version}.tgz`;
    expect(manifest("app").dependencies["gym-participant-sdk"]).toBe(`file:vendor/${tarball}`);
    // A real tarball of the package (gzip), inside the project: nothing points at the checkout.
    const packed = readFileSync(path.join(cwd, "app", "vendor", tarball));
    expect(packed.subarray(0, 2)).toEqual(Buffer.from([0x1f, 0x8b]));
    expect(packed.length).toBeGreaterThan(100_000);
    expect(JSON.stringify(manifest("app"))).not.toContain(REPO);
    expect(result.out).toMatch(/gym-participant-sdk: file:vendor\/gym-participant-sdk-/);
  });

  it("writes --sdk as a file: path for a directory or tarball, as given for a version", async () => {
    const tarball = path.join(cwd, "gym-participant-sdk-0.1.0.tgz");
    writeFileSync(tarball, "");
    expect((await run(["a", "--kind", "agent", "--sdk", tarball])).code).toBe(0);
    expect(manifest("a").dependencies["gym-participant-sdk"]).toBe(
      "file:../gym-participant-sdk-0.1.0.tgz",
    );
    expect((await run(["b", "--kind", "agent", "--sdk", "^0.2.0"])).code).toBe(0);
    expect(manifest("b").dependencies["gym-participant-sdk"]).toBe("^0.2.0");
    const missing = await run(["c", "--kind", "agent", "--sdk", "./nowhere/sdk"]);
    expect(missing.code).toBe(2);
    expect(missing.err).toMatch(/--sdk \.\/nowhere\/sdk: no such directory or tarball/);
    expect(existsSync(path.join(cwd, "c"))).toBe(false);
  });

  it("prints numbered next commands for the package manager that ran it", async () => {
    const result = await run(["app", "--kind", "environment"], {
      env: { npm_config_user_agent: "pnpm/9.1.0 npm/? node/v20.19.0 linux x64" },
    });
    expect(result.out).toMatch(/1\. cd app\n\s+2\. pnpm install\n\s+3\. pnpm run test/);
    expect(result.out).toMatch(/5\. pnpm run checkpoint/);
    expect((await run(["b", "--kind", "agent"])).out).toMatch(/2\. npm install/);
  });

  it("prints the one-shot command for a coding agent", async () => {
    const result = await run(["app", "--kind", "resources", "--verify", "replay"], {
      env: { AI_AGENT: "some-agent" },
    });
    expect(result.out).toMatch(
      /npx create-gym-participant app --kind resources --mode exported --verify replay --no-interactive/,
    );
    expect((await run(["b", "--kind", "resources"])).out).not.toMatch(/without prompts/);
  });
});

describe("--help", () => {
  it("lists every kind, mode and verify declaration, and exits 0", async () => {
    const result = await run(["--help"]);
    expect(result.code).toBe(0);
    for (const choice of [
      "resources",
      "agent",
      "environment",
      "exported",
      "stateless",
      "restart_only",
      "wait",
      "replay",
      "--overwrite",
      "--interactive",
      "--no-interactive",
      "--sdk",
    ]) {
      expect(result.out).toContain(choice);
    }
  });
});
