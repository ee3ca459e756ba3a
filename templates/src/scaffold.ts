/**
 * Writing the project: the shared files and the chosen template copied as they are (only
 * `_gitignore` renamed, the package name and the verify declaration filled in), the target
 * directory emptied first only when the person asked for it.
 *
 * @module
 */
import { cpSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { templateName, type Choices } from "./choices.js";
import { SDK_PACKAGE } from "./sdk-dependency.js";

/**
 * Files renamed on copy. npm never publishes a `.gitignore` (it renames it `.npmignore`), so the
 * template keeps it as `_gitignore`.
 */
const RENAMES: Readonly<Record<string, string>> = { _gitignore: ".gitignore" };

/** The text in template files replaced by the package name. */
export const NAME_TOKEN = "%PACKAGE_NAME%";
/** The verify declaration line as templates write it (the `wait` default). */
const VERIFY_LINE = 'static override checkpointVerify = "wait";';

/** What {@link scaffold} writes. */
export interface ScaffoldInput {
  readonly choices: Choices;
  /** The absolute directory of the project. */
  readonly projectDir: string;
  readonly packageName: string;
  /** The `gym-participant-sdk` dependency spec. */
  readonly sdkSpec: string;
  /** Where `template-*` folders are (the scaffolder's package). */
  readonly templatesDir: string;
  /** Empty `projectDir` first (keeping `.git`). */
  readonly overwrite: boolean;
}

/** Whether `dir` is missing or holds nothing but a `.git`. */
export function isEmptyDir(dir: string): boolean {
  try {
    return readdirSync(dir).every((entry) => entry === ".git");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return true;
    throw error;
  }
}

/** Removes everything in `dir` but `.git`. */
function emptyDir(dir: string): void {
  for (const entry of readdirSync(dir)) {
    if (entry !== ".git") rmSync(path.join(dir, entry), { recursive: true, force: true });
  }
}

/** Copies `from` into `to`, renaming per {@link RENAMES}; returns the written paths (relative). */
function copyTree(from: string, to: string, prefix = ""): string[] {
  const written: string[] = [];
  mkdirSync(to, { recursive: true });
  for (const entry of readdirSync(from, { withFileTypes: true })) {
    const name = RENAMES[entry.name] ?? entry.name;
    const source = path.join(from, entry.name);
    const target = path.join(to, name);
    if (entry.isDirectory()) written.push(...copyTree(source, target, `${prefix}${name}/`));
    else {
      cpSync(source, target);
      written.push(`${prefix}${name}`);
    }
  }
  return written;
}

/** Rewrites one text file of the project in place. */
function edit(file: string, change: (text: string) => string): void {
  writeFileSync(file, change(readFileSync(file, "utf8")));
}

/**
 * Writes the project and returns the files written (relative to it, sorted). Refuses nothing:
 * the caller checks the target directory first (see {@link isEmptyDir}).
 */
export function scaffold(input: ScaffoldInput): string[] {
  const { projectDir, choices } = input;
  if (input.overwrite) {
    mkdirSync(projectDir, { recursive: true });
    emptyDir(projectDir);
  }
  const written = [
    ...copyTree(path.join(input.templatesDir, "template-shared"), projectDir),
    ...copyTree(path.join(input.templatesDir, `template-${templateName(choices)}`), projectDir),
  ];
  const manifest = path.join(projectDir, "package.json");
  const pkg = JSON.parse(readFileSync(manifest, "utf8")) as {
    name: string;
    dependencies: Record<string, string>;
  };
  pkg.name = input.packageName;
  pkg.dependencies[SDK_PACKAGE] = input.sdkSpec;
  writeFileSync(manifest, `${JSON.stringify(pkg, null, 2)}\n`);
  for (const file of written.filter((f) => /\.(md|ts|ya?ml)$/.test(f))) {
    edit(path.join(projectDir, file), (text) => text.replaceAll(NAME_TOKEN, input.packageName));
  }
  if (choices.verify === "replay") {
    for (const file of written.filter((f) => f.endsWith(".ts"))) {
      edit(path.join(projectDir, file), (text) =>
        text.replace(VERIFY_LINE, VERIFY_LINE.replace('"wait"', '"replay"')),
      );
    }
  }
  return [...new Set(written)].sort();
}

/** A valid npm package name made from a directory name (create-vite's rule). */
export function toPackageName(dirName: string): string {
  const name = dirName
    .trim()
    .toLowerCase()
    .replace(/\s+/g, "-")
    .replace(/^[._]+/, "")
    .replace(/[^a-z\d\-~]+/g, "-");
  return name === "" ? "gym-participant" : name;
}
