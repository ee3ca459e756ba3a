/**
 * Retire and forget at scale: every participant kind of the reference deployment (resources,
 * agent, environment, policy model), in this process, is asked to retire and then forget N
 * rollouts in one request each. Then each of the resources, environment and policy model
 * servers restores a checkpoint of N episodes into a fresh instance and retires all N
 * replacements at once, as a controller does after a failed restore: the work a retire finds
 * per rollout must not grow with everything else held. Prints, per kind and size, the median
 * time of each call over several runs and the longest event-loop stall seen while it ran (the
 * servers share this process's loop, so a stall is what their data routes would wait). The ratio
 * of the large size to the small one shows the scaling: ~10 for linear work at 10x the
 * rollouts, ~100 for quadratic. Asserts nothing.
 *
 *   npm run bench:forget [-- --rollouts 20000 --baseline 2000 --runs 3]
 */
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import type { ResolvedDeployment, ServerKind } from "#sdk/controller.js";
import { episodeId } from "#sdk/identity/episode-id.js";
import { RecordsWriter } from "#sdk/store/records-writer.js";
import type { RecordBase } from "#sdk/wire/storage.js";
import CounterServer from "../../reference-servers/counter/src/index.js";
import FakeInferenceServer from "../../reference-servers/fake-inference/src/index.js";
import PolicyModel from "../../reference-servers/policy-model/src/index.js";
import SimpleAgent from "../../reference-servers/simple-agent/src/index.js";
import SingleAgentTurnServer from "../../reference-servers/single-agent-turn/src/index.js";

function arg(name: string, fallback: number): number {
  const at = process.argv.indexOf(`--${name}`);
  return at >= 0 ? Number(process.argv[at + 1]) : fallback;
}

const ROLLOUTS = arg("rollouts", 20_000);
const BASELINE = arg("baseline", 2_000);
const RUNS = arg("runs", 3);
const TOKEN = "forget-bench-token";
const checkpoint = { enabled: true, control_auth_token: TOKEN, lease_grace_seconds: 600 };
const silent = { logLevel: "silent", shutdownGraceMs: 50 } as const;

interface Listening {
  listen(options: { port?: number }): Promise<{ url: string }>;
  close(): Promise<void>;
}

/** The reference deployment's participants, each listening on a port of its own. */
async function deploy(dir: string) {
  const deployment: ResolvedDeployment = { checkpoint, servers: {} };
  const servers: Listening[] = [];
  const participants = new Map<ServerKind, string>();
  const start = async (name: string, kind: ServerKind, server: Listening) => {
    servers.push(server);
    const { url } = await server.listen({ port: 0 });
    const { hostname, port } = new URL(url);
    deployment.servers[name] = {
      kind,
      url,
      host: hostname,
      port: Number(port),
      num_workers: 1,
      config: {},
    };
    if (kind !== "backend") participants.set(kind, url);
  };
  await start(
    "inference",
    "backend",
    new FakeInferenceServer({
      name: "inference",
      config: { token_store_dir: path.join(dir, "tokens"), control_token: TOKEN },
      ...silent,
    }) as unknown as Listening,
  );
  const policyConfig = { backend_server: "inference", capture_dir: path.join(dir, "capture") };
  await start(
    "policy",
    "model",
    new PolicyModel({ name: "policy", checkpoint, deployment, config: policyConfig, ...silent }),
  );
  await start(
    "counter",
    "resources",
    new CounterServer({ name: "counter", checkpoint, ...silent }),
  );
  await start(
    "simple_agent",
    "agent",
    new SimpleAgent({
      name: "simple_agent",
      checkpoint,
      deployment,
      config: { model_server: "policy" },
      ...silent,
    }),
  );
  await start(
    "counter_env",
    "environment",
    new SingleAgentTurnServer({
      name: "counter_env",
      checkpoint,
      deployment,
      config: {
        cleanup_timeout_seconds: 5,
        resources_server: "counter",
        agent_server: "simple_agent",
        resources_tool_transports: ["direct_http"],
      },
      ...silent,
    }),
  );
  return { participants, close: async () => Promise.all(servers.map((s) => s.close())) };
}

