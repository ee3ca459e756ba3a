import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

export default defineConfig({
  // Reference servers import the SDK by package name; tests run them against its source.
  resolve: {
    alias: {
      "gym-participant-sdk": fileURLToPath(new URL("./sdk/src/index.ts", import.meta.url)),
    },
  },
  test: {
    include: ["test/unit/**/*.test.ts", "test/integration/**/*.test.ts", "test/e2e/**/*.test.ts"],
    // Two cores on CI: keep forks bounded so e2e process groups are not starved.
    pool: "forks",
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
