/**
 * The API report: one file per package entry point under `sdk/api/`, listing every exported
 * name with its signature, generated from the build's declarations by API Extractor.
 *
 * `npm run api` rewrites the reports after a deliberate change of the public surface;
 * `npm run api:check` (CI) fails when a report is stale, so no export appears, disappears or
 * changes shape without a reviewed diff.
 *
 * The reports read declarations from a fresh, non-incremental emit of its own, never from
 * `sdk/dist`: TypeScript orders union members by when it first met each type, so an
 * incremental build prints `"a" | "b"` where a clean one prints `"b" | "a"`, and a report
 * checked against a developer's incremental `dist` would fail in CI's clean clone.
 */
import { existsSync, rmSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Extractor, ExtractorConfig, type IConfigFile } from "@microsoft/api-extractor";
import ts from "typescript";

const SDK = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
// Outside `dist`, which is packed: these are scratch files for the report only.
const SCRATCH = path.join(SDK, ".api-work");
const DECLARATIONS = path.join(SCRATCH, "declarations");

/** Emits the SDK's declarations into {@link DECLARATIONS} the way a clean build would. */
function emitDeclarations(): void {
  const configPath = path.join(SDK, "tsconfig.build.json");
  const parsed = ts.getParsedCommandLineOfConfigFile(configPath, undefined, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => {
      throw new Error(ts.flattenDiagnosticMessageText(d.messageText, "\n"));
    },
  });
  if (!parsed) throw new Error(`cannot read ${configPath}`);
  rmSync(DECLARATIONS, { recursive: true, force: true });
  const options: ts.CompilerOptions = {
    ...parsed.options,
    outDir: DECLARATIONS,
    declarationDir: DECLARATIONS,
    emitDeclarationOnly: true,
    declarationMap: false,
    sourceMap: false,
    composite: false,
    incremental: false,
    tsBuildInfoFile: undefined,
  };
  const program = ts.createProgram({ rootNames: parsed.fileNames, options });
  // Check before emitting, as `tsc` does, so types are met in the same order as a clean build.
  const diagnostics = [...program.getSemanticDiagnostics(), ...program.emit().diagnostics];
  if (diagnostics.length > 0) {
    const host = {
      getCanonicalFileName: (f: string) => f,
      getCurrentDirectory: () => SDK,
      getNewLine: () => "\n",
    };
    console.error(ts.formatDiagnostics(diagnostics, host));
    process.exit(2);
  }
}

emitDeclarations();

/** The package's entry points: report name and declaration file (relative to `sdk/dist`). */
const ENTRY_POINTS = [
  { report: "gym-participant-sdk", types: "index.d.ts" },
  { report: "gym-participant-sdk-controller", types: "controller.d.ts" },
  { report: "gym-participant-sdk-protocol", types: "protocol.d.ts" },
  { report: "gym-participant-sdk-capture", types: "capture/index.d.ts" },
  { report: "gym-participant-sdk-testing", types: "testing/index.d.ts" },
] as const;

const check = process.argv.includes("--check");
let failed = false;
for (const entry of ENTRY_POINTS) {
  const mainEntryPointFilePath = path.join(DECLARATIONS, entry.types);
  if (!existsSync(mainEntryPointFilePath)) {
    console.error(`${mainEntryPointFilePath} is missing: the declaration emit wrote no such file`);
    process.exit(2);
  }
  const configObject: IConfigFile = {
    projectFolder: SDK,
    mainEntryPointFilePath,
    compiler: { tsconfigFilePath: path.join(SDK, "tsconfig.build.json") },
    apiReport: {
      enabled: true,
      reportFileName: `${entry.report}.api.md`,
      reportFolder: path.join(SDK, "api"),
      reportTempFolder: path.join(SCRATCH, "report-temp"),
    },
    docModel: { enabled: false },
    dtsRollup: { enabled: false },
    tsdocMetadata: { enabled: false },
    messages: {
      // Names a signature uses but the entry point does not export are listed in the report
      // (as `ae-forgotten-export`), where a reviewer sees them; they do not fail the run.
      extractorMessageReporting: {
        default: { logLevel: "none" as never },
        "ae-missing-release-tag": { logLevel: "none" as never },
        "ae-forgotten-export": { logLevel: "none" as never, addToApiReportFile: true },
      },
      tsdocMessageReporting: { default: { logLevel: "none" as never } },
      compilerMessageReporting: { default: { logLevel: "warning" as never } },
    },
  };
  const config = ExtractorConfig.prepare({
    configObject,
    configObjectFullPath: path.join(SDK, "api-extractor.json"),
    packageJsonFullPath: path.join(SDK, "package.json"),
  });
  const result = Extractor.invoke(config, { localBuild: !check, showVerboseMessages: false });
  const file = path.relative(process.cwd(), path.join(SDK, "api", `${entry.report}.api.md`));
  if (check && result.apiReportChanged) {
    failed = true;
    console.error(
      `${file} is stale: the public API changed. Run \`npm run api\` and review the diff.`,
    );
  } else if (!result.succeeded) {
    failed = true;
    console.error(`${file}: API Extractor reported ${result.errorCount} error(s)`);
  } else {
    console.log(`${file}: ${result.apiReportChanged ? "updated" : "up to date"}`);
  }
}
process.exit(failed ? 1 : 0);
