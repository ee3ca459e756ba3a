#!/usr/bin/env node
/**
 * The `gym` executable (`bin` of gym-participant-sdk; `npm run gym` from the repository root).
 *
 * @see docs/deployment.md
 */
import { runCli } from "./program.js";

const code = await runCli(process.argv.slice(2));
process.exitCode = code;
// Everything the command opened is closed, but idle keep-alive sockets may take a moment to
// go: exit once both streams are flushed rather than wait for them.
let flushed = 0;
const done = (): void => {
  if (++flushed === 2) process.exit(code);
};
process.stdout.write("", done);
process.stderr.write("", done);
