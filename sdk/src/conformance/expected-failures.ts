/**
 * Known gaps (`--expected-failures FILE`): one requirement ID a line, optionally followed by
 * why, `#` starting a comment. A listed requirement that fails does not fail the run; one that
 * passes does (the entry is stale: remove it), so the list shrinks as the server improves.
 */
import type { RequirementResult } from "./requirement.js";

/** The listed IDs, each with the reason given for it (empty when none). */
export type ExpectedFailures = ReadonlyMap<string, string>;

/** A line of the file names no requirement, or names one twice. */
export class ExpectedFailuresError extends Error {
  override readonly name = "ExpectedFailuresError";
}

/**
 * Parses the file's text; `known` are the kit's requirement IDs.
 * @throws ExpectedFailuresError naming the line of an unknown or repeated ID
 */
export function parseExpectedFailures(text: string, known: readonly string[]): ExpectedFailures {
  const entries = new Map<string, string>();
  for (const [index, raw] of text.split(/\r?\n/).entries()) {
    const line = raw.replace(/#.*$/, "").trim();
    if (line === "") continue;
    const [id = "", ...why] = line.split(/\s+/);
    if (!known.includes(id)) {
      throw new ExpectedFailuresError(
        `line ${index + 1}: ${JSON.stringify(id)} is no requirement ID`,
      );
    }
    if (entries.has(id))
      throw new ExpectedFailuresError(`line ${index + 1}: ${id} is listed twice`);
    entries.set(id, why.join(" "));
  }
  return entries;
}

/** `result` as the expected failures judge it. */
export function applyExpectedFailures(
  result: RequirementResult,
  expected: ExpectedFailures | null,
): RequirementResult {
  const listed = expected?.get(result.id);
  if (listed === undefined) return result;
  if (result.result === "fail") {
    return {
      ...result,
      result: "expected-fail",
      reason: `expected: ${listed || "listed as a known gap"} (${result.reason ?? ""})`,
    };
  }
  if (result.result === "pass") {
    return {
      ...result,
      result: "stale",
      reason: "listed as an expected failure but passes: remove it from the expected failures",
    };
  }
  return result;
}
