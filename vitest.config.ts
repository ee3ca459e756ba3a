import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

/** The unit and integration suites: they run in shared worker processes (see `projects`). */
const SHARED = ["test/unit/**/*.test.ts", "test/integration/**/*.test.ts"];

/**
 * Unit and integration files that need a process of their own: they mock modules (`vi.mock`
 * applies only to a module not loaded yet, and its mock would stay for every later file), or
 * read process-wide metrics (the global meter provider counts every server of the process).
 */
const OWN_PROCESS = [
  "test/unit/capture-ledger/durability.test.ts",
  "test/unit/capture-ledger/fence-links.test.ts",
  "test/unit/capture-ledger/import-cache.test.ts",
  "test/unit/capture-ledger/import-stamps-late.test.ts",
  "test/unit/capture-ledger/writer-registry.test.ts",
  "test/unit/control/restore-install-wait.test.ts",
  "test/unit/store/checkpoint-dirs.test.ts",
  "test/unit/store/writer-fs.test.ts",
  "test/integration/cli/serve-without-tsx.test.ts",
  "test/integration/cli/top.test.ts",
  "test/integration/client/clock-offset.test.ts",
  "test/integration/telemetry/telemetry.test.ts",
];

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
          include: SHARED,
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
