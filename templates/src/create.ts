/**
 * The scaffolder's flow, as create-vite runs it: flags first; on a terminal (or with
 * `--interactive`) whatever they left open is asked; without one, nothing is asked and a
 * missing required choice is an error naming its flag. Nothing is deleted without
 * `--overwrite` (or a "yes" on a terminal), every failure is a non-zero exit code, and the
 * end prints the numbered next commands.
 *
 * @module
 */
import { statSync } from "node:fs";
import path from "node:path";
import {
  KINDS,
  KIND_HINTS,
  MODES_OF,
  MODE_HINTS,
  VERIFY_HINTS,
  VERIFY_MODES,
  type Choices,
  type Kind,
  type Mode,
  type Verify,
} from "./choices.js";
import { FlagsExit, parseFlags, type Flags } from "./flags.js";
import { nextSteps } from "./next-steps.js";
import { oneShotCommand, underCodingAgent } from "./one-shot.js";
import { packageManagerOf, type PackageManager } from "./package-manager.js";
import { PromptCancelled, type Prompter } from "./prompts.js";
import { isEmptyDir, scaffold, toPackageName } from "./scaffold.js";
import { SdkSpecError, checkoutSdkDir, sdkDependency } from "./sdk-dependency.js";
import { packVendoredSdk, planVendoredSdk, type VendoredSdk } from "./vendor-sdk.js";

/** Everything the flow touches outside itself, so tests can drive it in process. */
export interface CreateIo {
  /** Where a relative directory starts. */
  readonly cwd: string;
  /** Read for `npm_config_user_agent` and the coding-agent variables. */
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Whether standard input and output are a terminal. */
  readonly isTTY: boolean;
  /**
   * Whether the prompter can read answers: false when standard input is not a terminal, where
   * `--interactive` is refused rather than left waiting on a prompt no one can answer.
   * @default true (an injected prompter needs no terminal)
   */
  readonly canPrompt?: boolean;
  readonly prompter: Prompter;
  /** Writes one line of normal output. */
  readonly out: (line: string) => void;
  /** Writes one line of error output. */
  readonly err: (line: string) => void;
  /** The scaffolder's package directory (holds the `template-*` folders). */
  readonly packageDir: string;
  /** The scaffolder's version. */
  readonly version: string;
  /** Packs a checkout's SDK into the project (`npm pack`). @default {@link packVendoredSdk} */
  readonly packSdk?: (plan: VendoredSdk, projectDir: string) => string;
}

/** A failure with its exit code: 2 for the command line, 1 for anything else. */
class CreateError extends Error {
  override name = "CreateError";
  constructor(
    readonly exitCode: 1 | 2,
    message: string,
    readonly todo: string,
  ) {
    super(message);
  }
}

/** The directory argument as typed, without surrounding space or trailing slashes. */
function formatDir(dir: string): string {
  return dir.trim().replace(/\/+$/g, "") || ".";
}

interface Context {
  readonly flags: Flags;
  readonly interactive: boolean;
  readonly io: CreateIo;
  readonly pm: PackageManager;
}

/** The choices, from the flags or asked for; without prompts a missing `--kind` fails. */
async function resolveChoices(ctx: Context, dirHint: string): Promise<Choices> {
  const { flags, interactive, io } = ctx;
  if (flags.kind !== undefined) checkCompatible(flags.kind, flags);
  let kind: Kind;
  if (flags.kind !== undefined) kind = flags.kind;
  else if (interactive) {
    kind = await io.prompter.select(
      "What kind of server?",
      KINDS.map((k) => ({ value: k, label: k, hint: KIND_HINTS[k] })),
    );
    checkCompatible(kind, flags);
  } else {
    throw new CreateError(
      2,
      "missing --kind: there is no terminal to ask on (or --no-interactive was given)",
      `choose resources, agent or environment, e.g.\n  ${oneShotCommand({ pm: ctx.pm, dir: dirHint, choices: { kind: "resources", mode: "exported", verify: "wait" } })}`,
    );
  }
  if (kind !== "resources") return { kind, mode: MODES_OF[kind][0] as Mode, verify: null };
  const mode =
    flags.mode ??
    (interactive
      ? await io.prompter.select(
          "Checkpoint mode (checkpointMode)?",
          MODES_OF.resources.map((m) => ({ value: m, label: m, hint: MODE_HINTS[m] })),
        )
      : (MODES_OF.resources[0] as Mode));
  const verify: Verify =
    flags.verify ??
    (interactive
      ? await io.prompter.select(
          "Verify declaration (checkpointVerify)?",
          VERIFY_MODES.map((v) => ({ value: v, label: v, hint: VERIFY_HINTS[v] })),
        )
      : "wait");
  return { kind, mode, verify };
}

/** Refuses flags that do not apply to `kind`. */
function checkCompatible(kind: Kind, flags: Flags): void {
  if (flags.mode !== undefined && !MODES_OF[kind].includes(flags.mode)) {
    throw new CreateError(
      2,
      `--mode ${flags.mode} does not apply to --kind ${kind} (it has: ${MODES_OF[kind].join(", ")})`,
      kind === "resources"
        ? "pick one of the modes above"
        : `drop --mode: every ${kind} template exports its state`,
    );
  }
  if (flags.verify !== undefined && kind !== "resources") {
    throw new CreateError(
      2,
      `--verify applies to resources servers only, not --kind ${kind}`,
      "drop --verify",
    );
  }
}

/** The project directory, from the argument or asked for (default `gym-<kind>`). */
async function resolveDir(ctx: Context, kind: Kind): Promise<string> {
  if (ctx.flags.dir !== undefined) return formatDir(ctx.flags.dir);
  if (!ctx.interactive) return `gym-${kind}`;
  return formatDir(await ctx.io.prompter.text("Project directory:", `gym-${kind}`));
}

