/**
 * The `dist/` directories `npm run build` writes: one per project referenced by the solution
 * file `tsconfig.build.json`. Read from the solution, not from a folder listing, so run state a
 * user leaves beside the packages (`reference-servers/.gym` after `gym serve`) is never taken
 * for a package.
 */
import { readFileSync, statSync } from "node:fs";
import path from "node:path";

interface SolutionFile {
  references?: { path: string }[];
}

/** Repository-relative `dist/` directory of every project the build solution references. */
export function buildOutputDirs(repoRoot: string): string[] {
  const solution = JSON.parse(
    readFileSync(path.join(repoRoot, "tsconfig.build.json"), "utf8"),
  ) as SolutionFile;
  return (solution.references ?? []).map(({ path: reference }) => {
    // A reference names a directory (its tsconfig.json) or a config file inside one.
    const target = path.join(repoRoot, reference);
    const dir = statSync(target).isDirectory() ? target : path.dirname(target);
    return path.relative(repoRoot, path.join(dir, "dist")).split(path.sep).join("/");
  });
}
