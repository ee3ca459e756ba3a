/**
 * The official MCP conformance runner (`@modelcontextprotocol/conformance`, server mode) against
 * the reference counter's `/mcp` (docs/mcp.md#conformance): its active server scenarios pass
 * except those in the checked-in expected-failures file, each entry still fails (a stale entry
 * fails the run), and each names a scenario the runner has.
 */
import { execFile } from "node:child_process";
import { mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import CounterServer from "../../../reference-servers/counter/src/index.js";

const EXPECTED = fileURLToPath(
  new URL("./mcp-conformance-expected-failures.yaml", import.meta.url),
);
const RUNNER = path.join(
  path.dirname(
    createRequire(import.meta.url).resolve("@modelcontextprotocol/conformance/package.json"),
  ),
  "dist/index.js",
);
/** A bound on one runner process; the whole active suite takes a few seconds. */
const RUN_TIMEOUT_MS = 120_000;

interface Run {
  readonly code: number;
  readonly output: string;
  /** Each scenario run, with its checks' statuses. */
  readonly scenarios: Map<string, { status: string; id: string; details?: unknown }[]>;
}

let counter: CounterServer;
let url: string;
const dirs: string[] = [];

beforeAll(async () => {
  counter = new CounterServer({
    name: "counter",
    config: { expose_tools_over_mcp: true },
    checkpoint: { enabled: true, control_auth_token: "conformance-token" },
    logLevel: "silent",
  });
  // 127.0.0.1: the runner's localhost checks need a localhost URL.
  url = `${(await counter.listen({ host: "127.0.0.1", port: 0 })).url}/mcp`;
});

afterAll(async () => {
  await counter.close();
  await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
});

/** Runs the runner's server mode with `args`, reading the checks each scenario saved. */
async function runConformance(args: readonly string[]): Promise<Run> {
  const out = await mkdtemp(path.join(tmpdir(), "gym-mcp-conformance-"));
  dirs.push(out);
  const { code, output } = await new Promise<{ code: number; output: string }>((resolve) => {
    execFile(
      process.execPath,
      [RUNNER, "server", "--url", url, "--output-dir", out, ...args],
      { timeout: RUN_TIMEOUT_MS, env: { ...process.env, NO_COLOR: "1" } },
      (error, stdout, stderr) => {
        const status = error === null ? 0 : typeof error.code === "number" ? error.code : -1;
        resolve({ code: status, output: `${stdout}${stderr}` });
      },
    );
  });
  const scenarios: Run["scenarios"] = new Map();
  for (const entry of await readdir(out)) {
    // server-<scenario>-<ISO timestamp with dashes>
    const name = /^server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z$/.exec(entry)?.[1];
    if (name === undefined) continue;
    const checks = JSON.parse(await readFile(path.join(out, entry, "checks.json"), "utf8"));
    scenarios.set(name, checks);
  }
  return { code, output, scenarios };
}

/** Whether a scenario failed as the runner counts it: a failing check or a warning. */
const failed = (checks: { status: string }[]): boolean =>
  checks.some((check) => check.status === "FAILURE" || check.status === "WARNING");

describe("the MCP conformance runner against the counter", { timeout: 2 * RUN_TIMEOUT_MS }, () => {
  it("passes every active server scenario but the expected failures, each of which still fails", async () => {
    const text = await readFile(EXPECTED, "utf8");
    const expected = (parse(text) as { server: string[] }).server;
    const run = await runConformance(["--expected-failures", EXPECTED]);
    expect(run.code, run.output).toBe(0);

    const failing = [...run.scenarios].filter(([, checks]) => failed(checks)).map(([name]) => name);
    expect(failing.sort()).toEqual([...expected].sort());
    // An entry for a scenario the runner no longer runs would never be reported stale.
    for (const name of expected) expect([...run.scenarios.keys()]).toContain(name);
    // The scenarios that pass reached the counter's own tools.
    for (const name of ["server-initialize", "ping", "tools-list", "tools-call-error"]) {
      expect(failed(run.scenarios.get(name) ?? [{ status: "FAILURE" }]), name).toBe(false);
    }
    const listed = run.scenarios.get("tools-list")?.find((check) => check.id === "tools-list");
    expect(listed?.details).toMatchObject({ tools: ["increment_counter", "get_counter_value"] });
  });

  it("says why for each expected failure", async () => {
    const items = (await readFile(EXPECTED, "utf8"))
      .split("\n")
      .filter((line) => /^\s+-\s/.test(line));
    expect(items.length).toBeGreaterThan(0);
    for (const line of items) expect(line).toMatch(/^\s+- [a-z0-9-]+ # \S.{10,}$/);
  });

  it("fails when an expected failure passes (a stale entry)", async () => {
    const stale = path.join(await mkdtemp(path.join(tmpdir(), "gym-mcp-stale-")), "stale.yaml");
    dirs.push(path.dirname(stale));
    await writeFile(stale, "server:\n  - ping # listed as failing, but it passes\n");
    const run = await runConformance(["--scenario", "ping", "--expected-failures", stale]);
    expect(failed(run.scenarios.get("ping") ?? [{ status: "FAILURE" }])).toBe(false);
    expect(run.code, run.output).toBe(1);
    expect(run.output).toMatch(/stale/i);
  });
});
