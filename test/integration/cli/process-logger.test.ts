/**
 * A server process's logger buffers its writes, loses nothing when the process exits right after
 * logging (`process.exit`, as a second stop signal or a failed start does): what is still
 * buffered is written before the process ends; and writes a few lines of a quiet process soon,
 * without waiting for its buffer to fill.
 */
import { spawn, spawnSync } from "node:child_process";
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

  it("writes a quiet process's few lines without waiting for its buffer to fill", async () => {
    const script = path.join(temp, "log-quiet.ts");
    writeFileSync(
      script,
      [
        `import { processLogger } from ${JSON.stringify(pathToFileURL(LOGGER).href)};`,
        `const logger = processLogger("info");`,
        `for (let i = 0; i < 3; i++) logger.info({ i }, "quiet");`,
        // Alive until killed: only a timed flush writes the lines before then.
        "setInterval(() => undefined, 60_000);",
      ].join("\n"),
    );
    const child = spawn(process.execPath, ["--import", TSX, script], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    try {
      const lines = await new Promise<string[]>((resolve, reject) => {
        let text = "";
        const timer = setTimeout(
          () => reject(new Error(`only this was written within 20 s: ${JSON.stringify(text)}`)),
          20_000,
        );
        child.stdout.setEncoding("utf8");
        child.stdout.on("data", (chunk: string) => {
          text += chunk;
          const complete = text.split("\n").filter((line) => line !== "");
          if (complete.length >= 3 && text.endsWith("\n")) {
            clearTimeout(timer);
            resolve(complete);
          }
        });
      });
      expect(lines.map((line) => (JSON.parse(line) as { i: number }).i)).toEqual([0, 1, 2]);
      expect(child.exitCode).toBeNull();
    } finally {
      child.kill("SIGKILL");
    }
  });
});
