/**
 * Parsers of the demos' flags: a bad value is refused as typed, naming the flag, before anything
 * starts.
 */
import { InvalidArgumentError } from "commander";

/** A commander parser of a positive whole number given with `flag`. */
export function positiveInteger(flag: string): (value: string) => number {
  return (value) => {
    if (!/^\d+$/.test(value.trim()) || Number(value) < 1 || !Number.isSafeInteger(Number(value))) {
      throw new InvalidArgumentError(
        `${flag} must be a positive integer, got ${JSON.stringify(value)}`,
      );
    }
    return Number(value);
  };
}
