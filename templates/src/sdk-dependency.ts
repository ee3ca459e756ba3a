/**
 * How the generated `package.json` depends on `gym-participant-sdk`: a checkout's `sdk/` packed
 * into the project (the default in a checkout), or what `--sdk` names (a link to a directory, a
 * tarball, a version), or the registry version matching the scaffolder's.
 *
 * @module
 */
import { existsSync, readFileSync, statSync } from "node:fs";
import path from "node:path";

/** The SDK's package name. */
export const SDK_PACKAGE = "gym-participant-sdk";

/** A `--sdk` value that cannot be used; the message says what to pass instead. */
export class SdkSpecError extends Error {
  override name = "SdkSpecError";
}

/** Whether `dir` holds the SDK's package (its `package.json` names it). */
function isSdkPackage(dir: string): boolean {
  try {
    const manifest = JSON.parse(readFileSync(path.join(dir, "package.json"), "utf8")) as {
      name?: unknown;
    };
    return manifest.name === SDK_PACKAGE;
  } catch {
    return false;
  }
}

/** A `file:` spec for `target`, relative to the project (as `npm install <path>` writes it). */
function fileSpec(target: string, projectDir: string): string {
  const relative = path.relative(projectDir, target).split(path.sep).join("/");
  return `file:${relative.startsWith(".") ? relative : `./${relative}`}`;
}

/**
 * Where the checkout's `sdk/` is when this scaffolder runs from a checkout of the repository
 * (its own package sits beside `sdk/`); null for an installed scaffolder.
 */
export function checkoutSdkDir(scaffolderDir: string): string | null {
  const dir = path.resolve(scaffolderDir, "..", "sdk");
  return isSdkPackage(dir) ? dir : null;
}

/**
 * The dependency spec written for the SDK when `--sdk` is given, or the registry range when
 * neither `--sdk` nor a checkout says otherwise (a checkout's SDK is packed: see vendor-sdk.ts).
 *
 * - No `--sdk`: `^<scaffolderVersion>` from the registry.
 * - A directory holding the SDK's package, or a `.tgz` file: `file:` it, relative to the project.
 * - `file:`, `link:`, `npm:`, `git+…`, `http(s)://…`: as given.
 * - Anything else is a version, range or tag, as given; a value that looks like a path but
 *   names nothing is refused.
 *
 * @example
 * sdkDependency({ sdk: "../gym/sdk", cwd: "/work", projectDir: "/work/app", ... }); // "file:../gym/sdk"
 */
export function sdkDependency(input: {
  /** The `--sdk` value, if given. */
  readonly sdk?: string;
  /** Where relative `--sdk` paths start. */
  readonly cwd: string;
  /** The project being created. */
  readonly projectDir: string;
  /** The scaffolder's version, the default range when no checkout is found. */
  readonly scaffolderVersion: string;
}): string {
  const { sdk, cwd, projectDir } = input;
  if (sdk === undefined) return `^${input.scaffolderVersion}`;
  if (/^(file:|link:|npm:|git\+|https?:\/\/)/.test(sdk)) return sdk;
  const target = path.resolve(cwd, sdk);
  if (existsSync(target)) {
    if (statSync(target).isDirectory()) {
      if (!isSdkPackage(target)) {
        throw new SdkSpecError(
          `--sdk ${sdk}: ${target} does not hold the ${SDK_PACKAGE} package; pass its sdk/ directory, a tarball from npm pack, or a version`,
        );
      }
      return fileSpec(target, projectDir);
    }
    if (target.endsWith(".tgz") || target.endsWith(".tar.gz")) return fileSpec(target, projectDir);
  }
  if (/^[./~]|\.t(ar\.)?gz$/.test(sdk) || sdk.includes(path.sep)) {
    throw new SdkSpecError(
      `--sdk ${sdk}: no such directory or tarball (${target}); pass a checkout's sdk/ directory, a tarball from npm pack, or a version`,
    );
  }
  return sdk;
}
