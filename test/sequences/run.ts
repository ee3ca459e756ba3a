/**
 * Random crash sequences on demand: `npm run test:sequences -- --sequences 1000 [--seed S]`
 * plays seeds S, S+1, ... against one reference deployment in real processes and prints one
 * line per sequence and a summary. The first failure prints its replay command and exits 1.
 *
 * Options: `--seeds 3,17,40` plays exactly those seeds; `--trace` prints each sequence's steps
 * with their start times; `--source` starts the servers from source instead of their build.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { SequenceFailure, SequenceWorld, playSequence, type SequenceResult } from "./engine.js";

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

const sequences = arg("sequences", 20);
const firstSeed = arg("seed", 1);
/** `--seeds 3,17,40`: exactly these seeds (instead of `--seed` and `--sequences`). */
const listed = process.argv.includes("--seeds")
  ? (process.argv[process.argv.indexOf("--seeds") + 1] ?? "").split(",").map(Number)
  : null;
if (listed !== null && !listed.every((seed) => Number.isSafeInteger(seed) && seed >= 0)) {
  console.error("--seeds takes a comma-separated list of non-negative integers");
  process.exit(2);
}
/** `--trace`: each sequence's steps and when they began. */
const trace = process.argv.includes("--trace");
const seeds = listed ?? Array.from({ length: sequences }, (_, i) => firstSeed + i);
const dir = mkdtempSync(path.join(tmpdir(), "gym-sequences-"));
// The script builds first: the long run starts the built servers, twice as fast as from source.
const world = new SequenceWorld(dir, { compiled: !process.argv.includes("--source") });
const started = Date.now();
const results: SequenceResult[] = [];
let failed = false;
console.log(
  `crash sequences: seeds ${listed ? listed.join(",") : `${firstSeed}..${firstSeed + sequences - 1}`} (run dir ${dir})`,
);
try {
  await world.start();
  for (const seed of seeds) {
    const t = Date.now();
    const result = await playSequence(world, seed);
    results.push(result);
    console.log(
      `seed ${seed}: ${result.scenario}${result.variant ? ` (${result.variant})` : ""}, ` +
        `${result.rollouts} rollout(s), ${result.crashes} crash(es)` +
        `${result.interrupted ? `, interrupted commit ${result.interrupted}` : ""} — ${Date.now() - t} ms`,
    );
    if (trace) for (const { step, atMs } of result.timeline) console.log(`  ${atMs} ms: ${step}`);
  }
} catch (error) {
  failed = true;
  console.error(error instanceof SequenceFailure ? error.message : error);
} finally {
  await world.stop();
  if (!failed) rmSync(dir, { recursive: true, force: true });
}
const byScenario = new Map<string, number>();
for (const r of results) byScenario.set(r.scenario, (byScenario.get(r.scenario) ?? 0) + 1);
const crashes = results.reduce((sum, r) => sum + r.crashes, 0);
const whole = results.filter((r) => r.interrupted === "whole").length;
const refused = results.filter((r) => r.interrupted === "refused").length;
console.log(
  `\n${results.length} sequence(s) passed${failed ? ", then one failed (above)" : ""} in ` +
    `${((Date.now() - started) / 1000).toFixed(0)} s ` +
    `(${((Date.now() - started) / Math.max(1, results.length) / 1000).toFixed(1)} s a sequence); ${crashes} crash(es); interrupted commits: ` +
    `${whole} restored whole, ${refused} refused; scenarios: ` +
    [...byScenario].map(([name, n]) => `${name} ${n}`).join(", "),
);
process.exit(failed ? 1 : 0);
