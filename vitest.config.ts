import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

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
    include: [
      "test/unit/**/*.test.ts",
      "test/integration/**/*.test.ts",
      "test/e2e/**/*.test.ts",
      "test/templates/**/*.test.ts",
      "test/package/**/*.test.ts",
      "test/fuzz/**/*.test.ts",
      "test/sequences/**/*.test.ts",
    ],
    // Two cores on CI: keep forks bounded so e2e process groups are not starved.
    pool: "forks",
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
