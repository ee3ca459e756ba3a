/**
 * `gym` resolves in a checkout after `npm ci`: npm links the SDK's committed bin
 * (`sdk/bin/gym.js`) into `node_modules/.bin`, so `npx gym` finds it from the repository root
 * and from any directory below it, without falling through to the registry.
 */
import { execFileSync } from "node:child_process";
import { readFileSync, realpathSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const REPO = fileURLToPath(new URL("../../", import.meta.url));
const { version } = JSON.parse(readFileSync(path.join(REPO, "sdk", "package.json"), "utf8")) as {
  version: string;
};

/** A child's environment without the test runner's npm settings; npx may not ask to install. */
function env(): NodeJS.ProcessEnv {
  const clean: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!key.startsWith("npm_")) clean[key] = value;
  }
  return { ...clean, npm_config_yes: "false", npm_config_offline: "true" };
}

describe("gym in a checkout", () => {
  it("is linked by npm to the committed bin", () => {
    const linked = realpathSync(path.join(REPO, "node_modules", ".bin", "gym"));
    expect(linked).toBe(path.join(REPO, "sdk", "bin", "gym.js"));
  });

  it.each(["", "reference-servers/counter/src", "docs"])(
    "npx gym --version answers from %s (the repository root when empty)",
    (subdir) => {
      const out = execFileSync("npx", ["--no-install", "gym", "--version"], {
        cwd: path.join(REPO, subdir),
        encoding: "utf8",
        env: env(),
        timeout: 60_000,
      });
      expect(out.trim()).toBe(version);
    },
  );
});
