/**
 * What the commander actions of `gym` share: how an action reports its exit status, and the
 * parsers of the argument types several commands take.
 */
import { CheckpointIdSchema } from "../wire/control.js";
import { parseDuration } from "./duration.js";
import { UsageError, type Io } from "./output.js";

/** How actions report back to {@link runCli}. */
export interface Handlers {
  readonly io: Io;
  /** Records the status an action finished with. */
  exit(code: number): void;
  /** Whether the running action prints JSON (errors then also go to stdout as JSON). */
  json(enabled: boolean): void;
}

/**
 * Wraps an action that returns its exit status into one commander can call; the status goes to
 * `handlers`.
 */
export function runner(handlers: Handlers) {
  return <A extends unknown[]>(action: (...args: A) => Promise<number>) =>
    async (...args: A): Promise<void> => {
      handlers.exit(await action(...args));
    };
}

/** Parses a checkpoint ID given with `flag`. */
export function checkpointId(value: string, flag = "--id"): string {
  const parsed = CheckpointIdSchema.safeParse(value);
  if (!parsed.success) {
    throw new UsageError(
      `${flag} ${JSON.stringify(value)} is not a checkpoint ID`,
      "use letters, digits, '.', '_' and '-', starting with a letter or digit (at most 128)",
    );
  }
  return parsed.data;
}

/** Parses a duration given with `flag` (`500ms`, `30s`, `2m`) to ms; `fallback` when absent. */
export function duration(value: string | undefined, flag: string, fallback: number): number {
  return value === undefined ? fallback : parseDuration(value, flag);
}

/** {@link duration}, refusing 0. */
export function positiveDuration(
  value: string | undefined,
  flag: string,
  fallback: number,
): number {
  const ms = duration(value, flag, fallback);
  if (ms <= 0) throw new UsageError(`${flag} must be longer than 0`, `e.g. ${flag} 30s`);
  return ms;
}
