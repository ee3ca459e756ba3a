/**
 * Every relative link of the documentation leads somewhere: the file exists, and a `#fragment`
 * names a heading of it (GitHub's anchors: lowercased, punctuation dropped, spaces to hyphens,
 * repeats numbered).
 */
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const REPO = fileURLToPath(new URL("../../../", import.meta.url));

function markdownFiles(): string[] {
  const files = [path.join(REPO, "README.md")];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const file = path.join(dir, entry.name);
      if (entry.isDirectory() && entry.name !== "node_modules") walk(file);
      else if (entry.name.endsWith(".md")) files.push(file);
    }
  };
  for (const dir of ["docs", "deploy"]) {
    if (existsSync(path.join(REPO, dir))) walk(path.join(REPO, dir));
  }
  return files;
}

/** The text outside fenced code blocks and inline code. */
function prose(text: string): string {
  return text.replace(/^```[\s\S]*?^```/gm, "").replace(/`[^`\n]*`/g, "``");
}

/** GitHub's anchor for each heading of a Markdown text. */
function anchorsOf(text: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  const withoutCode = text.replace(/^```[\s\S]*?^```/gm, "");
  for (const match of withoutCode.matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const base = (match[1] ?? "")
      .toLowerCase()
      .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
      .replace(/[^\p{L}\p{N}\s_-]/gu, "")
      .replace(/\s/g, "-");
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    anchors.add(count === 0 ? base : `${base}-${count}`);
  }
  return anchors;
}

describe("documentation links", () => {
  it("computes GitHub's anchors", () => {
    expect([...anchorsOf("## `gym serve <deployment>`\n## A, b & c\n## A, b & c\n")]).toEqual([
      "gym-serve-deployment",
      "a-b--c",
      "a-b--c-1",
    ]);
  });

  it("every relative link names a file that exists, and a heading of it", () => {
    const broken: string[] = [];
    for (const file of markdownFiles()) {
      const text = readFileSync(file, "utf8");
      for (const match of prose(text).matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = match[1] ?? "";
        if (/^[a-z]+:/i.test(target)) continue; // http:, https:, mailto:
        const [linked = "", fragment] = target.split("#");
        const resolved = linked === "" ? file : path.resolve(path.dirname(file), linked);
        const where = `${path.relative(REPO, file)}: (${target})`;
        if (!existsSync(resolved)) {
          broken.push(`${where}: no such file`);
          continue;
        }
        if (fragment === undefined || statSync(resolved).isDirectory()) continue;
        if (!resolved.endsWith(".md")) continue;
        if (!anchorsOf(readFileSync(resolved, "utf8")).has(fragment)) {
          broken.push(`${where}: no heading with anchor #${fragment}`);
        }
      }
    }
    expect(broken).toEqual([]);
  });
});