async function control(url: string, operation: string, body: Record<string, unknown>) {
  const res = await fetch(`${url}/ng-control/v1/checkpoint/${operation}`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ deadline_ts: Date.now() / 1000 + 600, ...body }),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${operation} at ${url}: ${res.status} ${text.slice(0, 300)}`);
}

/** Runs `work`, returning its wall time and the longest event-loop stall meanwhile (ms). */
async function measure(work: () => Promise<void>): Promise<{ ms: number; stallMs: number }> {
  const histogram = monitorEventLoopDelay({ resolution: 5 });
  histogram.enable();
  const started = performance.now();
  await work();
  const ms = performance.now() - started;
  histogram.disable();
  return { ms, stallMs: histogram.max / 1e6 };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

type Figures = Map<string, { ms: number; stallMs: number }>;

async function runSize(
  participants: Map<ServerKind, string>,
  size: number,
  round: number,
): Promise<Figures> {
  const figures: Figures = new Map();
  for (const [kind, url] of participants) {
    const samples: Record<"retire" | "forget", { ms: number; stallMs: number }[]> = {
      retire: [],
      forget: [],
    };
    for (let run = 0; run < RUNS; run++) {
      const prefix = `${kind}-${round}-${size}-${run}-`;
      const rolloutIds = Array.from({ length: size }, (_, i) => `${prefix}${i}`);
      const episodes = rolloutIds.map((rollout_id) => ({ rollout_id, attempt: 1 }));
      samples.retire.push(
        await measure(() =>
          control(url, "retire", { checkpoint_id: `r-${prefix}`, episode_ids: episodes }),
        ),
      );
      samples.forget.push(
        await measure(() =>
          control(url, "forget", { checkpoint_id: `f-${prefix}`, rollout_ids: rolloutIds }),
        ),
      );
    }
    for (const operation of ["retire", "forget"] as const) {
      figures.set(`${kind} ${operation}`, {
        ms: median(samples[operation].map((s) => s.ms)),
        stallMs: median(samples[operation].map((s) => s.stallMs)),
      });
    }
  }
  return figures;
}

/** A server that restores a crafted checkpoint: its kind, instance name and one record. */
interface Restorable {
  readonly kind: "resources" | "environment" | "model";
  readonly name: string;
  readonly start: (dir: string) => Listening;
  readonly record: (rolloutId: string, i: number) => Record<string, unknown>;
}

const RESTORABLE: readonly Restorable[] = [
  {
    kind: "resources",
    name: "counter",
    start: () => new CounterServer({ name: "counter", checkpoint, ...silent }),
    record: (_, i) => ({ session_id: `s-${i}`, state: { count: i, target: null }, owner: null }),
  },
  {
    kind: "environment",
    name: "counter_env",
    // Restores only: its resources and agent servers are never called.
    start: () =>
      new SingleAgentTurnServer({
        name: "counter_env",
        checkpoint,
        deployment: {
          checkpoint,
          servers: {
            counter: unreachable("resources"),
            simple_agent: unreachable("agent"),
          },
        } as ResolvedDeployment,
        config: {
          cleanup_timeout_seconds: 5,
          resources_server: "counter",
          agent_server: "simple_agent",
        },
        ...silent,
      }),
    record: () => ({ task_digest: "0".repeat(64), boundary: { step: 1 } }),
  },
  {
    kind: "model",
    name: "policy",
    start: (dir) =>
      new PolicyModel({
        name: "policy",
        checkpoint,
        deployment: { checkpoint, servers: { inference: unreachable("backend") } },
        config: { backend_server: "inference", capture_dir: path.join(dir, "capture") },
        ...silent,
      }),
    record: () => ({ rows: [], generation_cuts: [] }),
  },
];

function unreachable(kind: ServerKind) {
  return {
    kind,
    url: "http://127.0.0.1:9",
    host: "127.0.0.1",
    port: 9,
    num_workers: 1,
    config: {},
  } as const;
}

/**
 * Per kind: a checkpoint of `size` episodes is restored into a fresh instance, resumed, and every
 * replacement attempt retired in one call (timed); the instance is then closed.
 */
async function retireAfterRestore(dir: string, size: number, round: number): Promise<Figures> {
  const figures: Figures = new Map();
  for (const server of RESTORABLE) {
    const samples: { ms: number; stallMs: number }[] = [];
    for (let run = 0; run < RUNS; run++) {
      const runDir = path.join(dir, `restore-${server.kind}-${round}-${run}`);
      const rolloutIds = Array.from({ length: size }, (_, i) => `restored-${i}`);
      await new RecordsWriter({
        checkpointDir: path.join(runDir, "ckpt"),
        kind: server.kind,
        instance: server.name,
        checkpointId: "bench",
      }).write(
        rolloutIds.map((id, i) => ({
          episode_id: episodeId(id),
          ...server.record(id, i),
        })) as unknown as RecordBase[],
      );
      const instance = server.start(runDir);
      try {
        const { url } = await instance.listen({ port: 0 });
        await control(url, "restore", {
          checkpoint_id: "restore",
          checkpoint_dir: path.join(runDir, "ckpt"),
          episode_ids: rolloutIds.map((rollout_id) => ({ rollout_id, attempt: 0 })),
        });
        await control(url, "resume", { checkpoint_id: "restore" });
        const replacements = rolloutIds.map((rollout_id) => ({ rollout_id, attempt: 1 }));
        samples.push(
          await measure(() =>
            control(url, "retire", { checkpoint_id: "retire", episode_ids: replacements }),
          ),
        );
      } finally {
        await instance.close();
      }
    }
    figures.set(`${server.kind} retire after restore`, {
      ms: median(samples.map((s) => s.ms)),
      stallMs: median(samples.map((s) => s.stallMs)),
    });
  }
  return figures;
}

const dir = await mkdtemp(path.join(os.tmpdir(), "gym-bench-forget-"));
const { participants, close } = await deploy(dir);
try {
  console.log(
    `retire and forget, ${RUNS} runs each; medians (ms); stall = longest event-loop delay`,
  );
  const small = await runSize(participants, BASELINE, 0);
  const large = await runSize(participants, ROLLOUTS, 1);
  for (const [key, value] of await retireAfterRestore(dir, BASELINE, 0)) small.set(key, value);
  for (const [key, value] of await retireAfterRestore(dir, ROLLOUTS, 1)) large.set(key, value);
  const rows = [...large.keys()].map((key) => {
    const l = large.get(key) as { ms: number; stallMs: number };
    const s = small.get(key) as { ms: number; stallMs: number };
    return {
      call: key,
      [`${BASELINE} (ms)`]: Number(s.ms.toFixed(1)),
      [`${ROLLOUTS} (ms)`]: Number(l.ms.toFixed(1)),
      ratio: Number((l.ms / s.ms).toFixed(1)),
      [`stall at ${ROLLOUTS} (ms)`]: Number(l.stallMs.toFixed(1)),
    };
  });
  console.table(rows);
} finally {
  await close();
  await rm(dir, { recursive: true, force: true });
}
