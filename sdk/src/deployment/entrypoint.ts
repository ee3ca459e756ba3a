/**
 * A server's entrypoint resolved to the module file a process imports, the way Node.js would
 * find it, but checked up front so a wrong path is reported before anything starts.
 */
import { readFileSync, statSync } from "node:fs";
import path from "node:path";

/** Module file extensions tried when an entrypoint names a file without one. */
const MODULE_EXTENSIONS = [".js", ".mjs", ".cjs", ".ts", ".mts", ".cts"];
/** Index files tried in a directory without package.json. */
const INDEX_FILES = ["index.js", "index.mjs", "index.ts", "index.mts", "main.js", "main.ts"];

function fileKind(file: string): "file" | "dir" | null {
  try {
    const stat = statSync(file);
    return stat.isDirectory() ? "dir" : stat.isFile() ? "file" : null;
  } catch {
    return null;
  }
}

/** An entrypoint that cannot be resolved; `message` says why and what to do. */
export class EntrypointError extends Error {
  override readonly name = "EntrypointError";
}

/** The file a package.json `exports` maps `.` to, preferring the `import`/`node` conditions. */
function exportTarget(exports: unknown): string | null {
  if (typeof exports === "string") return exports;
  if (Array.isArray(exports)) {
    for (const item of exports) {
      const target = exportTarget(item);
      if (target !== null) return target;
    }
    return null;
  }
  if (exports === null || typeof exports !== "object") return null;
  const record = exports as Record<string, unknown>;
  if ("." in record) return exportTarget(record["."]);
  for (const condition of ["import", "node", "default"]) {
    if (condition in record) {
      const target = exportTarget(record[condition]);
      if (target !== null) return target;
    }
  }
  return null;
}

function fromPackageDir(dir: string, shown: string): string {
  const manifestPath = path.join(dir, "package.json");
  if (fileKind(manifestPath) === "file") {
    let manifest: { exports?: unknown; main?: unknown };
    try {
      manifest = JSON.parse(readFileSync(manifestPath, "utf8")) as typeof manifest;
    } catch (error) {
      throw new EntrypointError(
        `entrypoint ${shown}: ${manifestPath} is not valid JSON (${(error as Error).message}): fix it`,
      );
    }
    const target =
      exportTarget(manifest.exports) ??
      (typeof manifest.main === "string" ? manifest.main : "index.js");
    const file = path.resolve(dir, target);
    if (fileKind(file) !== "file") {
      throw new EntrypointError(
        `entrypoint ${shown}: its package.json points at ${target}, which does not exist: ` +
          `build the package first (e.g. npm run build in ${dir})`,
      );
    }
    return file;
  }
  for (const index of INDEX_FILES) {
    const file = path.join(dir, index);
    if (fileKind(file) === "file") return file;
  }
  throw new EntrypointError(
    `entrypoint ${shown} is a directory with neither package.json nor ${INDEX_FILES.join("/")}: ` +
      "point it at the server module or its package",
  );
}

/**
 * Resolves an entrypoint relative to `baseDir` to a module file: a file as is (`.ts` allowed;
 * a missing extension is tried), a directory through its package.json (`exports`, then `main`)
 * or an index file, and a bare package name through `node_modules` upwards.
 */
export function resolveEntrypoint(entrypoint: string, baseDir: string): string {
  const direct = path.resolve(baseDir, entrypoint);
  const kind = fileKind(direct);
  if (kind === "file") return direct;
  if (kind === "dir") return fromPackageDir(direct, entrypoint);
  for (const extension of MODULE_EXTENSIONS) {
    if (fileKind(direct + extension) === "file") return direct + extension;
  }
  const bare = !entrypoint.startsWith(".") && !path.isAbsolute(entrypoint);
  if (bare) {
    for (let dir = baseDir; ; dir = path.dirname(dir)) {
      const candidate = path.join(dir, "node_modules", entrypoint);
      if (fileKind(candidate) === "dir") return fromPackageDir(candidate, entrypoint);
      if (path.dirname(dir) === dir) break;
    }
  }
  throw new EntrypointError(
    `entrypoint ${entrypoint} not found (looked for ${direct}${bare ? " and node_modules/" + entrypoint : ""}): ` +
      "fix the path; it is relative to the deployment file",
  );
}
