/**
 * `gym serve` with a TypeScript entrypoint where tsx cannot be found: nothing is started, and the
 * error ends with what to do. tsx is always installed in this repository, so its lookup is made
 * to fail here.
 */
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it, vi } from "vitest";
import type { Io } from "#sdk/cli/output.js";
import { writeDeployment } from "../../e2e/helpers.js";
import { runCli } from "#sdk/cli/program.js";

vi.mock("node:module", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:module")>();
  const createRequire = (base: string | URL): NodeJS.Require => {
    const require = actual.createRequire(base);
    const resolve = (id: string, options?: { paths?: string[] }): string => {
      if (id === "tsx")
        throw Object.assign(new Error("Cannot find module 'tsx'"), { code: "MODULE_NOT_FOUND" });
      return require.resolve(id, options);
    };
    return Object.assign(require, {
      resolve: Object.assign(resolve, { paths: require.resolve.paths }),
    });
  };
  return { ...actual, createRequire, default: { ...actual, createRequire } };
});

const temp = mkdtempSync(path.join(tmpdir(), "gym-no-tsx-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

describe("gym serve without tsx", () => {
  it("starts nothing and says to install tsx or point the entrypoint at the built .js", async () => {
    const deployment = writeDeployment(temp, "never-healthy.yaml");
    let err = "";
    const io: Io = { out: () => {}, err: (text) => void (err += `${text}\n`), cwd: temp, env: {} };
    const code = await runCli(["serve", deployment, "--detach"], io);
    expect(code).toBe(1);
    expect(err).toMatch(
      /gym: server silent \(.*never-healthy\.ts\) is TypeScript and must run under tsx, but tsx cannot be found/,
    );
    expect(err).toMatch(
      /what to do: install tsx as a dependency next to the server \(npm install tsx\), or build the server to JavaScript and point its entrypoint at the built \.js file/,
    );
    expect(existsSync(path.join(temp, ".gym", "run.json"))).toBe(false);
    expect(existsSync(path.join(temp, ".gym", "logs"))).toBe(false);
  });
});
