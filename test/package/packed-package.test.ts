/**
 * What `npm pack` would publish, checked file by file: the license, README and changelog ship;
 * every `exports` target exists with `types`, `import` and `default` conditions; the bin is in
 * the tarball; every source map's sources ship beside it; build-info and scratch files stay out.
 * (`npm run pack:check` adds publint and attw on the same tarballs.)
 */
import { execFileSync } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const REPO = fileURLToPath(new URL("../../", import.meta.url));

/** The files `npm pack` puts in a workspace's tarball, relative to the package. */
function packedFiles(workspace: string): Set<string> {
  const out = execFileSync(
    "npm",
    ["pack", "--dry-run", "--json", "--ignore-scripts", "-w", workspace],
    {
      cwd: REPO,
      encoding: "utf8",
      env: { PATH: process.env.PATH, HOME: process.env.HOME },
    },
  );
  const [report] = JSON.parse(out) as { files: { path: string }[] }[];
  return new Set((report?.files ?? []).map((file) => file.path));
}

/** Every source of every packed map that is not itself packed, as `map -> source`. */
function unshippedSources(workspace: string, files: Set<string>): string[] {
  const missing: string[] = [];
  for (const file of files) {
    if (!file.endsWith(".map")) continue;
    const map = JSON.parse(readFileSync(path.join(REPO, workspace, file), "utf8")) as {
      sources: string[];
    };
    for (const source of map.sources) {
      const target = path.posix.normalize(path.posix.join(path.posix.dirname(file), source));
      if (!files.has(target)) missing.push(`${file} -> ${target}`);
    }
  }
  return missing;
}

interface Manifest {
  bin: Record<string, string>;
  exports: Record<string, string | Record<string, string>>;
}

describe("the gym-participant-sdk tarball", () => {
  const files = packedFiles("sdk");
  const manifest = JSON.parse(
    readFileSync(path.join(REPO, "sdk", "package.json"), "utf8"),
  ) as Manifest;

  it("ships the license, README, changelog and bin, and no build-info files", () => {
    for (const file of ["LICENSE", "README.md", "CHANGELOG.md", "package.json"]) {
      expect(files.has(file), file).toBe(true);
    }
    for (const bin of Object.values(manifest.bin)) {
      const file = path.posix.normalize(bin);
      expect(files.has(file), file).toBe(true);
      expect(readFileSync(path.join(REPO, "sdk", file), "utf8")).toMatch(/^#!\/usr\/bin\/env node/);
    }
    expect([...files].filter((file) => file.endsWith(".tsbuildinfo"))).toEqual([]);
    // Scratch output (e.g. the API report's declarations) lives in dot-directories: none ship.
    expect(
      [...files].filter((file) => file.split("/").some((part) => part.startsWith("."))),
    ).toEqual([]);
    expect(readFileSync(path.join(REPO, "sdk", "LICENSE"), "utf8")).toMatch(
      /Apache License\s+Version 2\.0/,
    );
  });

  it("gives every export types, import and default conditions, each a packed file", () => {
    for (const [entry, target] of Object.entries(manifest.exports)) {
      if (typeof target === "string") {
        expect(files.has(path.posix.normalize(target)), `${entry}: ${target}`).toBe(true);
        continue;
      }
      expect(Object.keys(target), entry).toEqual(["types", "import", "default"]);
      for (const file of Object.values(target)) {
        expect(files.has(path.posix.normalize(file)), `${entry}: ${file}`).toBe(true);
      }
    }
  });

  it("ships the sources its source and declaration maps point at", () => {
    expect([...files].some((file) => file.endsWith(".js.map"))).toBe(true);
    expect(unshippedSources("sdk", files)).toEqual([]);
  });
});

describe("the create-gym-participant tarball", () => {
  const files = packedFiles("templates");

  it("ships the license, changelog, bin and templates, and every map's sources", () => {
    for (const file of ["LICENSE", "README.md", "CHANGELOG.md", "bin/create-gym-participant.js"]) {
      expect(files.has(file), file).toBe(true);
    }
    // Every template file: without them a published scaffolder has nothing to copy.
    const templates = readdirSync(path.join(REPO, "templates"), {
      recursive: true,
      withFileTypes: true,
    })
      .filter((entry) => entry.isFile())
      .map((entry) =>
        path.relative(path.join(REPO, "templates"), path.join(entry.parentPath, entry.name)),
      )
      .filter((file) => file.startsWith("template-"));
    expect(templates.length).toBeGreaterThan(10);
    expect(templates.filter((file) => !files.has(file.split(path.sep).join("/")))).toEqual([]);
    expect(unshippedSources("templates", files)).toEqual([]);
  });
});
