/**
 * The layer rule of eslint.config.js: an upward import inside the SDK, a deep `sdk/src` import
 * in a test, and an internal import in a reference server each fail the lint.
 */
import { fileURLToPath } from "node:url";
import { ESLint } from "eslint";
import { describe, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const eslint = new ESLint({ cwd: ROOT });

async function restricted(file: string, code: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath: `${ROOT}${file}` });
  return (result?.messages ?? [])
    .filter((m) => m.ruleId === "no-restricted-imports")
    .map((m) => m.message);
}

describe("the layer rule", () => {
  it("refuses an upward import inside the SDK and names the layers", async () => {
    const planted = 'import type { Server } from "../server/server.js";\nexport type X = Server;\n';
    const messages = await restricted("sdk/src/wire/planted.ts", planted);
    expect(messages).toHaveLength(1);
    expect(messages[0]).toContain("wire is below");
  });

  it("refuses an import of an entry point from inside the SDK", async () => {
    const planted = 'export { Server } from "../index.js";\n';
    expect(await restricted("sdk/src/participants/planted.ts", planted)).toHaveLength(1);
  });

  it("accepts a downward import", async () => {
    const ok =
      'import type { EpisodeId } from "../identity/episode-id.js";\nexport type X = EpisodeId;\n';
    expect(await restricted("sdk/src/server/planted.ts", ok)).toEqual([]);
  });

  it("refuses a deep sdk/src import in a test and an internal one in a reference server", async () => {
    const deep = 'export { ConfigError } from "../../../sdk/src/errors.js";\n';
    expect(await restricted("test/unit/api/planted.test.ts", deep)).toHaveLength(1);
    const internal = 'export { ConfigError } from "#sdk/errors.js";\n';
    expect(await restricted("reference-servers/counter/src/planted.ts", internal)).toHaveLength(1);
  });
});
