/**
 * The numbered commands printed at the end: into the project, install, test, serve it under
 * `gym serve` in the foreground (its `serve` script builds first), and checkpoint it from a
 * second terminal into a new `checkpoints/<UTC time>` directory (its `checkpoint` script).
 *
 * @module
 */
import path from "node:path";
import type { PackageManager } from "./package-manager.js";

/** Quotes a path for a shell when it holds a space. */
function quoted(value: string): string {
  return value.includes(" ") ? `"${value}"` : value;
}

/** The lines to print, numbered; the first is a heading. */
export function nextSteps(input: {
  readonly pm: PackageManager;
  readonly cwd: string;
  readonly projectDir: string;
}): string[] {
  const { pm } = input;
  const run = (script: string): string => `${pm} run ${script}`;
  const steps: [string, string][] = [];
  const relative = path.relative(input.cwd, input.projectDir);
  if (relative !== "") steps.push([`cd ${quoted(relative)}`, ""]);
  steps.push(
    [`${pm} install`, ""],
    [run("test"), "the tests, with a checkpoint and restore at every boundary"],
    [run("serve"), "build, then gym serve deployment.yaml: Swagger UI at <url>/docs"],
    [run("checkpoint"), "in a second terminal: gym ckpt checkpoint into checkpoints/<UTC time>"],
  );
  const width = Math.max(...steps.map(([command]) => command.length));
  return [
    "Done. Now run:",
    "",
    ...steps.map(
      ([command, what], i) =>
        `  ${i + 1}. ${what === "" ? command : `${command.padEnd(width)}   # ${what}`}`,
    ),
  ];
}
