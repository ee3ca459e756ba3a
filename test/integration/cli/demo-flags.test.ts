/**
 * `npm run demo` and `npm run demo:crash` refuse a bad count before starting anything, naming the
 * value as typed.
 */
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";

const REPO = fileURLToPath(new URL("../../../", import.meta.url));
const TSX = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;

function demo(script: string, ...args: string[]): { status: number | null; stderr: string } {
  const result = spawnSync(
    process.execPath,
    ["--import", TSX, path.join(REPO, "demo", script), ...args],
    { cwd: REPO, stdio: ["ignore", "pipe", "pipe"], encoding: "utf8", timeout: 20_000 },
  );
  return { status: result.status, stderr: result.stderr };
}

describe.each([
  ["crash.ts", "--rollouts"],
  ["main.ts", "--concurrency"],
])("demo/%s %s", (script, flag) => {
  it.each(["abc", "0", "2.5", "-3"])("refuses %j, naming it as typed", (value) => {
    const { status, stderr } = demo(script, flag, value);
    expect(status).not.toBe(0);
    expect(stderr).toContain(`${flag} must be a positive integer, got ${JSON.stringify(value)}`);
    expect(stderr).not.toMatch(/NaN/);
  });
});
