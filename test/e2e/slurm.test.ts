/**
 * The Slurm recipe (deploy/slurm: gym.sbatch and its two-node deployment) on a real Slurm
 * cluster on this machine (test/support/slurm-cluster.ts): the job is submitted with sbatch,
 * preempted with `scontrol requeue` while rows are held in flight at the fake inference backend,
 * requeued by Slurm, and resumed. Every row must end exactly once with reward 1; the rows in
 * flight at the preemption must continue from the stop checkpoint (restored, not fenced, as
 * attempt 1, their first call continuing the call cut at the checkpoint); each node's servers
 * must listen on that node's address.
 *
 * Needs root and Debian's slurm-wlm and munge, and a build (the job runs the built CLI and
 * servers). Without them the test is skipped, unless CI_REQUIRE_SLURM=1 (CI), where it fails.
 */
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { COMPILED_CLI, REPO } from "../../demo/gym-process.js";
import {
  freePorts,
  slurmUnavailable,
  startSlurmCluster,
  type SlurmCluster,
} from "../support/slurm-cluster.js";
import { CollectDir, counterRow, writeTasks } from "./collect-harness.js";
import type { BackendCall } from "./crash-harness.js";
import { waitFor } from "./helpers.js";

const ROWS = 40;
const CONCURRENCY = 8;
/** Calls that pass before the backend holds every later one: some rows end before the preemption. */
const FREE_CALLS = 30;
/** The recipe's servers and the variables that set their ports. */
const PORT_VARIABLES = {
  inference: "GYM_PORT_INFERENCE",
  policy: "GYM_PORT_POLICY",
  counter: "GYM_PORT_COUNTER",
  weather: "GYM_PORT_WEATHER",
  simple_agent: "GYM_PORT_SIMPLE_AGENT",
  counter_env: "GYM_PORT_COUNTER_ENV",
  weather_env: "GYM_PORT_WEATHER_ENV",
} as const;
const NODE_OF: Record<string, "gpu" | "cpu"> = {
  inference: "gpu",
  policy: "gpu",
  counter: "cpu",
  weather: "cpu",
  simple_agent: "cpu",
  counter_env: "cpu",
  weather_env: "cpu",
};

const unavailable = slurmUnavailable();
const required = process.env.CI_REQUIRE_SLURM === "1";
if (unavailable !== null && !required) {
  console.warn(`skipping the Slurm end-to-end test: ${unavailable}`);
}

/** What `gym collect --json` printed at the end of one session. */
interface Summary {
  readonly session: number;
  readonly status: string;
  readonly ended: number;
  readonly rate: number;
  readonly elapsedSeconds: number;
  readonly restored: number;
  readonly fenced: number;
  readonly stopCheckpoint: boolean | null;
  readonly checkpoints: { published: number; missed: number; failed: number };
  readonly lastCheckpoint: { status: string; continued: number; pauseMs: number } | null;
}

/** One run of the batch script: the nodes it resolved. */
interface Placement {
  readonly restart: number;
  readonly gpu: { name: string; addr: string };
  readonly cpu: { name: string; addr: string };
}

/** The environment without the test runner's own variables (the job's processes inherit it). */
function jobEnvironment(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!/^(VITEST|NODE_OPTIONS|TEST$|GYM_)/.test(key)) env[key] = value;
  }
  return { ...env, ...extra };
}

async function getJson<T>(url: string): Promise<T | null> {
  try {
    const reply = await fetch(url, { signal: AbortSignal.timeout(2_000) });
    return reply.ok ? ((await reply.json()) as T) : null;
  } catch {
    return null;
  }
}

async function postJson(url: string, body: unknown): Promise<boolean> {
  try {
    const reply = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(2_000),
    });
    return reply.ok;
  } catch {
    return false;
  }
}

