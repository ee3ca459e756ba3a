/**
 * The default SDK dependency of a project scaffolded from a checkout: the checkout's `sdk/`
 * packed by `npm pack` into the project's `vendor/` directory, so the project installs the SDK
 * and its dependencies on its own and keeps working when the checkout is cleaned, rebuilt or
 * gone. (A `file:` link to the checkout would resolve the SDK's dependencies from the checkout's
 * `node_modules`.)
 *
 * @module
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import path from "node:path";

/** The project directory the tarball goes in (committed with the project). */
export const VENDOR_DIR = "vendor";

/** A checkout's SDK to pack into the project. */
export interface VendoredSdk {
  /** The checkout's `sdk/` package directory. */
  readonly sdkDir: string;
  /** The tarball's file name, as `npm pack` names it: `gym-participant-sdk-<version>.tgz`. */
  readonly tarball: string;
  /** The dependency spec: `file:vendor/<tarball>`. */
  readonly spec: string;
}

/**
 * What packing the checkout's SDK will write, checked before anything is written: the SDK must
 * be built (`npm pack` ships `dist/`).
 */
export function planVendoredSdk(sdkDir: string): VendoredSdk {
  if (!existsSync(path.join(sdkDir, "dist", "index.js"))) {
    throw new Error(
      `${sdkDir} is not built, so it cannot be packed into the project: run \`npm run build\` in ${path.dirname(sdkDir)} first`,
    );
  }
  const { name, version } = JSON.parse(readFileSync(path.join(sdkDir, "package.json"), "utf8")) as {
    name: string;
    version: string;
  };
  const tarball = `${name.replace(/^@/, "").replace("/", "-")}-${version}.tgz`;
  return { sdkDir, tarball, spec: `file:${VENDOR_DIR}/${tarball}` };
}

/** Packs the SDK into `<projectDir>/vendor/`; returns the tarball's path. */
export function packVendoredSdk(plan: VendoredSdk, projectDir: string): string {
  const destination = path.join(projectDir, VENDOR_DIR);
  mkdirSync(destination, { recursive: true });
  // The scaffolder's own npm settings (npx's) must not leak into the pack: a clean environment
  // but for PATH and HOME, which npm needs to run and find its cache.
  const result = spawnSync("npm", ["pack", "--silent", "--pack-destination", destination], {
    cwd: plan.sdkDir,
    encoding: "utf8",
    env: { PATH: process.env.PATH, HOME: process.env.HOME },
  });
  const packed = path.join(destination, plan.tarball);
  if (result.status !== 0 || !existsSync(packed)) {
    const why = result.error?.message ?? result.stderr.trim().split("\n").slice(-3).join("; ");
    throw new Error(`npm pack of ${plan.sdkDir} failed: ${why}`);
  }
  return packed;
}
