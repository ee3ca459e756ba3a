/**
 * `npm run build` is incremental: run with nothing changed, it builds no project, says so in
 * one line, and rewrites no output (TypeScript project references with build-info files).
 */
import { execFileSync } from "node:child_process";
import { readdirSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";
import { buildOutputDirs } from "../support/build-outputs.js";

const REPO = fileURLToPath(new URL("../../", import.meta.url));
const OUTPUTS = buildOutputDirs(REPO);

/** Modification time of every file under the packages' `dist/` directories. */
function outputTimes(): Map<string, number> {
  const times = new Map<string, number>();
  for (const dir of OUTPUTS) {
    for (const entry of readdirSync(path.join(REPO, dir), {
      recursive: true,
      withFileTypes: true,
    })) {
      if (!entry.isFile()) continue;
      const file = path.join(entry.parentPath, entry.name);
      times.set(file, statSync(file).mtimeMs);
    }
  }
  return times;
}

function build(): string {
  return execFileSync(process.execPath, [path.join(REPO, "scripts", "build.mjs")], {
    cwd: REPO,
    encoding: "utf8",
  });
}

it(
  "a second build with nothing changed builds nothing and touches no output",
  { timeout: 180_000 },
  () => {
    build(); // up to date already when CI built first; otherwise this one builds
    const before = outputTimes();
    expect(before.size).toBeGreaterThan(100);
    const started = performance.now();
    const out = build();
    console.log(`no-change build: ${((performance.now() - started) / 1000).toFixed(2)} s`);
    expect(out).toMatch(/^build: up to date \(/m);
    expect(out).not.toMatch(/^build: \S+ …/m);
    const after = outputTimes();
    const touched = [...after]
      .filter(([file, time]) => before.get(file) !== time)
      .map(([file]) => file);
    expect(touched).toEqual([]);
    expect(after.size).toBe(before.size);
  },
);