describe.skipIf(unavailable !== null && !required)("the Slurm recipe", { timeout: 240_000 }, () => {
  let cluster: SlurmCluster | null = null;
  let work = "";

  beforeAll(async () => {
    if (unavailable !== null) throw new Error(`CI_REQUIRE_SLURM=1, but ${unavailable}`);
    if (!existsSync(COMPILED_CLI)) throw new Error("the job runs the built CLI: npm run build");
    cluster = await startSlurmCluster({ killWaitSeconds: 60 });
    work = mkdtempSync(path.join(tmpdir(), "gym-e2e-slurm-"));
  }, 90_000);

  afterAll(async () => {
    await cluster?.stop();
    if (work !== "" && process.env.GYM_KEEP_SLURM_WORK !== "1")
      rmSync(work, { recursive: true, force: true });
  });

  it("preempted by scontrol requeue with rows in flight, the requeued job continues every row", async () => {
    const slurm = cluster as SlurmCluster;
    // The recipe as a checkout holds it: deploy/slurm/ beside reference-servers/ (the built
    // packages). The nodes' state goes to deploy/slurm/.gym/ here, not in the repository.
    const recipe = path.join(work, "deploy", "slurm");
    mkdirSync(recipe, { recursive: true });
    for (const file of ["deployment.yaml", "gym.sbatch"]) {
      copyFileSync(path.join(REPO, "deploy", "slurm", file), path.join(recipe, file));
    }
    symlinkSync(path.join(REPO, "reference-servers"), path.join(work, "reference-servers"));
    const tasks = writeTasks(
      path.join(work, "tasks.jsonl"),
      Array.from({ length: ROWS }, (_, i) => counterRow(i)),
    );
    const ckpt = new CollectDir(path.join(work, "checkpoints"));
    const ports = await freePorts(Object.keys(PORT_VARIABLES).length);
    const portOf = Object.fromEntries(
      Object.keys(PORT_VARIABLES).map((name, i) => [name, ports[i] as number]),
    );
    const env = jobEnvironment({
      GYM_TASKS: tasks,
      GYM_CONTROL_TOKEN: "slurm-e2e-token",
      GYM_CHECKPOINT_DIR: ckpt.dir,
      GYM_CMD: `${process.execPath} ${COMPILED_CLI}`,
      GYM_COLLECT_ARGS: `--concurrency ${CONCURRENCY} --json`,
      ...Object.fromEntries(
        Object.entries(PORT_VARIABLES).map(([name, variable]) => [variable, String(portOf[name])]),
      ),
    });
    const jobOut = path.join(work, "job.out");
    const output = (): string => (existsSync(jobOut) ? readFileSync(jobOut, "utf8") : "");
    const context = (): string => `job output:\n${output()}\n${slurm.logs()}`;

    const submitted = slurm.check(
      "sbatch",
      ["--parsable", `--output=${jobOut}`, "deploy/slurm/gym.sbatch"],
      { cwd: work, env },
    );
    const jobId = submitted.trim().split(";")[0] as string;

    /** The address of the first node of the job's current allocation (where gpu runs). */
    const gpuAddress = (restarts: number): string | null => {
      const job = slurm.job(jobId);
      if (job?.JobState !== "RUNNING" || Number(job.Restarts) !== restarts) return null;
      const first = slurm
        .check("scontrol", ["show", "hostnames", job.NodeList ?? ""])
        .split("\n")[0];
      return slurm.nodes.find((node) => node.name === first)?.addr ?? null;
    };

    // Hold every call after the first FREE_CALLS, placed before the collector (which waits for
    // all seven servers) sends any: rows end, then CONCURRENCY rows stay in flight.
    let backend = "";
    const held = await waitFor(async () => {
      const addr = gpuAddress(0);
      if (addr === null) return false;
      backend = `http://${addr}:${portOf.inference}`;
      return await postJson(`${backend}/_ctl/hold`, { after_calls: FREE_CALLS });
    }, 90_000);
    expect(held, `the hold was placed on the gpu node's backend\n${context()}`).toBe(true);
    let before: BackendCall[] = [];
    const inFlight = await waitFor(async () => {
      before = (await getJson<{ calls: BackendCall[] }>(`${backend}/_ctl/calls`))?.calls ?? [];
      return before.filter((call) => call.held && !call.returned).length >= CONCURRENCY;
    }, 90_000);
    expect(inFlight, `${CONCURRENCY} calls held in flight\n${context()}`).toBe(true);
    const endedBefore = ckpt.rows().length;
    expect(endedBefore, "rows ended before the preemption").toBeGreaterThan(0);

    const preempted = Date.now();
    slurm.check("scontrol", ["requeue", jobId]);

    // The requeued run: its backend's call log, read until the job ends (the log lives in
    // memory, and the job stops its servers when the collector is done).
    let after: BackendCall[] = [];
    let resumedAt: number | null = null;
    const finished = await waitFor(async () => {
      const addr = gpuAddress(1);
      if (addr !== null) {
        resumedAt ??= Date.now();
        const calls = await getJson<{ calls: BackendCall[] }>(
          `http://${addr}:${portOf.inference}/_ctl/calls`,
        );
        if (calls !== null && calls.calls.length >= after.length) after = calls.calls;
      }
      const job = slurm.job(jobId);
      return (
        Number(job?.Restarts) >= 1 &&
        !["PENDING", "RUNNING", "COMPLETING"].includes(job?.JobState ?? "")
      );
    }, 180_000);
    const doneAt = Date.now();
    expect(finished, `the requeued job ended\n${context()}`).toBe(true);
    expect(slurm.job(jobId), context()).toMatchObject({ JobState: "COMPLETED", Restarts: "1" });

    // Two sessions: stopped at the preemption's checkpoint, then complete.
    const summaries = [...output().matchAll(/^\{\n[\s\S]*?\n\}$/gm)].map(
      (match) => JSON.parse(match[0]) as Summary,
    );
    expect(
      summaries.map((s) => s.status),
      context(),
    ).toEqual(["stopped", "complete"]);
    const [stopped, resumed] = summaries as [Summary, Summary];
    expect(stopped.stopCheckpoint, context()).toBe(true);
    expect(stopped.lastCheckpoint).toMatchObject({ status: "published", continued: CONCURRENCY });
    expect(resumed).toMatchObject({ restored: CONCURRENCY, fenced: 0 });

    // Every row exactly once, reward 1; the rows in flight continued as attempt 1.
    const rows = ckpt.rows();
    expect(rows.map((row) => row.row).sort((a, b) => a - b)).toEqual(
      Array.from({ length: ROWS }, (_, i) => i),
    );
    expect(rows.every((row) => row.status === "finished" && row.reward === 1)).toBe(true);
    const continued = ckpt.manifest().continued;
    expect(continued).toHaveLength(CONCURRENCY);
    const continuedIds = new Set(continued.map((entry) => entry.rollout_id));
    for (const row of rows) {
      expect(row.attempt, row.rollout_id).toBe(continuedIds.has(row.rollout_id) ? 1 : 0);
    }
    // Continued, not redone: each one's first call of attempt 1 continues its call cut at the
    // checkpoint (held, not returned, in the first run's log), and none of its calls runs again.
    for (const rollout of continuedIds) {
      const cut = before.find((call) => call.rollout === rollout && call.held && !call.returned);
      const again = after.filter((call) => call.rollout === `${rollout}-a1`);
      expect(cut, `${rollout}: a call in flight at the preemption`).toBeDefined();
      expect(again[0]?.continued_from, `${rollout}: continues the cut call`).toBe(
        cut?.model_call_id,
      );
      expect(
        after.some((call) => call.rollout === rollout),
        `${rollout}: attempt 0 not re-sent`,
      ).toBe(false);
    }

    // Each run's servers listened on the address of the node the script placed them on.
    const placements = [
      ...output().matchAll(
        /\[job \d+, restart (\d+)\] gpu: (\S+) \((\S+)\), cpu: (\S+) \((\S+)\)/g,
      ),
    ].map((match): Placement => ({
      restart: Number(match[1]),
      gpu: { name: match[2] as string, addr: match[3] as string },
      cpu: { name: match[4] as string, addr: match[5] as string },
    }));
    expect(placements.map((p) => p.restart)).toEqual([0, 1]);
    for (const placement of placements) {
      for (const node of [placement.gpu, placement.cpu]) {
        expect(slurm.nodes.find((known) => known.name === node.name)?.addr).toBe(node.addr);
      }
      expect(placement.gpu.addr).not.toBe(placement.cpu.addr);
    }
    for (const [server, node] of Object.entries(NODE_OF)) {
      const log = path.join(recipe, ".gym", "nodes", node, "logs", `${server}.log`);
      const listening = readFileSync(log, "utf8")
        .split("\n")
        .filter((line) => line.includes('"msg":"listening"'))
        .map((line) => JSON.parse(line) as { host: string; port: number });
      expect(listening, `${server}: one start per run`).toHaveLength(2);
      listening.forEach((entry, run) => {
        expect(entry, `${server}, run ${run}`).toEqual(
          expect.objectContaining({ host: placements[run]?.[node].addr, port: portOf[server] }),
        );
      });
    }

    const figures = {
      rows: ROWS,
      concurrency: CONCURRENCY,
      endedBeforePreemption: endedBefore,
      continuedRows: continued.length,
      stopCheckpointPauseMs: Math.round(stopped.lastCheckpoint?.pauseMs ?? NaN),
      rowsPerSecond: {
        firstSession: Number(stopped.rate.toFixed(2)),
        resumedSession: Number(resumed.rate.toFixed(2)),
        overCollectorTime: Number(
          (ROWS / (stopped.elapsedSeconds + resumed.elapsedSeconds)).toFixed(2),
        ),
      },
      requeueToRunningSeconds: resumedAt === null ? null : (resumedAt - preempted) / 1000,
      requeueToDoneSeconds: (doneAt - preempted) / 1000,
    };
    console.log(`Slurm recipe figures: ${JSON.stringify(figures)}`);
  });
});
