/**
 * The package's public surface by audience: what each entry point exports (values and types),
 * that no name is exported by two entry points, that the authors' root stays within its budget
 * and exports no internals, that every root name is used in a doc or example and the main ones
 * carry an `@example`, that `package.json` maps every entry point to a module, and that the
 * reference servers, templates and demo import only entry points. (The exact signatures are
 * recorded in `sdk/api/*.api.md`, which `npm run api:check` keeps current.)
 */
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { describe, expect, it } from "vitest";
import * as capture from "#sdk/capture/index.js";
import * as controller from "#sdk/controller.js";
import * as authors from "#sdk/index.js";
import * as protocol from "#sdk/protocol.js";
import * as testing from "#sdk/testing/index.js";

const REPO = fileURLToPath(new URL("../../../", import.meta.url));
const SDK_SRC = path.join(REPO, "sdk", "src");

/** One exported name: whether it is a type only, and the module it comes from. */
interface ExportedName {
  readonly name: string;
  readonly typeOnly: boolean;
  readonly module: string;
}

/**
 * The names an entry file exports, read from its source: entry files hold only named
 * re-exports (`export { a } from "./m.js"`, `export type { T } from "./m.js"`), which the
 * first test checks, so the syntax alone gives every name, types included.
 */
function exportsOf(entry: string): ExportedName[] {
  const file = path.join(SDK_SRC, entry);
  const source = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.Latest);
  const names: ExportedName[] = [];
  for (const statement of source.statements) {
    if (
      !ts.isExportDeclaration(statement) ||
      !statement.exportClause ||
      !ts.isNamedExports(statement.exportClause) ||
      !statement.moduleSpecifier ||
      !ts.isStringLiteral(statement.moduleSpecifier)
    ) {
      throw new Error(`${entry}: "${statement.getText(source)}" is not a named re-export`);
    }
    const module = path.resolve(
      path.dirname(file),
      statement.moduleSpecifier.text.replace(/\.js$/, ".ts"),
    );
    for (const element of statement.exportClause.elements) {
      names.push({
        name: element.name.text,
        typeOnly: statement.isTypeOnly || element.isTypeOnly,
        module,
      });
    }
  }
  return names;
}

/** Every entry point: its source file (under sdk/src) and its runtime module. */
const ENTRIES = {
  "gym-participant-sdk": { file: "index.ts", runtime: authors },
  "gym-participant-sdk/controller": { file: "controller.ts", runtime: controller },
  "gym-participant-sdk/protocol": { file: "protocol.ts", runtime: protocol },
  "gym-participant-sdk/capture": { file: "capture/index.ts", runtime: capture },
  "gym-participant-sdk/testing": { file: "testing/index.ts", runtime: testing },
} as const;

/**
 * The root's budget, by what an author of each server kind names (111 today):
 * - 51 shared by every kind: the `Server` base and its options, `dataRoute` and its route types,
 *   the rollout context, `serveMain`/`isMainModule`, `BySession` (12); episode identity (9); the
 *   error classes a hook throws and the envelope's types (12); JSON values a checkpoint keeps
 *   (3); `ServerClient` with its options, replies and errors (9), since agents and environments
 *   call their peers; episode steps' types and errors (6);
 * - per kind, its class and config, and the input (and result) type of each hook: resources 21
 *   (with `SessionStateServer` and `aggregateMetrics`), environment 12, agent 22, policy model 5.
 * A name beyond that belongs to the entry point of its audience (`/protocol` for the wire between
 * servers, `/controller`, `/capture`, `/testing`) or stays internal.
 */
const ROOT_BUDGET = 112;

/** Internals the root entry point once exported, which authors have no use for. */
const INTERNALS = [
  "RecordsWriter",
  "readCheckpoint",
  "ControlPlane",
  "Participant",
  "RetiredAttempts",
  "EpisodeSteps",
  "PolicyGate",
  "PolicyParticipant",
  "ResourcesParticipant",
  "EnvironmentParticipant",
  "AgentSessionParticipant",
  "CaptureLedger",
  "stampRows",
  "LEDGER_CONTROL_PREFIX",
  "pythonJson",
  "RolloutTokenCapture",
  "prepare",
  "commit",
  // Codecs, converters, legacy keys and serving types: the wire's, the CLI's or nobody's.
  "cookieHeader",
  "setCookieJar",
  "chatRequestOf",
  "responseOf",
  "legacySessionKey",
  "isLegacySessionKey",
  "LEGACY_SESSION_PREFIX",
  "RunningServer",
  "ServerFactory",
  "buildOpenApiDocument",
  "decodeJson",
  "encodeJson",
  "metricsHandler",
  "ResolvedDeploymentSchema",
];

