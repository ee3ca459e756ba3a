/**
 * `npm run bench:workers-commit`: one counter resources server alone, with 1 and then 2
 * workers, holding N seeded sessions: prepare, commit, crash, restart and restore, timed per
 * step (median of several rounds). Isolates what several workers cost a commit and a restore
 * from the rest of a deployment competing for the cores. Figures only.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Command } from "commander";
import { CounterDeployment, postFresh } from "../e2e/workers-harness.js";

const options = new Command("bench:workers-commit")
  .option("--sessions <n>", "sessions held at the checkpoint", (v) => Number.parseInt(v, 10), 8000)
  .option("--rounds <n>", "checkpoints per worker count", (v) => Number.parseInt(v, 10), 3)
  .parse()
  .opts<{ sessions: number; rounds: number }>();

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function timed(fn: () => Promise<{ status: number; body: unknown }>): Promise<number> {
  const started = performance.now();
  const reply = await fn();
  if (reply.status !== 200) throw new Error(`HTTP ${reply.status}: ${JSON.stringify(reply.body)}`);
  return performance.now() - started;
}

async function measure(workers: number): Promise<{ commit: number; restore: number }> {
  const commits: number[] = [];
  const restores: number[] = [];
  for (let round = 0; round < options.rounds; round++) {
    const dir = mkdtempSync(path.join(tmpdir(), "gym-workers-commit-"));
    const run = new CounterDeployment(dir);
    try {
      await run.serve(workers);
      const url = run.url;
      const scope: { rollout_id: string; attempt: number }[] = [];
      const batch = 200;
      for (let i = 0; i < options.sessions; i += batch) {
        await Promise.all(
          Array.from({ length: Math.min(batch, options.sessions - i) }, async (_, j) => {
            const n = i + j;
            const seeded = await postFresh(url, `/ng-rollout/r${n}/seed_session`, {
              resources_session_id: `s${n}`,
              episode_id: { rollout_id: `r${n}`, attempt: 0 },
              task_id: { taskset: "t", task_id: String(n) },
              task_data: { target: 3 },
            });
            if (seeded.status !== 200)
              throw new Error(`seed failed: ${JSON.stringify(seeded.body)}`);
          }),
        );
      }
      for (let n = 0; n < options.sessions; n++) scope.push({ rollout_id: `r${n}`, attempt: 0 });
      const ckpt = path.join(dir, "ckpt");
      const deadline = (): number => Date.now() / 1000 + 120;
      await timed(() => run.control("prepare", { checkpoint_id: "c1", deadline_ts: deadline() }));
      commits.push(
        await timed(() =>
          run.control("commit", {
            checkpoint_id: "c1",
            checkpoint_dir: ckpt,
            deadline_ts: deadline(),
            episode_ids: scope,
          }),
        ),
      );
      await run.crash();
      await run.serve(workers);
      restores.push(
        await timed(() =>
          run.control("restore", {
            checkpoint_id: "c1",
            checkpoint_dir: ckpt,
            deadline_ts: deadline(),
            episode_ids: scope,
          }),
        ),
      );
      await run.stop();
    } finally {
      await run.crash().catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    }
  }
  return { commit: median(commits), restore: median(restores) };
}

const one = await measure(1);
const two = await measure(2);
const rows: [string, string][] = [
  ["sessions", String(options.sessions)],
  ["commit, 1 worker (ms, median)", one.commit.toFixed(0)],
  ["commit, 2 workers (ms, median)", two.commit.toFixed(0)],
  ["commit 2 / 1", (two.commit / one.commit).toFixed(2)],
  ["restore, 1 worker (ms, median)", one.restore.toFixed(0)],
  ["restore, 2 workers (ms, median)", two.restore.toFixed(0)],
  ["restore 2 / 1", (two.restore / one.restore).toFixed(2)],
];
const width = Math.max(...rows.map(([k]) => k.length));
process.stdout.write(`${rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join("\n")}\n`);
