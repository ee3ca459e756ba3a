/**
 * What every `gym` command writes to and how it fails: the output streams (so tests can run the
 * CLI in-process and capture them), and the two errors that carry an exit status.
 */
import path from "node:path";
import { DEFAULT_COMMAND, invokedAs } from "./invocation.js";
import { DeploymentFileError } from "../deployment/errors.js";

/** Where a command writes: people read `out`, problems and progress go to `err`. */
export interface Io {
  readonly out: (text: string) => void;
  readonly err: (text: string) => void;
  /** The working directory relative paths are resolved against. */
  readonly cwd: string;
  /** The environment `${VAR}` references are expanded from. */
  readonly env: NodeJS.ProcessEnv;
  /**
   * What the user types to run `gym` (`npm run gym --`, `npx gym`): every command a hint or
   * next step prints starts with it. Read it with {@link commandOf}.
   * @default "gym"
   */
  readonly command?: string;
}

/** The process's own streams, cwd and environment, and how it was invoked ({@link invokedAs}). */
export function processIo(): Io {
  return {
    out: (text) => void process.stdout.write(text.endsWith("\n") ? text : `${text}\n`),
    err: (text) => void process.stderr.write(text.endsWith("\n") ? text : `${text}\n`),
    cwd: process.cwd(),
    env: process.env,
    command: invokedAs(process.env, process.argv[1]),
  };
}

/** The prefix of the `gym` commands `io`'s hints print: {@link Io.command}, or `gym`. */
export function commandOf(io: Pick<Io, "command">): string {
  return io.command ?? DEFAULT_COMMAND;
}

/**
 * A path as a message shows it: relative to the working directory when it is inside it, else
 * absolute, so that a command copied from the message works where the user is.
 */
export function shownPath(io: Pick<Io, "cwd">, file: string): string {
  const shown = path.relative(io.cwd, file);
  return shown === "" ? "." : shown.startsWith("..") || path.isAbsolute(shown) ? file : shown;
}

/** Exit status: success. */
export const EXIT_OK = 0;
/** Exit status: the command ran and was refused, or failed (a typed refusal, a corrupt file). */
export const EXIT_FAILED = 1;
/** Exit status: the command was called wrongly (unknown flag, missing argument, bad value). */
export const EXIT_USAGE = 2;

/**
 * A command failed in a way the user can act on. `message` says what went wrong, `hint` what to
 * do next; the CLI prints both and exits with `exitCode`.
 */
export class CliError extends Error {
  override readonly name: string = "CliError";
  /** What `--json` prints on stdout for this failure, when anything. */
  json: unknown = undefined;
  constructor(
    message: string,
    readonly hint: string | null = null,
    readonly exitCode: number = EXIT_FAILED,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** What to do about a {@link DeploymentFileError}, as the `gym` command says it. */
export const DEPLOYMENT_FILE_HINT =
  "fix what each line above names, then run the command again (see docs/deployment.md for the format)";

/** The command was called wrongly: exit status 2. */
export class UsageError extends CliError {
  override readonly name = "UsageError";
  constructor(message: string, hint: string | null = null) {
    super(message, hint, EXIT_USAGE);
  }
}

/**
 * The {@link CliError} a failure is reported as: itself, or a library error the user can act
 * on with the CLI's hint added; null for anything else (a bug).
 */
export function asCliError(error: unknown): CliError | null {
  if (error instanceof CliError) return error;
  if (error instanceof DeploymentFileError) {
    return new CliError(error.message, DEPLOYMENT_FILE_HINT, EXIT_FAILED, { cause: error });
  }
  // The SDK's ConfigError (a tls file that cannot be read, say), matched by name so this module
  // does not load the error catalogue: a setting to fix, not a bug in gym.
  if (error instanceof Error && error.name === "ConfigError") {
    return new CliError(
      error.message,
      "fix the setting it names (in the deployment file), then run the command again",
      EXIT_FAILED,
      { cause: error },
    );
  }
  return null;
}

/** A one-line description of any thrown value. */
export function describeError(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