/** The main root exports: each one's TSDoc shows it in use. */
const WITH_EXAMPLE = [
  "ResourcesServer",
  "SessionStateServer",
  "EnvironmentServer",
  "AgentServer",
  "PolicyModelServer",
  "Server",
  "dataRoute",
  "serveMain",
  "ServerClient",
  "GymError",
  "episodeId",
  "frozenJson",
];

/** The comments right above every declaration of `name` in `module` (overloads included). */
function docOf(module: string, name: string): string {
  const text = readFileSync(module, "utf8");
  const source = ts.createSourceFile(module, text, ts.ScriptTarget.Latest, true);
  const docs: string[] = [];
  for (const statement of source.statements) {
    const declared =
      (ts.isClassDeclaration(statement) ||
        ts.isFunctionDeclaration(statement) ||
        ts.isInterfaceDeclaration(statement) ||
        ts.isTypeAliasDeclaration(statement)) &&
      statement.name?.text === name
        ? true
        : ts.isVariableStatement(statement) &&
          statement.declarationList.declarations.some(
            (d) => ts.isIdentifier(d.name) && d.name.text === name,
          );
    if (!declared) continue;
    const ranges = ts.getLeadingCommentRanges(text, statement.getFullStart()) ?? [];
    docs.push(...ranges.map((r) => text.slice(r.pos, r.end)));
  }
  return docs.join("\n");
}

/** The text of every doc and example an author reads: docs/, the README, reference servers,
 *  templates and the demo (sources and READMEs, not build output). */
function docsAndExamples(): string {
  const parts: string[] = [readFileSync(path.join(REPO, "README.md"), "utf8")];
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir)) {
      if (name === "node_modules" || name === "dist" || name.startsWith(".")) continue;
      const file = path.join(dir, name);
      if (statSync(file).isDirectory()) walk(file);
      else if (/\.(ts|tmpl|md)$/.test(name)) parts.push(readFileSync(file, "utf8"));
    }
  };
  for (const dir of ["docs", "reference-servers", "templates", "demo"]) {
    walk(path.join(REPO, dir));
  }
  return parts.join("\n");
}

