/**
 * The order `npm test` starts its files in: the longest first, so that the last files to start
 * are short ones and both workers finish together.
 *
 * Vitest orders by the durations its cache holds, and without a cache (a clean clone, CI) by
 * file size, largest first. The longest files here are among the smallest (a 13-line file that
 * re-runs a scenario with two workers a server, a fuzz or sequence slice that calls a runner),
 * so on a clean clone they started last and one worker ran alone for minutes at the end.
 * {@link KNOWN_SECONDS} gives them a duration; cached durations still win where both files have
 * one. Projects keep vitest's order (one project's files, then the next's).
 */
import path from "node:path";
import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * Seconds each long file took in a full run on a two-core machine (files under 15 s are left
 * out: they go after these, in vitest's order). Only the order matters: a stale figure costs
 * balance, never a result.
 */
export const KNOWN_SECONDS: Readonly<Record<string, number>> = {
  "test/templates/generated.test.ts": 232,
  "test/sequences/sequences.test.ts": 156,
  "test/e2e/crash-continue-workers.test.ts": 145,
  "test/fuzz/fuzz.test.ts": 123,
  "test/e2e/demo-collect.test.ts": 100,
  "test/e2e/crash-restart-legacy-workers.test.ts": 90,
  "test/e2e/demo-scenario.test.ts": 57,
  "test/e2e/collect-host-loss.test.ts": 55,
  "test/e2e/failpoints.test.ts": 49,
  "test/e2e/workers-resources.test.ts": 47,
  "test/e2e/collect.test.ts": 44,
  "test/e2e/slurm.test.ts": 34,
  "test/e2e/serve-nodes.test.ts": 32,
  "test/e2e/crash-continue.test.ts": 30,
  "test/e2e/serve-lifecycle.test.ts": 28,
  "test/e2e/reference-resources.test.ts": 27,
  "test/e2e/serve-failures.test.ts": 25,
  "test/e2e/host-loss.test.ts": 24,
  "test/e2e/trace-propagation.test.ts": 23,
  "test/e2e/session-secret.test.ts": 20,
  "test/e2e/crash-restart-legacy.test.ts": 20,
  "test/e2e/term-grace.test.ts": 18,
};

/** Known-long files first (longest first), then the rest in vitest's own order. */
export class HeaviestFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const ordered = await super.sort(files);
    const root = this.ctx.config.root;
    const seconds = (spec: TestSpecification): number => {
      const file = path.relative(root, spec.moduleId).split(path.sep).join("/");
      const cached = this.ctx.cache.getFileTestResults(`${spec.project.name}:${file}`);
      // A cached duration (milliseconds) is this machine's own figure: better than the table.
      return cached !== undefined ? cached.duration / 1000 : (KNOWN_SECONDS[file] ?? 0);
    };
    const rank = new Map(ordered.map((spec, i) => [spec, i]));
    return ordered.sort((a, b) => {
      // Projects run in the order vitest gave them.
      if (a.project.name !== b.project.name) {
        return (rank.get(a) ?? 0) - (rank.get(b) ?? 0);
      }
      return seconds(b) - seconds(a) || (rank.get(a) ?? 0) - (rank.get(b) ?? 0);
    });
  }
}
