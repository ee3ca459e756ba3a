#!/usr/bin/env node
/**
 * `create-gym-participant`: scaffold a checkpointable gym server. Run `--help` for every
 * choice; see templates/README.md.
 *
 * @module
 */
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { create } from "./create.js";
import { clackPrompter } from "./prompts.js";

const packageDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const { version } = JSON.parse(readFileSync(path.join(packageDir, "package.json"), "utf8")) as {
  version: string;
};

// Piped into `head`, the reader may go away early: that is not a failure of the scaffolder.
process.stdout.on("error", (error: NodeJS.ErrnoException) => {
  if (error.code !== "EPIPE") throw error;
});

process.exitCode = await create(process.argv.slice(2), {
  cwd: process.cwd(),
  env: process.env,
  isTTY: process.stdin.isTTY === true && process.stdout.isTTY === true,
  canPrompt: process.stdin.isTTY === true,
  prompter: clackPrompter,
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
  packageDir,
  version,
});
