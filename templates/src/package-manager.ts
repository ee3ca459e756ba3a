/**
 * The package manager that ran the scaffolder, read from `npm_config_user_agent` (each of npm,
 * pnpm, yarn and bun sets it, e.g. `pnpm/9.1.0 npm/? node/v20.19.0 linux x64`), so the printed
 * commands are the ones the person uses.
 *
 * @module
 */

/** A package manager the printed commands are written for. */
export type PackageManager = "npm" | "pnpm" | "yarn" | "bun";

/** The package manager of `userAgent`; npm when absent or unknown. */
export function packageManagerOf(userAgent: string | undefined): PackageManager {
  const name = userAgent?.split(" ")[0]?.split("/")[0];
  return name === "pnpm" || name === "yarn" || name === "bun" ? name : "npm";
}
