/**
 * `gym conformance <url>`: checks a running participant server, in any language, against the
 * contract's requirements, and reports each with where the docs state it.
 *
 * @see docs/conformance.md
 */
import { randomBytes } from "node:crypto";
import { readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import {
  ExpectedFailuresError,
  parseExpectedFailures,
  type ExpectedFailures,
} from "../conformance/expected-failures.js";
import { REQUIREMENTS, unknownSelector } from "../conformance/registry.js";
import { reportJson, reportJunit, reportTable } from "../conformance/report.js";
import { ConformanceSetupError, runConformance } from "../conformance/runner.js";
import type { ParticipantKind } from "../wire/control.js";
import { splitList } from "./defaults.js";
import { CliError, commandOf, EXIT_FAILED, EXIT_OK, UsageError, type Io } from "./output.js";
import { table } from "./table.js";

/** The flags of `gym conformance`, as commander parses them. */
export interface ConformanceFlags {
  readonly kind?: ParticipantKind;
  readonly token?: string;
  readonly only?: string;
  readonly skip?: string;
  readonly seed?: string;
  readonly json?: boolean;
  readonly junit?: string;
  readonly expectedFailures?: string;
  readonly checkpointRoot?: string;
  readonly seedBody?: string;
  readonly tool?: string;
  readonly toolBody?: string;
  readonly task?: string;
  readonly launch?: string;
  readonly launchTimeout?: string;
  readonly list?: boolean;
}

/** The server's base URL, refusing anything that is not http(s). */
function baseUrl(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new UsageError(
      `${JSON.stringify(value)} is not a URL`,
      "give the server's base URL, e.g. http://127.0.0.1:8001",
    );
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new UsageError(
      `${JSON.stringify(value)} is not an http(s) URL`,
      "give the server's base URL, e.g. http://127.0.0.1:8001",
    );
  }
  if (url.pathname !== "/" || url.search !== "" || url.hash !== "") {
    throw new UsageError(
      `${JSON.stringify(value)} has a path: the kit calls the routes from the server's root`,
      `use ${url.origin}`,
    );
  }
  return url.origin;
}

function jsonFlag(value: string | undefined, flag: string): unknown {
  if (value === undefined) return undefined;
  try {
    return JSON.parse(value) as unknown;
  } catch {
    throw new UsageError(`${flag} is not JSON: ${value}`, `e.g. ${flag} '{"initial_count": 0}'`);
  }
}

function selectors(value: string | undefined, flag: string): string[] {
  if (value === undefined) return [];
  const list = splitList(value, flag);
  const unknown = unknownSelector(list);
  if (unknown !== null) {
    throw new UsageError(
      `${flag}: ${JSON.stringify(unknown)} names no requirement or group`,
      "list them with gym conformance --list",
    );
  }
  return list;
}

