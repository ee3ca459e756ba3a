/**
 * How the coordinator of a multi-worker server answers for all its workers: one prepare
 * report, one status. Pure functions over the workers' latest answers.
 *
 * @see docs/workers.md
 */
import { compareStrings } from "../util/compare-strings.js";
import { MAX_LISTED_BLOCKERS, prepareReport, type PrepareReport } from "../wire/control.js";

/** What the coordinator knows of its workers while merging. */
export interface MembershipFacts {
  /** The `kind` prefix of synthetic blockers: `resources`, `agent`, `environment`, `policy`. */
  readonly blockerPrefix: string;
  /** How many workers the server runs. */
  readonly expected: number;
  /** Whether a worker left since admission closed (or since the server started). */
  readonly lost: boolean;
}

/**
 * One report for the participant: ready once every expected worker reported ready and none was
 * lost; blockers are the union (synthetic ones first: `<prefix>-worker-lost`,
 * `<prefix>-workers-unreported:<n>`), listed up to the usual cap with the full count; counts are
 * summed, plus `workers` (the number reporting); restarts are the union, never capped.
 */
export function mergeReports(
  reports: readonly PrepareReport[],
  facts: MembershipFacts,
): PrepareReport {
  const synthetic: string[] = [];
  if (facts.lost) synthetic.push(`${facts.blockerPrefix}-worker-lost`);
  const unreported = Math.max(0, facts.expected - reports.length);
  if (unreported > 0) synthetic.push(`${facts.blockerPrefix}-workers-unreported:${unreported}`);
  const blockers = new Set<string>();
  const restarts = new Set<string>();
  const counts: Record<string, number> = {};
  let extraBlockers = 0;
  for (const report of reports) {
    for (const blocker of report.blockers) blockers.add(blocker);
    // A worker lists at most the cap: what it left out still counts.
    extraBlockers += Math.max(0, report.blocker_count - report.blockers.length);
    for (const restart of report.restarts) restarts.add(restart);
    for (const [name, value] of Object.entries(report.counts)) {
      counts[name] = (counts[name] ?? 0) + value;
    }
  }
  counts.workers = reports.length;
  const listed = [...synthetic, ...[...blockers].sort(compareStrings)];
  return prepareReport({
    ready: synthetic.length === 0 && reports.every((report) => report.ready),
    blockers: listed.slice(0, MAX_LISTED_BLOCKERS),
    blockerCount: listed.length + extraBlockers,
    counts,
    restarts: [...restarts].sort(compareStrings),
  });
}

/**
 * The status extras of all workers as one: numbers are summed, lists are merged (sorted, each
 * entry once), booleans hold when they hold on every worker, anything else is taken from the
 * first worker that has it.
 */
export function mergeStatusExtras(
  extras: readonly Record<string, unknown>[],
): Record<string, unknown> {
  const merged: Record<string, unknown> = {};
  for (const extra of extras) {
    for (const [name, value] of Object.entries(extra)) {
      const current = merged[name];
      if (current === undefined) {
        merged[name] = Array.isArray(value) ? [...(value as unknown[])] : value;
      } else if (typeof current === "number" && typeof value === "number") {
        merged[name] = current + value;
      } else if (typeof current === "boolean" && typeof value === "boolean") {
        merged[name] = current && value;
      } else if (Array.isArray(current) && Array.isArray(value)) {
        current.push(...(value as unknown[]));
      }
    }
  }
  for (const [name, value] of Object.entries(merged)) {
    if (Array.isArray(value) && value.every((item) => typeof item === "string")) {
      merged[name] = [...new Set(value)].sort(compareStrings);
    }
  }
  return merged;
}
