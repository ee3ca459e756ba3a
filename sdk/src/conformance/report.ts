/**
 * The run's report in three forms: a table for people (requirement, result, one-line reason,
 * where the docs state it), JSON, and JUnit XML for CI.
 */
import type { ResultKind } from "./requirement.js";
import type { ConformanceReport } from "./runner.js";

const SHOWN: Record<ResultKind, string> = {
  pass: "pass",
  fail: "FAIL",
  skip: "skip",
  "expected-fail": "xfail",
  stale: "STALE",
};

/** Cuts `text` to one line of at most `max` characters. */
function oneLine(text: string, max: number): string {
  const line = text.replace(/\s+/g, " ").trim();
  return line.length <= max ? line : `${line.slice(0, max - 1)}…`;
}

/** Counts of each result. */
export function summaryOf(report: ConformanceReport): Record<ResultKind, number> {
  const counts: Record<ResultKind, number> = {
    pass: 0,
    fail: 0,
    skip: 0,
    "expected-fail": 0,
    stale: 0,
  };
  for (const result of report.results) counts[result.result] += 1;
  return counts;
}

/** The table: one row per requirement, then the summary and the replay command of the seed. */
export function reportTable(report: ConformanceReport, replay: string): string {
  const rows = report.results.map((r) => [
    r.id,
    SHOWN[r.result],
    oneLine(r.reason ?? "", 90),
    r.docs,
  ]);
  const header = ["REQUIREMENT", "RESULT", "REASON", "DOCS"];
  const widths = header.map((title, column) =>
    Math.max(title.length, ...rows.map((row) => (row[column] ?? "").length)),
  );
  const line = (cells: readonly string[]): string =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
      .join("  ")
      .trimEnd();
  const counts = summaryOf(report);
  const summary = [
    `${counts.pass} passed`,
    `${counts.fail} failed`,
    `${counts.skip} skipped`,
    ...(counts["expected-fail"] > 0 ? [`${counts["expected-fail"]} expected failures`] : []),
    ...(counts.stale > 0 ? [`${counts.stale} stale expected failures`] : []),
  ].join(", ");
  return [
    `${report.url}: ${report.declared}`,
    "",
    line(header),
    ...rows.map(line),
    "",
    `${report.passed ? "conforms" : "does not conform"}: ${summary}`,
    `hostile slice seed ${report.seed}; replay: ${replay}`,
  ].join("\n");
}

/** The report as JSON (what `--json` prints). */
export function reportJson(report: ConformanceReport, replay: string): unknown {
  return {
    url: report.url,
    kind: report.profile.kind,
    profile: report.profile,
    seed: report.seed,
    replay,
    passed: report.passed,
    summary: summaryOf(report),
    results: report.results,
  };
}

/** Characters XML 1.0 cannot hold at all. */
// eslint-disable-next-line no-control-regex -- matching them is the point
const NOT_XML = /[\u0000-\u0008\u000b\u000c\u000e-\u001f]/g;

function xml(text: string): string {
  return text
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(NOT_XML, "?");
}

/** The report as JUnit XML: one test case per requirement, classname its group. */
export function reportJunit(report: ConformanceReport): string {
  const counts = summaryOf(report);
  const failures = counts.fail + counts.stale;
  const seconds = (ms: number) => (ms / 1000).toFixed(3);
  const total = report.results.reduce((sum, r) => sum + r.ms, 0);
  const cases = report.results.map((r) => {
    const open = `    <testcase classname="${xml(r.group)}" name="${xml(r.id)}" time="${seconds(r.ms)}"`;
    const reason = xml(r.reason ?? "");
    switch (r.result) {
      case "pass":
        return `${open}/>`;
      case "fail":
      case "stale":
        return `${open}>\n      <failure message="${reason}" type="${r.result}">${xml(r.docs)}</failure>\n    </testcase>`;
      case "skip":
      case "expected-fail":
        return `${open}>\n      <skipped message="${reason}"/>\n    </testcase>`;
      default: {
        const never: never = r.result;
        return never;
      }
    }
  });
  return [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<testsuites name="gym conformance" tests="${report.results.length}" failures="${failures}" time="${seconds(total)}">`,
    `  <testsuite name="${xml(`${report.url} (${report.declared})`)}" tests="${report.results.length}" failures="${failures}" skipped="${counts.skip + counts["expected-fail"]}" time="${seconds(total)}">`,
    ...cases,
    "  </testsuite>",
    "</testsuites>",
    "",
  ].join("\n");
}
