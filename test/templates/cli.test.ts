/**
 * The built `create-gym-participant` bin in real processes: without a terminal it never asks
 * and fails on a missing --kind; on a real terminal (a pseudo-terminal from util-linux
 * `script`) it asks with @clack/prompts, and Ctrl-C cancels without writing anything.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { BIN, cleanEnv, exec, requireBuilt, shown } from "./helpers.js";

let cwd: string;
beforeAll(requireBuilt);
beforeEach(() => {
  cwd = mkdtempSync(path.join(tmpdir(), "create-gym-cli-"));
});
afterEach(() => {
  rmSync(cwd, { recursive: true, force: true });
});

/** The scaffolder on a pseudo-terminal: wait for what it prints, type keys, read its exit code. */
class Terminal {
  readonly #child;
  #screen = "";
  readonly exited: Promise<number | null>;

  constructor(args: readonly string[]) {
    const command = ["stty cols 120 rows 40;", "exec", process.execPath, BIN, ...args].join(" ");
    this.#child = spawn("script", ["-qfec", command, "/dev/null"], {
      cwd,
      env: cleanEnv({ TERM: "xterm-256color" }),
      stdio: ["pipe", "pipe", "pipe"],
    });
    const append = (chunk: Buffer): void => {
      this.#screen += chunk.toString("utf8");
    };
    this.#child.stdout.on("data", append);
    this.#child.stderr.on("data", append);
    this.exited = new Promise((resolve) => this.#child.once("close", resolve));
  }

  /** Everything printed so far, escape sequences removed. */
  get text(): string {
    // eslint-disable-next-line no-control-regex
    return this.#screen.replace(/\u001b\[[0-9;?]*[A-Za-z]/g, "");
  }

  /** Polls (bounded) until the screen shows `pattern`. */
  async waitFor(pattern: RegExp, timeoutMs = 10_000): Promise<void> {
    const end = Date.now() + timeoutMs;
    while (!pattern.test(this.text)) {
      if (Date.now() > end) throw new Error(`never showed ${pattern}; the screen:\n${this.text}`);
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }

  type(keys: string): void {
    this.#child.stdin.write(keys);
  }

  kill(): void {
    this.#child.kill("SIGKILL");
  }
}

const DOWN = "\u001b[B";
const ENTER = "\r";
const CTRL_C = "\u0003";

describe("without a terminal", () => {
  it("never asks: a missing --kind fails with exit 2, naming the flag", async () => {
    const result = await exec(process.execPath, [BIN, "app"], { cwd, timeoutMs: 30_000 });
    expect(result.code, shown(result)).toBe(2);
    expect(result.stderr).toMatch(/missing --kind/);
    expect(existsSync(path.join(cwd, "app"))).toBe(false);
  });

  it("prints the help with every choice", async () => {
    const result = await exec(process.execPath, [BIN, "--help"], { cwd, timeoutMs: 30_000 });
    expect(result.code, shown(result)).toBe(0);
    expect(result.stdout).toMatch(/restart_only/);
  });
});

describe("on a terminal", { timeout: 60_000 }, () => {
  it("asks with prompts for what the flags left open, then scaffolds", async () => {
    const terminal = new Terminal([]);
    try {
      await terminal.waitFor(/What kind of server\?/);
      terminal.type(`${DOWN}${ENTER}`); // resources → agent
      await terminal.waitFor(/Project directory:/);
      terminal.type(`planner${ENTER}`);
      expect(await terminal.exited, terminal.text).toBe(0);
    } finally {
      terminal.kill();
    }
    expect(terminal.text).toMatch(/1\. cd planner/);
    const pkg = JSON.parse(readFileSync(path.join(cwd, "planner", "package.json"), "utf8")) as {
      name: string;
    };
    expect(pkg.name).toBe("planner");
    expect(readFileSync(path.join(cwd, "planner", "src", "index.ts"), "utf8")).toMatch(
      /extends AgentServer/,
    );
  });

  it("asks for a resources server's mode and verify declaration", async () => {
    const terminal = new Terminal(["tools", "--kind", "resources"]);
    try {
      await terminal.waitFor(/Checkpoint mode/);
      terminal.type(`${DOWN}${ENTER}`); // exported → stateless
      await terminal.waitFor(/Verify declaration/);
      terminal.type(`${DOWN}${ENTER}`); // wait → replay
      expect(await terminal.exited, terminal.text).toBe(0);
    } finally {
      terminal.kill();
    }
    const source = readFileSync(path.join(cwd, "tools", "src", "index.ts"), "utf8");
    expect(source).toMatch(/checkpointMode = "stateless"/);
    expect(source).toMatch(/checkpointVerify = "replay"/);
  });

  it("cancels on Ctrl-C with a non-zero exit, writing nothing", async () => {
    const terminal = new Terminal(["app"]);
    try {
      await terminal.waitFor(/What kind of server\?/);
      terminal.type(CTRL_C);
      expect(await terminal.exited).toBe(1);
    } finally {
      terminal.kill();
    }
    expect(terminal.text).toMatch(/cancelled/);
    expect(existsSync(path.join(cwd, "app"))).toBe(false);
  });

  it("never asks with --no-interactive, even on a terminal", async () => {
    const terminal = new Terminal(["app", "--no-interactive"]);
    expect(await terminal.exited).toBe(2);
    expect(terminal.text).toMatch(/missing --kind/);
    expect(terminal.text).not.toMatch(/What kind/);
  });
});
