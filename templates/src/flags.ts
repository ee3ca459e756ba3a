/**
 * The command line: `create-gym-participant [dir] --kind ... [--mode ...] [--verify ...]
 * [--sdk ...] [--overwrite] [--interactive | --no-interactive]`, parsed with commander into
 * {@link Flags}. Every prompt has a flag here, and `--help` lists every choice.
 *
 * @module
 */
import { Command, CommanderError, Option } from "commander";
import {
  KINDS,
  KIND_HINTS,
  MODES,
  MODES_OF,
  MODE_HINTS,
  VERIFY_HINTS,
  VERIFY_MODES,
  type Kind,
  type Mode,
  type Verify,
} from "./choices.js";

/** What the command line said; absent fields are asked for (on a terminal) or defaulted. */
export interface Flags {
  readonly dir?: string;
  readonly kind?: Kind;
  readonly mode?: Mode;
  readonly verify?: Verify;
  /** How to write the SDK dependency (a path, a tarball or a version); see `sdk-dependency.ts`. */
  readonly sdk?: string;
  /** Empty a non-empty target directory first. @default false */
  readonly overwrite: boolean;
  /** True / false: forced by `--interactive` / `--no-interactive`; absent: TTY detection. */
  readonly interactive?: boolean;
}

/** Parsing stopped: `--help` was shown (code 0) or the command line is wrong (code 2). */
export class FlagsExit extends Error {
  override name = "FlagsExit";
  constructor(
    readonly exitCode: number,
    message: string,
  ) {
    super(message);
  }
}

const choices = <T extends string>(hints: Readonly<Record<T, string>>): string =>
  Object.entries(hints)
    .map(([name, hint]) => `    ${name.padEnd(13)} ${String(hint)}`)
    .join("\n");

const HELP_AFTER = `
Kinds (--kind):
${choices(KIND_HINTS)}

Modes (--mode; resources servers choose, agents and environments are "exported"):
${choices(MODE_HINTS)}
  default: ${MODES_OF.resources[0]}

Verify declarations (--verify; resources servers only, checkpointVerify):
${choices(VERIFY_HINTS)}
  default: wait

The SDK dependency (--sdk):
    a directory      its package, linked as file:<path> (e.g. a checkout's sdk/)
    a .tgz file      a tarball made by \`npm pack\`, as file:<path>
    a version        a version or range from the registry (e.g. ^0.1.0)
  default: the sdk/ of the checkout this command runs from, packed by \`npm pack\` into the
           project's vendor/ (the project then installs and runs without the checkout);
           outside a checkout, ^<this version> from the registry

On a terminal, whatever the flags leave open is asked for; --interactive / --no-interactive
override the terminal detection (--interactive still needs a terminal on standard input to read
the answers from: without one it exits 2). Without prompts, --kind is required.

Examples:
  npx create-gym-participant my-tools --kind resources --mode exported --verify replay
  npx create-gym-participant my-agent --kind agent --no-interactive
  npx create-gym-participant my-env --kind environment --sdk ../gym-participant-sdk/sdk
`;

/** The commander program (exits and output are the caller's: see {@link parseFlags}). */
function program(write: (text: string) => void): Command {
  return new Command("create-gym-participant")
    .description("Scaffold a checkpointable gym server built on gym-participant-sdk.")
    .argument("[dir]", "the directory to create (default: gym-<kind>)")
    .addOption(new Option("--kind <kind>", "the participant kind").choices(KINDS))
    .addOption(new Option("--mode <mode>", "the checkpoint mode").choices(MODES))
    .addOption(new Option("--verify <verify>", "the verify declaration").choices(VERIFY_MODES))
    .option("--sdk <spec>", "how to depend on gym-participant-sdk (see below)")
    .option("--overwrite", "empty a non-empty target directory first (default: refuse)")
    .option(
      "--interactive",
      "ask for missing choices even when output is not a terminal (input must be one)",
    )
    .option("--no-interactive", "never ask; fail on a missing required choice")
    .addHelpText("after", HELP_AFTER)
    .helpOption("-h, --help", "show this help")
    .showHelpAfterError("(run with --help for every choice)")
    .exitOverride()
    .configureOutput({ writeOut: write, writeErr: write });
}

/**
 * Parses `argv` (without `node` and the script). Throws {@link FlagsExit} for `--help` (code 0,
 * with the help as message) and for a wrong command line (code 2, with commander's message).
 */
export function parseFlags(argv: readonly string[]): Flags {
  let output = "";
  const command = program((text) => (output += text));
  try {
    command.parse([...argv], { from: "user" });
  } catch (error) {
    if (error instanceof CommanderError) {
      const ok = error.exitCode === 0;
      throw new FlagsExit(ok ? 0 : 2, output.trimEnd());
    }
    throw error;
  }
  const options = command.opts<{
    kind?: Kind;
    mode?: Mode;
    verify?: Verify;
    sdk?: string;
    overwrite?: boolean;
    interactive?: boolean;
  }>();
  const dir = command.args[0];
  return {
    ...(dir === undefined ? {} : { dir }),
    ...(options.kind === undefined ? {} : { kind: options.kind }),
    ...(options.mode === undefined ? {} : { mode: options.mode }),
    ...(options.verify === undefined ? {} : { verify: options.verify }),
    ...(options.sdk === undefined ? {} : { sdk: options.sdk }),
    overwrite: options.overwrite === true,
    ...(options.interactive === undefined ? {} : { interactive: options.interactive }),
  };
}
