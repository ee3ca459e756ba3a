/**
 * The incremental-build test's list of outputs comes from the build solution, so run state left
 * beside the packages (`gym serve` writes `reference-servers/.gym`) cannot break the suite.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, expect, it } from "vitest";
import { buildOutputDirs } from "../../support/build-outputs.js";

const REPO = fileURLToPath(new URL("../../../", import.meta.url));
let dir: string | undefined;

afterEach(() => {
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

it("lists the solution's projects, not the folders beside them", () => {
  dir = mkdtempSync(path.join(tmpdir(), "build-outputs-"));
  for (const project of ["sdk", "reference-servers/counter"]) {
    mkdirSync(path.join(dir, project), { recursive: true });
  }
  // What `gym serve reference-servers/deployment.yaml` leaves, and a data folder.
  mkdirSync(path.join(dir, "reference-servers", ".gym"), { recursive: true });
  writeFileSync(path.join(dir, "reference-servers", ".gym", "run.json"), "{}");
  mkdirSync(path.join(dir, "reference-servers", "datasets"));
  writeFileSync(
    path.join(dir, "tsconfig.build.json"),
    JSON.stringify({
      files: [],
      references: [{ path: "sdk/tsconfig.build.json" }, { path: "reference-servers/counter" }],
    }),
  );
  writeFileSync(path.join(dir, "sdk", "tsconfig.build.json"), "{}");
  expect(buildOutputDirs(dir)).toEqual(["sdk/dist", "reference-servers/counter/dist"]);
});

it("covers every package of this repository", () => {
  const outputs = buildOutputDirs(REPO);
  expect(outputs).toContain("sdk/dist");
  expect(outputs).toContain("templates/dist");
  expect(outputs).toContain("reference-servers/counter/dist");
  expect(outputs.some((output) => output.includes(".gym"))).toBe(false);
});
