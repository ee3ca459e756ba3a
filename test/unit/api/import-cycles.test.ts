/**
 * No import circle in `sdk/src`. The lint rule of eslint.config.js (`import-x/no-cycle`) fails on
 * a circle of imports that load modules (static or dynamic); it passes over type-only imports,
 * which the check below includes: every import the TypeScript scanner finds, types too.
 */
import { readFileSync, readdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { ESLint } from "eslint";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const eslint = new ESLint({ cwd: ROOT });

/** The cycle messages of linting `code` as if it were the file `file`. */
async function cycles(file: string, code: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath: `${ROOT}${file}` });
  return (result?.messages ?? [])
    .filter((m) => m.ruleId === "import-x/no-cycle")
    .map((m) => m.message);
}

/** The file's own text, with `line` added after its imports' first line. */
function withImport(file: string, line: string): string {
  return `${line}\n${readFileSync(`${ROOT}${file}`, "utf8")}`;
}

describe("the import-cycle rule", () => {
  it("refuses a module importing a module that imports it", async () => {
    const file = "sdk/src/identity/episode-id.ts";
    const planted = withImport(file, 'import "./scope-keys.js";');
    expect(await cycles(file, planted)).toEqual(["Dependency cycle detected"]);
  }, 60_000);

  it("accepts the modules as they are", async () => {
    for (const file of [
      "sdk/src/identity/episode-id.ts",
      "sdk/src/participants/model/policy-participant.ts",
      "sdk/src/cli/run-server.ts",
    ]) {
      expect(await cycles(file, readFileSync(`${ROOT}${file}`, "utf8"))).toEqual([]);
    }
  }, 60_000);
});

const SRC = path.join(ROOT, "sdk/src");

/** Every module of `sdk/src` and the modules it imports (relative specifiers, types included). */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  const files = readdirSync(SRC, { recursive: true, encoding: "utf8" }).filter(
    (file) => file.endsWith(".ts") && !file.endsWith(".d.ts"),
  );
  for (const file of files) {
    const text = readFileSync(path.join(SRC, file), "utf8");
    const { importedFiles } = ts.preProcessFile(text, true, true);
    const targets = importedFiles
      .map((imported) => imported.fileName)
      .filter((name) => name.startsWith("."))
      .map((name) => path.normalize(path.join(path.dirname(file), name)).replace(/\.js$/, ".ts"));
    graph.set(path.normalize(file), targets);
  }
  return graph;
}

/** The first circle found in `graph` (its modules in import order, the first again last), or null. */
function findCycle(graph: ReadonlyMap<string, readonly string[]>): string[] | null {
  const done = new Set<string>();
  const onPath: string[] = [];
  const visit = (node: string): string[] | null => {
    const at = onPath.indexOf(node);
    if (at >= 0) return [...onPath.slice(at), node];
    if (done.has(node)) return null;
    onPath.push(node);
    for (const next of graph.get(node) ?? []) {
      const cycle = visit(next);
      if (cycle !== null) return cycle;
    }
    onPath.pop();
    done.add(node);
    return null;
  };
  for (const node of graph.keys()) {
    const cycle = visit(node);
    if (cycle !== null) return cycle;
  }
  return null;
}

describe("the import graph of sdk/src, type-only imports included", () => {
  it("has no circle", () => {
    expect(findCycle(importGraph())).toBeNull();
  });

  it("finds a planted circle closed by a type-only import (the model's participant and its coordinator)", () => {
    const graph = importGraph();
    const participant = path.normalize("participants/model/policy-participant.ts");
    const coordinator = path.normalize("workers/coordinated-policy.ts");
    // The coordinator imports the participant's types; the participant importing it closes a circle.
    expect(graph.get(coordinator)).toContain(participant);
    graph.set(participant, [...(graph.get(participant) ?? []), coordinator]);
    const cycle = findCycle(graph);
    expect(cycle).toContain(participant);
    expect(cycle).toContain(coordinator);
  });
});
