import { readFileSync, readdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

/** The unit and integration suites: they run in shared worker processes (see `projects`). */
const SHARED = ["test/unit", "test/integration"];
const ROOT = fileURLToPath(new URL(".", import.meta.url));

/**
 * What makes a unit or integration file need a process of its own: it mocks modules (`vi.mock`
 * applies only to a module not loaded yet, and its mock would stay for every later file), or
 * reads process-wide metrics (the global meter provider counts every server of the process).
 */
const NEEDS_OWN_PROCESS =
  /vi\.(mock|doMock|unmock|resetModules)\(|startTelemetry\(|\/metrics`|snapshotOf\(/;

/** The shared suites' files that {@link NEEDS_OWN_PROCESS} finds, relative to the root. */
const OWN_PROCESS = SHARED.flatMap((dir) =>
  readdirSync(path.join(ROOT, dir), { recursive: true, encoding: "utf8" })
    .map((file) => path.join(dir, file))
    .filter((file) => file.endsWith(".test.ts"))
    .filter((file) => NEEDS_OWN_PROCESS.test(readFileSync(path.join(ROOT, file), "utf8"))),
);

export default defineConfig({
  // Reference servers import the SDK by package name; tests run them against its source.
  resolve: {
    // The subpath first: an alias matches the longest key only if it is listed first.
    alias: [
      {
        find: /^gym-participant-sdk\/testing$/,
        replacement: fileURLToPath(new URL("./sdk/src/testing/index.ts", import.meta.url)),
      },
      {
        find: /^gym-participant-sdk\/controller$/,
        replacement: fileURLToPath(new URL("./sdk/src/controller.ts", import.meta.url)),
      },
      {
        find: /^gym-participant-sdk\/protocol$/,
        replacement: fileURLToPath(new URL("./sdk/src/protocol.ts", import.meta.url)),
      },
      {
        find: /^gym-participant-sdk\/capture$/,
        replacement: fileURLToPath(new URL("./sdk/src/capture/index.ts", import.meta.url)),
      },
      {
        find: /^gym-participant-sdk$/,
        replacement: fileURLToPath(new URL("./sdk/src/index.ts", import.meta.url)),
      },
    ],
  },
  test: {
    // Two cores on CI: keep forks bounded so e2e process groups are not starved.
    pool: "forks",
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 30_000,
    projects: [
      {
        extends: true,
        test: {
          // Without isolation a worker loads the SDK's modules once for all its files instead of
          // once per file: importing them was most of the unit and integration suites' CPU time.
          name: "shared",
          include: SHARED.map((dir) => `${dir}/**/*.test.ts`),
          exclude: OWN_PROCESS,
          isolate: false,
        },
      },
      {
        extends: true,
        test: {
          name: "isolated",
          include: [
            ...OWN_PROCESS,
            "test/e2e/**/*.test.ts",
            "test/templates/**/*.test.ts",
            "test/package/**/*.test.ts",
            "test/fuzz/**/*.test.ts",
            "test/sequences/**/*.test.ts",
          ],
        },
      },
    ],
  },
});