/** Whether to empty a non-empty target: `--overwrite`, or a "yes" on a terminal. */
async function mayOverwrite(ctx: Context, dir: string, projectDir: string): Promise<boolean> {
  let isDirectory = false;
  try {
    isDirectory = statSync(projectDir).isDirectory();
  } catch {
    return false; // missing: nothing to overwrite
  }
  if (!isDirectory) {
    throw new CreateError(1, `${dir} exists and is not a directory`, "choose another directory");
  }
  if (isEmptyDir(projectDir)) return false;
  if (ctx.flags.overwrite) return true;
  const where = dir === "." ? "The current directory" : `Target directory "${dir}"`;
  if (ctx.interactive) {
    if (
      await ctx.io.prompter.confirm(`${where} is not empty. Remove existing files and continue?`)
    ) {
      return true;
    }
    throw new PromptCancelled();
  }
  throw new CreateError(
    1,
    `${where} is not empty; nothing was written or deleted`,
    "choose another directory, or pass --overwrite to remove its files (all but .git) first",
  );
}

/**
 * Runs the scaffolder with `argv` (without `node` and the script) and returns the exit code:
 * 0 done (or `--help`), 1 failed or cancelled, 2 a wrong command line.
 */
/** A prompter for a process without a terminal: any question refuses with the flags to use. */
function refusingPrompter(flags: Flags, pm: PackageManager): Prompter {
  const refuse = (): never => {
    throw new CreateError(
      2,
      "--interactive needs a terminal to read the answers from, but standard input is not one",
      `pass the choices as flags instead, e.g.\n  ${oneShotCommand({
        pm,
        dir: flags.dir ?? "gym-resources",
        choices: {
          ...(flags.kind === undefined ? {} : { kind: flags.kind }),
          ...(flags.mode === undefined ? {} : { mode: flags.mode }),
          ...(flags.verify === undefined ? {} : { verify: flags.verify }),
        },
        ...(flags.sdk === undefined ? {} : { sdk: flags.sdk }),
      })}\nor run it in a terminal`,
    );
  };
  return {
    intro: () => undefined,
    select: async () => refuse(),
    text: async () => refuse(),
    confirm: async () => refuse(),
  };
}

export async function create(argv: readonly string[], io: CreateIo): Promise<number> {
  let flags: Flags;
  try {
    flags = parseFlags(argv);
  } catch (error) {
    if (!(error instanceof FlagsExit)) throw error;
    (error.exitCode === 0 ? io.out : io.err)(error.message);
    return error.exitCode;
  }
  const pm = packageManagerOf(io.env.npm_config_user_agent);
  const interactive = flags.interactive ?? io.isTTY;
  // No terminal to answer on: refused, but only when a question is actually asked (the flags
  // may already hold every answer).
  const asking =
    interactive && io.canPrompt === false ? { ...io, prompter: refusingPrompter(flags, pm) } : io;
  const ctx: Context = { flags, interactive, io: asking, pm };
  try {
    if (ctx.interactive) ctx.io.prompter.intro("create-gym-participant");
    const choices = await resolveChoices(ctx, flags.dir ?? "gym-resources");
    const dir = await resolveDir(ctx, choices.kind);
    const projectDir = path.resolve(io.cwd, dir);
    const checkoutSdk = flags.sdk === undefined ? checkoutSdkDir(io.packageDir) : null;
    const vendored = checkoutSdk === null ? null : planVendoredSdk(checkoutSdk);
    const sdkSpec =
      vendored?.spec ??
      sdkDependency({
        ...(flags.sdk === undefined ? {} : { sdk: flags.sdk }),
        cwd: io.cwd,
        projectDir,
        scaffolderVersion: io.version,
      });
    const overwrite = await mayOverwrite(ctx, dir, projectDir);
    const packageName = toPackageName(path.basename(projectDir));
    io.out(`Scaffolding ${choices.kind} server (${describe(choices)}) in ${projectDir}`);
    const files = scaffold({
      choices,
      projectDir,
      packageName,
      sdkSpec,
      templatesDir: io.packageDir,
      overwrite,
    });
    if (vendored !== null) {
      (io.packSdk ?? packVendoredSdk)(vendored, projectDir);
      io.out(
        `  ${files.length + 1} files; gym-participant-sdk: ${sdkSpec} (packed from ${vendored.sdkDir})`,
      );
    } else {
      io.out(`  ${files.length} files; gym-participant-sdk: ${sdkSpec}`);
    }
    io.out("");
    for (const line of nextSteps({ pm, cwd: io.cwd, projectDir })) io.out(line);
    if (underCodingAgent(io.env)) {
      io.out("");
      io.out("To create the same project again without prompts:");
      io.out(
        `  ${oneShotCommand({ pm, dir, choices, ...(flags.sdk === undefined ? {} : { sdk: flags.sdk }) })}`,
      );
    }
    return 0;
  } catch (error) {
    if (error instanceof PromptCancelled) {
      io.err(`create-gym-participant: ${error.message}`);
      return 1;
    }
    if (error instanceof CreateError) {
      io.err(`create-gym-participant: ${error.message}`);
      io.err(`what to do: ${error.todo}`);
      return error.exitCode;
    }
    if (error instanceof SdkSpecError) {
      io.err(`create-gym-participant: ${error.message}`);
      return 2;
    }
    io.err(`create-gym-participant: ${error instanceof Error ? error.message : String(error)}`);
    return 1;
  }
}

function describe(choices: Choices): string {
  return choices.verify === null
    ? choices.mode
    : `checkpointMode ${choices.mode}, checkpointVerify ${choices.verify}`;
}
