/**
 * The fuzz suite on demand: `npm run test:fuzz -- --budget 20000 --seed 7` builds, starts the
 * reference deployment (built servers), sends `budget` hostile requests plus the half-sent,
 * Content-Length and corrupted-checkpoint phases, and prints the seed, the figures and one line
 * per finding group with its repro. Exits 1 when anything was found.
 */
import { runFuzz } from "./fuzzer.js";

function arg(name: string, fallback: number): number {
  const at = process.argv.indexOf(`--${name}`);
  if (at < 0) return fallback;
  const value = Number(process.argv[at + 1]);
  if (!Number.isSafeInteger(value) || value < 0) {
    console.error(`--${name} takes a non-negative integer`);
    process.exit(2);
  }
  return value;
}

const seed = arg("seed", Date.now() % 1_000_000);
const budget = arg("budget", 2000);
console.log(`fuzz: seed ${seed}, budget ${budget} requests`);
const report = await runFuzz({
  seed,
  budget,
  concurrency: arg("concurrency", 8),
  compiled: !process.argv.includes("--source"),
  log: (line) => console.log(`  ${line}`),
});
const groups = new Map<string, { count: number; detail: string; repro: string }>();
for (const finding of report.findings) {
  const group = groups.get(finding.group);
  if (group === undefined) groups.set(finding.group, { count: 1, ...finding });
  else group.count++;
}
console.log(
  `\nseed ${report.seed}: ${report.requests} requests and ${report.corruptedRestores} corrupted restores in ` +
    `${(report.durationMs / 1000).toFixed(0)} s; statuses ${JSON.stringify(report.statuses)}`,
);
console.log(`${report.findings.length} finding(s) in ${groups.size} group(s)`);
for (const [name, group] of groups) {
  console.log(`- ${name} (×${group.count}): ${group.detail}\n  repro: ${group.repro}`);
}
process.exit(report.findings.length > 0 ? 1 : 0);
