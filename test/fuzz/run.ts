/**
 * The fuzz suite on demand: `npm run test:fuzz -- --budget 20000 --seed 7` starts the reference
 * deployment from its sources, sends `budget` hostile requests, then the half-sent, odd
 * directory and corrupted-checkpoint phases, and prints the seed, progress, the figures and one
 * line per finding group with its repro. Exits 1 when anything was found, 130 when interrupted.
 *
 * Options:
 * - `--seed S`: default from the clock (printed);
 * - `--budget N`: hostile requests, default 2000;
 * - `--concurrency C`: requests in flight at once, default 4;
 * - `--only X`: replay one part of the seed, printing requests and replies: a case number,
 *   `cases` (the hostile requests alone), `half-sent`, `odd-dirs`, `corrupt` or
 *   `corrupt:<name>`;
 * - `--compiled`: start the built servers (run `npm run build` first).
 */
import { runFuzz, type Finding } from "./fuzzer.js";

function option(name: string): string | undefined {
  const at = process.argv.indexOf(`--${name}`);
  return at < 0 ? undefined : process.argv[at + 1];
}

function numberOption(name: string, fallback: number): number {
  const text = option(name);
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 0) {
    console.error(`--${name} takes a non-negative integer, not ${JSON.stringify(text)}`);
    process.exit(2);
  }
  return value;
}

const seed = numberOption("seed", Date.now() % 1_000_000);
const budget = numberOption("budget", 2000);
const only = option("only");
console.log(`fuzz: seed ${seed}, budget ${budget} requests${only ? `, only ${only}` : ""}`);
// Ctrl-C stops sending and still stops the deployment (its servers run detached).
const interrupt = new AbortController();
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    console.log(`\n${signal}: stopping the deployment`);
    interrupt.abort();
  });
}
const report = await runFuzz({
  signal: interrupt.signal,
  seed,
  budget,
  concurrency: numberOption("concurrency", 4),
  compiled: process.argv.includes("--compiled"),
  ...(only === undefined ? {} : { only }),
  log: (line) => console.log(`  ${line}`),
});

if (interrupt.signal.aborted) process.exit(130);
const groups = new Map<string, { count: number; first: Finding }>();
for (const finding of report.findings) {
  const group = groups.get(finding.group);
  if (group === undefined) groups.set(finding.group, { count: 1, first: finding });
  else group.count++;
}
const seconds = report.durationMs / 1000;
const casesSeconds = report.casesMs / 1000;
const rate =
  casesSeconds > 0
    ? ` (the hostile cases: ${casesSeconds.toFixed(0)} s, ${(budget / casesSeconds).toFixed(0)} requests/s)`
    : "";
console.log(
  `\nseed ${report.seed}: ${report.requests} requests and ${report.corruptedRestores} corrupted ` +
    `restores in ${seconds.toFixed(0)} s${rate}`,
);
console.log(`statuses: ${JSON.stringify(report.statuses)}`);
console.log(`${report.findings.length} finding(s) in ${groups.size} group(s)`);
for (const [name, { count, first }] of groups) {
  console.log(`- ${name} (×${count})\n    ${first.detail}\n    repro: ${first.repro}`);
}
process.exit(report.findings.length > 0 ? 1 : 0);
