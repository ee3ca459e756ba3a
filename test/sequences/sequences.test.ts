/**
 * The bounded slice of the random crash sequences (test/sequences/engine.ts) in `npm test`:
 * twenty fixed seeds against one reference deployment in real processes, started from source.
 * Longer runs: `npm run test:sequences -- --sequences 1000 [--seed S]`. A failing seed's
 * message carries its replay command.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SequenceWorld, playSequence } from "./engine.js";

/** Seeds 1..20: every scenario is drawn at least twice among them. */
const SEEDS = Array.from({ length: 20 }, (_, i) => i + 1);

const dir = mkdtempSync(path.join(tmpdir(), "gym-sequences-"));
const world = new SequenceWorld(dir);

beforeAll(async () => {
  await world.start();
}, 120_000);

afterAll(async () => {
  await world.stop();
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

describe("random crash sequences", () => {
  const scenarios = new Set<string>();

  it.each(SEEDS)("seed %i keeps every invariant", { timeout: 180_000 }, async (seed) => {
    const result = await playSequence(world, seed);
    scenarios.add(result.scenario);
  });

  it("drew every scenario", () => {
    expect([...scenarios].sort()).toEqual(
      [
        "checkpoint-crash",
        "checkpoint-resume",
        "crash-in-commit",
        "prepare-abort",
        "retire-restart",
        "run-through",
      ].sort(),
    );
  });
});
