/**
 * The questions asked on a terminal, behind a small {@link Prompter} interface so the flow can
 * be driven by tests without a terminal; {@link clackPrompter} asks with `@clack/prompts`.
 *
 * @module
 */
import * as clack from "@clack/prompts";

/** One option of a select. */
export interface SelectOption<T extends string> {
  readonly value: T;
  readonly label: string;
  readonly hint?: string;
}

/** Thrown when the person cancels a prompt (Ctrl-C, Escape). */
export class PromptCancelled extends Error {
  override name = "PromptCancelled";
  constructor() {
    super("Operation cancelled; nothing was written");
  }
}

/** What the scaffolder asks. Each method throws {@link PromptCancelled} when cancelled. */
export interface Prompter {
  /** Shown once before the first question. */
  intro(title: string): void;
  select<T extends string>(message: string, options: readonly SelectOption<T>[]): Promise<T>;
  text(message: string, defaultValue: string): Promise<string>;
  confirm(message: string): Promise<boolean>;
}

function answered<T>(value: T | symbol): T {
  if (clack.isCancel(value)) throw new PromptCancelled();
  return value as T;
}

/** Asks on the process's terminal with `@clack/prompts`. */
export const clackPrompter: Prompter = {
  intro: (title) => clack.intro(title),
  select: async <T extends string>(message: string, options: readonly SelectOption<T>[]) =>
    answered<T>(
      await clack.select<T>({
        message,
        // clack's option type is a conditional type over T; each of ours is a plain option.
        options: options.map((o) => ({
          value: o.value,
          label: o.label,
          ...(o.hint === undefined ? {} : { hint: o.hint }),
        })) as Parameters<typeof clack.select<T>>[0]["options"],
      }),
    ),
  text: async (message, defaultValue) =>
    answered<string>(await clack.text({ message, placeholder: defaultValue, defaultValue })),
  confirm: async (message) =>
    answered<boolean>(await clack.confirm({ message, initialValue: false })),
};
