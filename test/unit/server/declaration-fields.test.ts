/**
 * A server's checkpoint declarations are plain class fields: `static override checkpointMode =
 * "exported"` compiles with no `as const` or annotation, in every base an author extends.
 * TypeScript does not type a subclass's field initializer from its base, so the literal widens
 * to `string`; a base declaring the field as a union of literals refuses that subclass. The
 * classes below are written as an author writes them, and this file is compiled here with the
 * repository's compiler options, so the test fails (as does the repository's typecheck) when a
 * base declares a field its subclasses cannot set plainly.
 */
import path from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { describe, expect, expectTypeOf, it } from "vitest";
import { z } from "zod";
import {
  AgentServer,
  ConfigError,
  EnvironmentServer,
  ResourcesServer,
  SessionStateServer,
  type CheckpointMode,
  type CheckpointVerify,
  type EpisodeOutcome,
  type RespondResult,
} from "gym-participant-sdk";

const THIS_FILE = fileURLToPath(import.meta.url);
const REPO = path.resolve(path.dirname(THIS_FILE), "../../..");

class Exported extends ResourcesServer {
  static override checkpointMode = "exported";
  static override checkpointVerify = "replay";
  static override checkpointSessionStarts = ["/seed_session", "/reset"];
  protected override exportSessionStates() {
    return Promise.resolve({});
  }
  protected override restoreSessionStates() {
    return Promise.resolve();
  }
  protected override retireSessionState() {
    return Promise.resolve();
  }
  protected override verify() {
    return { reward: 1 };
  }
}

class Stateless extends ResourcesServer {
  static override checkpointMode = "stateless";
  protected override verify() {
    return { reward: 0 };
  }
}

class Tally extends SessionStateServer<number> {
  static override checkpointMode = "exported";
  static override checkpointVerify = "wait";
  protected override readonly stateSchema = z.number();
  protected override initialState() {
    return 0;
  }
  protected override verify() {
    return { reward: 1 };
  }
}

class Agent extends AgentServer {
  static override checkpointSessionsSupported = true;
  protected override respond(): Promise<RespondResult> {
    return Promise.reject(new Error("not called"));
  }
  protected override exportAgentSessions() {
    return Promise.resolve({});
  }
  protected override restoreAgentSessions() {
    return Promise.resolve({});
  }
  protected override retireAgentSession() {
    return Promise.resolve();
  }
}

class Environment extends EnvironmentServer {
  static override checkpointBoundaries = true;
  protected override runEpisode(): Promise<EpisodeOutcome> {
    return Promise.reject(new Error("not called"));
  }
}

/** The compiler's diagnostics of this file, with the options of the repository's typecheck. */
function diagnosticsOfThisFile(): string[] {
  const configPath = path.join(REPO, "tsconfig.json");
  const config = ts.readConfigFile(configPath, (file) => ts.sys.readFile(file));
  if (config.error !== undefined)
    throw new Error(ts.flattenDiagnosticMessageText(config.error.messageText, "\n"));
  const parsed = ts.parseJsonConfigFileContent(
    config.config,
    ts.sys,
    REPO,
    { noEmit: true },
    configPath,
  );
  const program = ts.createProgram([THIS_FILE], parsed.options);
  const source = program.getSourceFile(THIS_FILE);
  if (source === undefined) throw new Error(`the compiler did not read ${THIS_FILE}`);
  return [
    ...program.getSyntacticDiagnostics(source),
    ...program.getSemanticDiagnostics(source),
  ].map((diagnostic) => {
    const { line } = source.getLineAndCharacterOfPosition(diagnostic.start ?? 0);
    return `line ${line + 1}: ${ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n")}`;
  });
}

describe("checkpoint declarations as plain class fields", () => {
  it("compile without `as const` in a subclass of every server base", () => {
    expect(diagnosticsOfThisFile()).toEqual([]);
  }, 120_000);

  it("are read as declared, and the instance holds the checked union", () => {
    const exported = new Exported({ name: "exported" });
    expect([exported.checkpointMode, exported.checkpointVerify]).toEqual(["exported", "replay"]);
    expectTypeOf(exported.checkpointMode).toEqualTypeOf<CheckpointMode>();
    expectTypeOf(exported.checkpointVerify).toEqualTypeOf<CheckpointVerify>();
    expect(new Stateless({ name: "stateless" }).checkpointMode).toBe("stateless");
    expect(new Tally({ name: "tally" }).checkpointMode).toBe("exported");
    expect(Agent.checkpointSessionsSupported).toBe(true);
    expect(Environment.checkpointBoundaries).toBe(true);
  });

  it("still refuse a value outside the allowed ones when the server is constructed", () => {
    class Typo extends ResourcesServer {
      static override checkpointMode = "exportd";
      protected override verify() {
        return { reward: 0 };
      }
    }
    expect(() => new Typo({ name: "typo" })).toThrow(ConfigError);
    expect(() => new Typo({ name: "typo" })).toThrow(
      /allowed values: "restart_only", "stateless", "exported"/,
    );
  });
});
