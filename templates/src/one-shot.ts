/**
 * The one-shot command: the same project created with every choice given as a flag, printed
 * for a coding agent (which has no terminal to answer prompts on) and in errors about a missing
 * choice.
 *
 * @module
 */
import type { Choices } from "./choices.js";
import type { PackageManager } from "./package-manager.js";

/**
 * Environment variables that coding agents set in the shells they run. `AI_AGENT` is the
 * generic convention; the others name particular agents.
 */
const AGENT_VARIABLES = ["AI_AGENT", "CLAUDECODE", "CURSOR_AGENT", "GEMINI_CLI", "CODEX_SANDBOX"];

/** Whether the scaffolder seems to run under a coding agent. */
export function underCodingAgent(env: Readonly<Record<string, string | undefined>>): boolean {
  return AGENT_VARIABLES.some((name) => (env[name] ?? "") !== "");
}

/** How `pm` runs the scaffolder. */
function createCommand(pm: PackageManager): string {
  return pm === "npm" ? "npx create-gym-participant" : `${pm} create gym-participant`;
}

/** Quotes an argument for a POSIX shell when it needs it. */
function shellArg(value: string): string {
  return /^[\w@%+=:,./-]+$/.test(value) ? value : `'${value.replaceAll("'", `'\\''`)}'`;
}

/** The command that creates the same project without asking anything. */
export function oneShotCommand(input: {
  readonly pm: PackageManager;
  readonly dir: string;
  readonly choices: Partial<Choices>;
  readonly sdk?: string;
}): string {
  const { choices } = input;
  const parts = [createCommand(input.pm), shellArg(input.dir)];
  parts.push("--kind", choices.kind ?? "<resources|agent|environment>");
  if (choices.kind === "resources" || choices.kind === undefined) {
    if (choices.mode !== undefined) parts.push("--mode", choices.mode);
    if (choices.verify != null) parts.push("--verify", choices.verify);
  }
  if (input.sdk !== undefined) parts.push("--sdk", shellArg(input.sdk));
  parts.push("--no-interactive");
  return parts.join(" ");
}
