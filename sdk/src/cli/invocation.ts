/**
 * How the user ran `gym`, as words to type in a shell: the prefix of every command the CLI
 * prints as a hint or next step. A bare `gym` is only on `PATH` when the SDK is installed
 * globally, so a hint copied from `npm run gym -- …` or `npx gym …` must say so.
 *
 * @see docs/deployment.md
 */

/** The prefix when nothing says otherwise, and of in-process runs (tests). */
export const DEFAULT_COMMAND = "gym";

/** The prefix through the `gym` npm script: npm passes what follows `--` on to it. */
export const NPM_SCRIPT_COMMAND = "npm run gym --";

/** The prefix of the SDK as a project's dependency: `npx` finds `node_modules/.bin/gym`. */
export const NPX_COMMAND = "npx gym";

/**
 * The command prefix a user should type to run `gym` again, decided from the process's
 * environment and `process.argv[1]` (the script Node runs). The first rule that holds wins:
 *
 * 1. `npm_lifecycle_event` is `gym` → `npm run gym --`: npm is running a script named `gym`
 *    (this repository's root script, or a project's own), and that script is what a shell has.
 * 2. `argv1` has a path segment named exactly `node_modules` (`node_modules/.bin/gym`,
 *    `node_modules/gym-participant-sdk/dist/cli/main.js`, npx's cache) → `npx gym`: the SDK is
 *    a dependency, and a shell does not have `node_modules/.bin` on its `PATH`.
 * 3. `argv1` is a checkout's committed bin, `sdk/bin/gym.js` (run by its path) → `npx gym`: npm
 *    links that bin into the checkout's `node_modules/.bin`.
 * 4. `argv1` is the TypeScript source entry, `sdk/src/cli/main.ts` (`npm run openapi`, `npx tsx
 *    sdk/src/cli/main.ts` in a checkout of this repository) → `npm run gym --`: a checkout has
 *    no `gym` on any `PATH`, and its root script runs that very file.
 * 5. `npm_lifecycle_event` is anything else (`npm run checkpoint`, or `npx` itself) → `npx gym`:
 *    npm put `node_modules/.bin` on the script's `PATH`; a shell does not.
 * 6. Otherwise → `gym`: it was found on `PATH` (a global install) or run by its path.
 *
 * An empty variable counts as unset; `/` and `\` both separate path segments.
 *
 * @example
 * invokedAs(process.env, process.argv[1]); // "npm run gym --" under `npm run gym -- …`
 */
export function invokedAs(env: NodeJS.ProcessEnv, argv1: string | undefined): string {
  const event = env.npm_lifecycle_event ?? "";
  if (event === "gym") return NPM_SCRIPT_COMMAND;
  if (argv1 !== undefined && underNodeModules(argv1)) return NPX_COMMAND;
  if (argv1 !== undefined && isCheckoutBin(argv1)) return NPX_COMMAND;
  if (argv1 !== undefined && isSourceEntry(argv1)) return NPM_SCRIPT_COMMAND;
  if (event !== "") return NPX_COMMAND;
  return DEFAULT_COMMAND;
}

// Both separators, so the rules do not depend on the platform the tests run on.
function segments(file: string): string[] {
  return file.split(/[\\/]/);
}

function underNodeModules(file: string): boolean {
  return segments(file).includes("node_modules");
}

function isSourceEntry(file: string): boolean {
  return segments(file).slice(-4).join("/") === "sdk/src/cli/main.ts";
}

function isCheckoutBin(file: string): boolean {
  return segments(file).slice(-3).join("/") === "sdk/bin/gym.js";
}
