/**
 * How the CLI starts Node processes of its own (server processes, the detached supervisor):
 * `process.execPath`, plus `--import tsx` when the script or the server module is TypeScript
 * (running from source, or a `.ts` entrypoint).
 */
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { CliError } from "./output.js";

/** Whether this CLI runs from TypeScript source (under tsx) rather than from `dist/`. */
export const RUNNING_FROM_SOURCE = import.meta.url.endsWith(".ts");

/** The file of a sibling module of this CLI (`.ts` from source, `.js` from `dist/`). */
export function cliModule(name: string): string {
  return fileURLToPath(new URL(`./${name}${RUNNING_FROM_SOURCE ? ".ts" : ".js"}`, import.meta.url));
}

/** Whether a module path needs a TypeScript loader. */
export function isTypeScript(file: string): boolean {
  return /\.[cm]?tsx?$/.test(file);
}

/**
 * The file URL of tsx's loader, looked up from `fromDir` first, then from this CLI. `forWhat`
 * names what needs it in the error when tsx cannot be found.
 */
export function tsxLoader(fromDir: string, forWhat = "a TypeScript module"): string {
  for (const base of [path.join(fromDir, "noop.js"), fileURLToPath(import.meta.url)]) {
    try {
      return pathToFileURL(createRequire(base).resolve("tsx")).href;
    } catch {
      // try the next place
    }
  }
  throw new CliError(
    `${forWhat} is TypeScript and must run under tsx, but tsx cannot be found ` +
      `(looked up from ${fromDir} and from gym itself)`,
    "install tsx as a dependency next to the server (npm install tsx), " +
      "or build the server to JavaScript and point its entrypoint at the built .js file",
  );
}

/** The command that runs `script` with `args` under this Node, with tsx when needed. */
export function nodeCommand(
  script: string,
  args: readonly string[],
  options: { typescript?: boolean; fromDir: string },
): { command: string; args: string[] } {
  const typescript = options.typescript === true || isTypeScript(script);
  return {
    command: process.execPath,
    args: [...(typescript ? ["--import", tsxLoader(options.fromDir)] : []), script, ...args],
  };
}
