/**
 * The overview `gym --help` prints after commander's own help: every command with its options,
 * or with its verbs and theirs. It is generated from the commander definitions, so a command's
 * or an option's description is written once, where the command is defined.
 */
import type { Command, Help, Option } from "commander";

/** Where the overview wraps. */
const WIDTH = 100;
/** The column descriptions start at. */
const COLUMN = 32;

const sharedOptions = new WeakSet<Option>();

/**
 * Marks an option every verb of a command group takes alike (`--state`, `--json`, …): the
 * overview names it once for the group instead of on every verb.
 */
export function sharedOption(option: Option): Option {
  sharedOptions.add(option);
  return option;
}

/** `term` at `indent`, then `description` from {@link COLUMN}, wrapped; on the next line when `term` is too wide. */
function item(helper: Help, indent: number, term: string, description: string): string[] {
  const first = " ".repeat(indent) + term;
  if (description === "") return [first];
  const pad = " ".repeat(COLUMN);
  const wrapped = helper.boxWrap(description, WIDTH - COLUMN).split("\n");
  if (first.length + 2 > COLUMN) return [first, ...wrapped.map((line) => pad + line)];
  const [head = "", ...rest] = wrapped;
  return [first.padEnd(COLUMN) + head, ...rest.map((line) => pad + line)];
}

/** The arguments of `command` as its usage writes them: `<dir>`, `[deployment]`. */
function argumentsOf(command: Command): string[] {
  return command.registeredArguments.map((argument) => {
    const name = argument.name() + (argument.variadic ? "..." : "");
    return argument.required ? `<${name}>` : `[${name}]`;
  });
}

/** An option in a synopsis: `--id <id>`, `[--scope continued|all]`, `[--json]`. */
function synopsisOf(option: Option): string {
  const term =
    option.argChoices !== undefined && option.long !== undefined
      ? `${option.long} ${option.argChoices.join("|")}`
      : option.flags;
  return option.mandatory ? term : `[${term}]`;
}

/** A leaf command: its usage and description, then each option with its description. */
function leafOverview(helper: Help, command: Command, prefix: string): string[] {
  const usage = [prefix, command.name(), ...argumentsOf(command)].join(" ");
  return [
    ...item(helper, 2, usage, command.description()),
    ...command.options
      .filter((option) => !option.hidden)
      .flatMap((option) =>
        item(helper, 6, helper.optionTerm(option), helper.optionDescription(option)),
      ),
  ];
}

/**
 * A command group: its description, then a synopsis of each verb with the verb's description,
 * then the shared options once (see {@link sharedOption}).
 */
function groupOverview(helper: Help, command: Command, prefix: string): string[] {
  const lines = item(helper, 2, `${prefix} ${command.name()} <verb>`, command.description());
  const shared = new Map<string, Option>();
  const without: string[] = [];
  for (const verb of command.commands) {
    const own = verb.options.filter((option) => !option.hidden && !sharedOptions.has(option));
    const synopsis = [verb.name(), ...argumentsOf(verb), ...own.map(synopsisOf)].join(" ");
    lines.push(...item(helper, 6, synopsis, verb.description()));
    const mine = verb.options.filter((option) => sharedOptions.has(option));
    if (mine.length === 0) without.push(verb.name());
    for (const option of mine) shared.set(option.flags, option);
  }
  if (shared.size > 0) {
    const who = without.length === 0 ? "every verb" : `every verb but ${without.join(", ")}`;
    lines.push(`      ${who} also takes:`);
    for (const option of shared.values()) {
      lines.push(...item(helper, 8, helper.optionTerm(option), helper.optionDescription(option)));
    }
  }
  return lines;
}

/**
 * The "Commands and their options" section of `program`'s help, from its definitions: a leaf
 * command lists its options, a group (`gym ckpt`) a synopsis of each verb.
 */
export function commandsOverview(program: Command): string {
  const helper = program.createHelp();
  helper.helpWidth = WIDTH;
  const lines = ["Commands and their options:"];
  for (const command of program.commands) {
    lines.push(
      ...(command.commands.length > 0
        ? groupOverview(helper, command, program.name())
        : leafOverview(helper, command, program.name())),
    );
  }
  return lines.join("\n");
}
