/**
 * A server process's logger writes asynchronously, and loses nothing when the process exits
 * right after logging (`process.exit`, as a second stop signal or a failed start does): what is
 * still buffered is written before the process ends.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

const LOGGER = fileURLToPath(new URL("../../../sdk/src/cli/process-logger.ts", import.meta.url));
const TSX = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;
const LINES = 20_000;

const temp = mkdtempSync(path.join(tmpdir(), "gym-process-logger-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

describe("processLogger", () => {
  it.each(["exit", "exit-code"])("writes every line logged before %s", (how) => {
    const script = path.join(temp, `log-${how}.ts`);
    writeFileSync(
      script,
      [
        `import { processLogger } from ${JSON.stringify(pathToFileURL(LOGGER).href)};`,
        `const logger = processLogger("info");`,
        `for (let i = 0; i < ${LINES}; i++) logger.info({ i }, "line");`,
        // At once, with the asynchronous writes still buffered.
        how === "exit" ? "process.exit(3);" : "process.exitCode = 3;",
      ].join("\n"),
    );
    const result = spawnSync(process.execPath, ["--import", TSX, script], {
      stdio: ["ignore", "pipe", "pipe"],
      encoding: "utf8",
      maxBuffer: 64 * 1024 * 1024,
      timeout: 60_000,
    });
    expect(result.status).toBe(3);
    const lines = result.stdout.split("\n").filter((line) => line !== "");
    expect(lines).toHaveLength(LINES);
    expect(JSON.parse(lines.at(-1) ?? "{}")).toMatchObject({ i: LINES - 1, msg: "line" });
  });
});
