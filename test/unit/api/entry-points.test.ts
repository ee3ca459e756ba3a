/**
 * The package's public surface by audience: what each entry point exports, that internals stay
 * out of the authors' entry point, that `package.json` maps every entry point to a module, and
 * that the reference servers, templates and demo import only entry points. (The exact
 * signatures are recorded in `sdk/api/*.api.md`, which `npm run api:check` keeps current.)
 */
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import * as capture from "#sdk/capture/index.js";
import * as controller from "#sdk/controller.js";
import * as authors from "#sdk/index.js";
import * as testing from "#sdk/testing/index.js";

const REPO = fileURLToPath(new URL("../../../", import.meta.url));

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
];

describe("entry points", () => {
  it("gym-participant-sdk exports what authors of servers use, and no internals", () => {
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
    ]) {
      expect(authors, name).toHaveProperty(name);
    }
    for (const name of INTERNALS) expect(Object.keys(authors), name).not.toContain(name);
    expect(Object.keys(authors).length).toBeLessThan(140);
  });

  it("gym-participant-sdk/controller exports the controller's side", () => {
    for (const name of [
      "ServerClient",
      "discover",
      "prepare",
      "commit",
      "commitEverywhere",
      "resume",
      "restore",
      "retire",
      "forget",
      "loadDeploymentFile",
      "DeploymentFileError",
      "readCheckpoint",
      "ResolvedDeploymentSchema",
    ]) {
      expect(controller, name).toHaveProperty(name);
    }
    for (const name of ["ResourcesServer", "ControlPlane", "CaptureLedger", "RecordsWriter"]) {
      expect(Object.keys(controller), name).not.toContain(name);
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
    expect(entries.map(([key]) => key).sort()).toEqual(
      [".", "./capture", "./controller", "./testing"].sort(),
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
