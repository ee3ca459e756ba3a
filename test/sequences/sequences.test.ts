/**
 * The bounded slice of the random crash sequences (test/sequences/engine.ts) in `npm test`:
 * twenty fixed seeds against one reference deployment in real processes, started from the build
 * (`npm run test:sequences -- --source` runs them from source).
 * Longer runs: `npm run test:sequences -- --sequences 1000 [--seed S]`. A failing seed's
 * message carries its replay command.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SCENARIOS, SequenceWorld, playSequence } from "./engine.js";

/**
 * Twenty fixed seeds, chosen so every scenario is drawn at least twice where it is cheap and
 * where it restarts the deployment (each restart costs seconds) only for what nothing else
 * covers: checkpoint-resume 2, 5, 6, 10, 15, 21; run-through 13, 24; retire-restart 14, 20, 34;
 * prepare-abort 23, 25; lease-expiry 16, 22, 30; a crash before the resume, then a restore of
 * the older checkpoint that four participants die in at `restore.install`, repeated 7; commits
 * of restored attempts that die at `commit.published` everywhere (restored whole) 78, at
 * `commit.link` everywhere (refused everywhere) 64, and at `commit.records.written` in one
 * participant only (the others publish; refused by it, rolled back) 53.
 */
const SEEDS = [2, 5, 6, 7, 10, 13, 14, 15, 16, 20, 21, 22, 23, 24, 25, 30, 34, 53, 64, 78];

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
  const interrupted = new Set<string>();

  it.each(SEEDS)("seed %i keeps every invariant", { timeout: 180_000 }, async (seed) => {
    const result = await playSequence(world, seed);
    scenarios.add(result.scenario);
    if (result.interrupted !== undefined) interrupted.add(result.interrupted);
  });

  it("drew every scenario, and interrupted commits both restored whole and refused", () => {
    expect([...scenarios].sort()).toEqual(SCENARIOS.map(([name]) => name).sort());
    expect([...interrupted].sort()).toEqual(["refused", "whole"]);
  });
});