describe("entry points", () => {
  it("each entry point's value exports are what its source lists", () => {
    for (const [entry, { file, runtime }] of Object.entries(ENTRIES)) {
      const values = exportsOf(file)
        .filter((e) => !e.typeOnly)
        .map((e) => e.name);
      expect(Object.keys(runtime).sort(), entry).toEqual([...values].sort());
    }
  });

  it("no name is exported by two entry points", () => {
    const homes = new Map<string, string[]>();
    for (const [entry, { file }] of Object.entries(ENTRIES)) {
      for (const { name } of exportsOf(file)) homes.set(name, [...(homes.get(name) ?? []), entry]);
    }
    const twice = [...homes].filter(([, entries]) => entries.length > 1);
    expect(twice).toEqual([]);
  });

  it("gym-participant-sdk exports what authors of servers use, within its budget", () => {
    const names = exportsOf("index.ts").map((e) => e.name);
    for (const name of [
      "ResourcesServer",
      "AgentServer",
      "EnvironmentServer",
      "PolicyModelServer",
      "Server",
      "dataRoute",
      "serveMain",
      "GymError",
      "episodeId",
      "ServerClient",
      "VerifyInput",
      "RespondInput",
      "GenerateInput",
    ]) {
      expect(names, name).toContain(name);
    }
    for (const name of INTERNALS) expect(names, name).not.toContain(name);
    expect(names.length).toBeLessThanOrEqual(ROOT_BUDGET);
  });

  it("every root export is used in a doc or an example", () => {
    const text = docsAndExamples();
    const unused = exportsOf("index.ts")
      .map((e) => e.name)
      .filter((name) => !new RegExp(`\\b${name}\\b`).test(text));
    expect(unused).toEqual([]);
  });

  it("the main root exports show themselves in use in their TSDoc", () => {
    const root = new Map(exportsOf("index.ts").map((e) => [e.name, e]));
    const missing = WITH_EXAMPLE.filter((name) => {
      const exported = root.get(name);
      if (!exported) return true;
      return !docOf(exported.module, name).includes("@example");
    });
    expect(missing).toEqual([]);
  });

  it("gym-participant-sdk/controller exports the controller's side", () => {
    for (const name of [
      "discover",
      "prepare",
      "commit",
      "commitEverywhere",
      "resume",
      "restore",
      "retire",
      "forget",
      "collect",
      "loadDeploymentFile",
      "DeploymentFileError",
      "readCheckpoint",
      "ResolvedDeploymentSchema",
      "startTelemetry",
    ]) {
      expect(controller, name).toHaveProperty(name);
    }
    for (const name of ["ResourcesServer", "ControlPlane", "CaptureLedger", "RecordsWriter"]) {
      expect(Object.keys(controller), name).not.toContain(name);
    }
  });

  it("gym-participant-sdk/protocol exports the wire between servers", () => {
    for (const name of [
      "ResponsesReplySchema",
      "AgentSeedReplySchema",
      "VerifyReplySchema",
      "cookieHeader",
      "setCookieJar",
      "isRestartReply",
      "rolloutPath",
      "chatRequestOf",
    ]) {
      expect(protocol, name).toHaveProperty(name);
    }
    for (const name of ["ResourcesServer", "ControlPlane", "discover"]) {
      expect(Object.keys(protocol), name).not.toContain(name);
    }
  });

  it("gym-participant-sdk/capture exports the worker-side staging helpers", () => {
    for (const name of ["RolloutTokenCapture", "CaptureError", "pythonJson", "stagingKey"]) {
      expect(capture, name).toHaveProperty(name);
    }
    expect(Object.keys(capture)).not.toContain("CaptureLedger");
  });

  it("gym-participant-sdk/testing exports the test kit", () => {
    expect(testing).toHaveProperty("startTestServer");
  });

  it("package.json maps every entry point to a module of the source", () => {
    const pkg = JSON.parse(readFileSync(path.join(REPO, "sdk", "package.json"), "utf8")) as {
      exports: Record<string, { import?: string; types?: string } | string>;
    };
    const entries = Object.entries(pkg.exports).filter(([key]) => key !== "./package.json");
    expect(entries.map(([key]) => `gym-participant-sdk${key.slice(1)}`).sort()).toEqual(
      Object.keys(ENTRIES).sort(),
    );
    for (const [key, target] of entries) {
      if (typeof target === "string") throw new Error(`${key}: no conditions`);
      const source = path.join(
        REPO,
        "sdk",
        target.import!.replace("./dist/", "src/").replace(/\.js$/, ".ts"),
      );
      expect(existsSync(source), `${key} → ${source}`).toBe(true);
      expect(target.types).toBe(target.import!.replace(/\.js$/, ".d.ts"));
      const entry = ENTRIES[`gym-participant-sdk${key.slice(1)}` as keyof typeof ENTRIES];
      expect(path.join(SDK_SRC, entry.file)).toBe(source);
    }
  });

  it("the reference servers, templates and demo import the SDK only through entry points", () => {
    const offenders: string[] = [];
    const walk = (dir: string): void => {
      for (const name of readdirSync(dir)) {
        if (name === "node_modules" || name === "dist") continue;
        const file = path.join(dir, name);
        if (statSync(file).isDirectory()) walk(file);
        else if (/\.(ts|tmpl)$/.test(name)) {
          const text = readFileSync(file, "utf8");
          if (/from\s+["'][^"']*sdk\/src\//.test(text)) offenders.push(path.relative(REPO, file));
        }
      }
    };
    for (const dir of ["reference-servers", "templates", "demo"]) walk(path.join(REPO, dir));
    expect(offenders).toEqual([]);
  });
});
