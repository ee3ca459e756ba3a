import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    // The tests start real servers and checkpoint and restore them many times: on a busy
    // machine that takes longer than vitest's default of 5 s.
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
