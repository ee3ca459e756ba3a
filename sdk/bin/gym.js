#!/usr/bin/env node
// The bin is this committed file, not dist/cli/main.js: npm links a workspace's bins at install
// time only when their target exists, and in a checkout dist/ exists only after `npm run build`.
import { existsSync } from "node:fs";
import process from "node:process";
import { URL } from "node:url";

const entry = new URL("../dist/cli/main.js", import.meta.url);
if (!existsSync(entry)) {
  process.stderr.write("gym: dist/ is missing; run `npm run build` in the repository first\n");
  process.exit(1);
}
await import(entry.href);