async function expectedFailuresOf(
  file: string | undefined,
  io: Io,
): Promise<ExpectedFailures | null> {
  if (file === undefined) return null;
  let text: string;
  try {
    text = await readFile(path.resolve(io.cwd, file), "utf8");
  } catch (error) {
    throw new UsageError(
      `cannot read --expected-failures ${file}: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
  try {
    return parseExpectedFailures(
      text,
      REQUIREMENTS.map((r) => r.id),
    );
  } catch (error) {
    if (error instanceof ExpectedFailuresError) {
      throw new UsageError(
        `--expected-failures ${file}, ${error.message}`,
        "list one requirement ID a line (gym conformance --list shows them)",
      );
    }
    throw error;
  }
}

function seedOf(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const seed = Number(value);
  if (!Number.isSafeInteger(seed) || seed < 0 || seed > 0xffffffff) {
    throw new UsageError(`--seed ${value} is not a seed`, "use an integer from 0 to 4294967295");
  }
  return seed;
}

/** `gym conformance --list`: every requirement, its title and where the docs state it. */
function listRequirements(io: Io): number {
  io.out(
    table(
      ["REQUIREMENT", "WHAT A CONFORMING SERVER DOES", "DOCS"],
      REQUIREMENTS.map((r) => [r.id, r.title, r.docs]),
    ),
  );
  return EXIT_OK;
}

/** Runs `gym conformance`; returns the exit status (0 only when every required check passed). */
export async function conformanceCommand(
  url: string | undefined,
  flags: ConformanceFlags,
  io: Io,
): Promise<number> {
  if (flags.list === true) return listRequirements(io);
  if (url === undefined && flags.launch === undefined) {
    throw new UsageError(
      "the server's URL is missing",
      `${commandOf(io)} conformance http://127.0.0.1:8001 --token TOKEN, or --launch "<command>"`,
    );
  }
  if (url !== undefined && flags.launch !== undefined) {
    throw new UsageError(
      "give the server's URL or --launch, not both",
      "with --launch the kit starts the server on a port it picks ({port})",
    );
  }
  const base = url === undefined ? null : baseUrl(url);
  const launchTimeout = Number(flags.launchTimeout ?? "60");
  if (!Number.isFinite(launchTimeout) || launchTimeout <= 0) {
    throw new UsageError(
      `--launch-timeout ${flags.launchTimeout ?? ""} is not a number of seconds`,
      "e.g. --launch-timeout 60",
    );
  }
  // A launched server is told the token, so one is made up when none is given.
  const token =
    flags.token ??
    io.env.GYM_CONTROL_TOKEN ??
    (flags.launch === undefined ? undefined : `conformance-${randomBytes(8).toString("hex")}`);
  if (token === undefined || token === "") {
    throw new UsageError(
      "no control token",
      "pass the server's checkpoint.control_auth_token with --token TOKEN, or set GYM_CONTROL_TOKEN",
    );
  }
  const only = selectors(flags.only, "--only");
  const skipped = selectors(flags.skip, "--skip");
  const seedBody = jsonFlag(flags.seedBody, "--seed-body");
  const toolBody = jsonFlag(flags.toolBody, "--tool-body");
  const task = jsonFlag(flags.task, "--task");
  if (flags.toolBody !== undefined && flags.tool === undefined) {
    throw new UsageError(
      "--tool-body needs --tool PATH",
      'e.g. --tool /get_weather --tool-body \'{"city": "Oslo"}\'',
    );
  }
  const tool =
    flags.tool === undefined
      ? null
      : { path: flags.tool.startsWith("/") ? flags.tool : `/${flags.tool}`, body: toolBody ?? {} };
  const expectedFailures = await expectedFailuresOf(flags.expectedFailures, io);
  let report;
  try {
    report = await runConformance({
      ...(base === null ? {} : { url: base }),
      launch:
        flags.launch === undefined
          ? null
          : { command: flags.launch, readyTimeoutMs: launchTimeout * 1000, cwd: io.cwd },
      ...(task === undefined ? {} : { task }),
      token,
      ...(flags.kind === undefined ? {} : { kind: flags.kind }),
      only,
      skip: skipped,
      ...(seedOf(flags.seed) === undefined ? {} : { seed: seedOf(flags.seed) as number }),
      expectedFailures,
      ...(flags.checkpointRoot === undefined
        ? {}
        : { checkpointRoot: path.resolve(io.cwd, flags.checkpointRoot) }),
      seedBody: seedBody ?? {},
      tool,
      onResult: (result) => {
        if (flags.json !== true) io.err(`${result.id}: ${result.result}`);
      },
    });
  } catch (error) {
    if (error instanceof ConformanceSetupError) {
      throw new CliError(error.message, error.hint, EXIT_FAILED, { cause: error });
    }
    throw error;
  }
  const where = base ?? `--launch ${JSON.stringify(flags.launch)}`;
  const replay = `${commandOf(io)} conformance ${where} --only core.hostile.no-5xx --seed ${report.seed}`;
  if (flags.junit !== undefined) {
    await writeFile(path.resolve(io.cwd, flags.junit), reportJunit(report));
  }
  io.out(
    flags.json === true
      ? JSON.stringify(reportJson(report, replay), null, 2)
      : reportTable(report, replay),
  );
  return report.passed ? EXIT_OK : EXIT_FAILED;
}
