import js from "@eslint/js";
import { createTypeScriptImportResolver } from "eslint-import-resolver-typescript";
import importX from "eslint-plugin-import-x";
import tseslint from "typescript-eslint";

/**
 * The SDK's layers, lowest first: a module may import its own folder and the folders before
 * it, never one after it (docs/architecture.md). `errors` is the file `sdk/src/errors.ts`.
 */
const LAYERS = [
  "util",
  "telemetry",
  "json",
  "errors",
  "identity",
  "wire",
  "store",
  "steps",
  "openapi",
  "control",
  "capture",
  "participants",
  "client",
  "collect",
  "deployment",
  "server",
  "workers",
  "testing",
  "conformance",
  "cli",
];

/** One `no-restricted-imports` block per layer, refusing every upward import. */
const layerRules = LAYERS.map((layer, index) => {
  const above = LAYERS.slice(index + 1);
  // The entry points sit above every layer: nothing inside imports them.
  const upward = [...above, "index", "controller", "protocol"];
  return {
    files: layer === "errors" ? ["sdk/src/errors.ts"] : [`sdk/src/${layer}/**/*.ts`],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: [
            {
              regex: `^(\\.\\./)+(${upward.join("|")})(/|\\.js$)`,
              message: `${layer} is below ${above.join(", ") || "the entry points"}: an upward import breaks the layers (docs/architecture.md).`,
            },
          ],
        },
      ],
    },
  };
});

export default tseslint.config(
  { ignores: ["**/dist/**", "**/.api-work/**", "**/node_modules/**", "openapi/**", "coverage/**"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      "@typescript-eslint/no-unused-vars": [
        "error",
        { argsIgnorePattern: "^_", varsIgnorePattern: "^_" },
      ],
      "no-console": "error",
    },
  },
  {
    files: ["test/**", "**/scripts/**", "**/cli/**"],
    rules: { "no-console": "off" },
  },
  ...layerRules,
  {
    // No import circle inside the SDK: a module and everything it imports load in one order.
    // Type-only imports count too (a circle of types is a circle of modules to the reader).
    files: ["sdk/src/**/*.ts"],
    plugins: { "import-x": importX },
    settings: {
      // Parse the imported modules as TypeScript, and resolve `./x.js` to `x.ts` as tsc does.
      "import-x/parsers": { "@typescript-eslint/parser": [".ts"] },
      "import-x/extensions": [".ts", ".js"],
      "import-x/resolver-next": [createTypeScriptImportResolver({ project: "sdk/tsconfig.json" })],
    },
    rules: { "import-x/no-cycle": "error" },
  },
  {
    files: ["test/**/*.ts"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: [
            {
              regex: "^(\\.\\./)+sdk/src/",
              message: "Import the SDK's modules through the #sdk/* alias (package.json imports).",
            },
          ],
        },
      ],
    },
  },
  {
    files: ["reference-servers/**/*.ts", "templates/**/*.ts", "demo/**/*.ts"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: [
            {
              regex: "^(#sdk/|(\\.\\./)+sdk/)",
              message:
                "Reference servers, templates and the demo use only the package's entry points.",
            },
          ],
        },
      ],
    },
  },
);
