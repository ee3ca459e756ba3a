/**
 * The crash suite's harness: a {@link DeploymentRun} of the reference deployment (or a variant
 * YAML under reference-servers/) plus what the tests read back — the fake backend's call log,
 * the capture ledger and token store on disk, the records a checkpoint wrote — and the controls
 * they need: scripts and holds, `/run`s whose outcome is tracked, stopping one server's process
 * group (SIGSTOP) and seeing when a request waits in its socket.
 */
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { expect } from "vitest";
import {
  commit,
  prepare,
  restore,
  resume,
  status,
  type Participants,
  type PrepareResult,
} from "#sdk/client/coordination.js";
import {
  captureKey,
  episodeId,
  episodeIdToWire,
  type EpisodeId,
} from "#sdk/identity/episode-id.js";
import type { StatusReply } from "#sdk/wire/control.js";
import type { CommitReply, RestoreReply } from "#sdk/wire/storage.js";
import { weatherOf } from "../../reference-servers/weather/src/index.js";
import { DeploymentRun } from "../../demo/deployment-run.js";
import { killEverything, stateServers } from "./helpers.js";
import { commandOf, processGroupOf, waitingConnections } from "./waiting-bytes.js";

export { captureKey, episodeId, type EpisodeId };

/** One call as the fake backend's `GET /_ctl/calls` lists it. */
export interface BackendCall {
  readonly index: number;
  /** The call's capture key (`ng_capture.rollout_id`), or null. */
  readonly rollout: string | null;
  readonly model_call_id: string | null;
  readonly n_messages: number;
  readonly held: boolean;
  readonly generated_tokens: number;
  readonly returned: boolean;
  readonly finish_reason: string | null;
  readonly continued_from: string | null;
  readonly reused_prefix_tokens: number;
  readonly capture: "staged" | "capture_failed" | null;
  readonly capture_error: string | null;
}

/** One turn of the fake model's script. */
export type Turn =
  | { readonly tool_calls: readonly { name: string; arguments?: Record<string, unknown> }[] }
  | { readonly content: string };

/** The final answer: long enough that a hold stops it part-way with many tokens on each side. */
export const ANSWER =
  "I used the tool as asked, so the task is complete and the result matches what was requested.";
const INCREMENT = {
  tool_calls: [{ name: "increment_counter", arguments: { count: 1 } }],
} as const;
const COUNTER_TOOL = {
  type: "function",
  name: "increment_counter",
  description: "Add count to the counter",
  parameters: {
    type: "object",
    properties: { count: { type: "integer" } },
    required: ["count"],
  },
};
const WEATHER_TOOL = {
  type: "function",
  name: "get_weather",
  description: "The weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
};

/** A counter task: `increments` tool calls, then the answer; rewarded 1 iff the count matches. */
export function counterTask(
  episode: EpisodeId,
  increments: number,
): { body: Record<string, unknown>; turns: Turn[] } {
  return {
    body: {
      episode_id: episodeIdToWire(episode),
      task: {
        task_id: { taskset: "counter", task_id: episode.rollout_id },
        task_input: {
          responses_create_params: {
            input: `Increment the counter ${increments} times, then say so.`,
            tools: [COUNTER_TOOL],
          },
          task_data: { initial_count: 0, target: increments },
        },
      },
    },
    turns: [...Array.from({ length: increments }, () => INCREMENT), { content: ANSWER }],
  };
}

/** A weather task: `lookups` tool calls, then the answer; its verify is stateless. */
export function weatherTask(
  episode: EpisodeId,
  city: string,
  lookups: number,
): { body: Record<string, unknown>; turns: Turn[] } {
  const lookup = { tool_calls: [{ name: "get_weather", arguments: { city } }] };
  return {
    body: {
      episode_id: episodeIdToWire(episode),
      task: {
        task_id: { taskset: "weather", task_id: episode.rollout_id },
        task_input: {
          responses_create_params: {
            input: `What is the weather in ${city}?`,
            tools: [WEATHER_TOOL],
          },
          task_data: weatherOf(city),
        },
      },
    },
    turns: [...Array.from({ length: lookups }, () => lookup), { content: ANSWER }],
  };
}

/** A task body for another attempt of the same rollout. */
export function asAttempt(body: Record<string, unknown>, attempt: number): Record<string, unknown> {
  const { rollout_id } = body.episode_id as { rollout_id: string };
  return { ...body, episode_id: { rollout_id, attempt } };
}

/** One rollout of a test: the server its `/run` goes to, its task body and its script. */
export class Rollout {
  constructor(
    /** The environment server (or, for a legacy `/run`, the agent) the `/run` goes to. */
    readonly server: string,
    readonly task: { readonly body: Record<string, unknown>; readonly turns: readonly Turn[] },
  ) {}

  /** The rollout ID. */
  get id(): string {
    return (this.task.body.episode_id as { rollout_id: string }).rollout_id;
  }

  /** The episode of an attempt. */
  episode(attempt = 0): EpisodeId {
    return episodeId(this.id, attempt);
  }

  /** The capture key of an attempt (`<id>` or `<id>-a<N>`). */
  key(attempt = 0): string {
    return captureKey(this.episode(attempt));
  }

  /** The `/run` body of an attempt. */
  body(attempt = 0): Record<string, unknown> {
    return asAttempt(this.task.body, attempt);
  }
}

/** The fake model's script for some rollouts (each by rollout ID: every attempt plays it). */
export function scriptOf(rollouts: readonly Rollout[]): Record<string, readonly Turn[]> {
  return Object.fromEntries(rollouts.map((rollout) => [rollout.id, rollout.task.turns]));
}

/** What a `/run` answered: its status and body (status 0: the connection died). */
export interface RunOutcome {
  readonly status: number;
  readonly body: {
    result?: { reward?: number } | null;
    failure?: { failure_reason?: string; stage?: string } | null;
    reward?: number;
    error?: { code?: string };
  } | null;
}

/** A `/run` in flight: its outcome, and whether it has one yet. */
export interface PendingRun {
  readonly outcome: Promise<RunOutcome>;
  settled(): boolean;
}

/** POSTs `body` to `<url>/run` and tracks the outcome (never rejects). */
export function sendRun(url: string, body: unknown): PendingRun {
  let done = false;
  const outcome = (async (): Promise<RunOutcome> => {
    try {
      const res = await fetch(`${url}/run`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      const text = await res.text();
      return { status: res.status, body: text.length === 0 ? null : JSON.parse(text) };
    } catch {
      return { status: 0, body: null };
    } finally {
      done = true;
    }
  })();
  return { outcome, settled: () => done };
}

/** The reward of a `single_agent_turn` outcome, or a description of what came instead. */
export function rewardOf(outcome: RunOutcome): number | string {
  const reward = outcome.body?.result?.reward ?? outcome.body?.reward;
  if (outcome.status === 200 && typeof reward === "number") return reward;
  return `HTTP ${outcome.status} ${JSON.stringify(outcome.body?.failure ?? outcome.body)}`;
}

/** Polls `probe` every 50 ms until it answers non-null; fails after `timeoutMs`. */
export async function until<T>(
  what: string,
  probe: () => Promise<T | null | undefined | false> | T | null | undefined | false,
  timeoutMs = 30_000,
): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== null && value !== undefined && value !== false) return value;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** An absolute deadline `seconds` from now, in Unix seconds. */
export function deadline(seconds = 30): number {
  return Date.now() / 1000 + seconds;
}

/** The same participants without the named members (a restore that leaves servers out). */
export function without(participants: Participants, names: readonly string[]): Participants {
  return { ...participants, members: participants.members.filter((m) => !names.includes(m.name)) };
}

/** Only the named members of the participants. */
export function only(participants: Participants, names: readonly string[]): Participants {
  return { ...participants, members: participants.members.filter((m) => names.includes(m.name)) };
}

/** One participant's status. */
export async function statusOf(participants: Participants, name: string): Promise<StatusReply> {
  const replies = await status(only(participants, [name]), 10_000);
  const reply = replies[name];
  if (reply === undefined) throw new Error(`${name} is not a participant`);
  return reply;
}

/** Every participant's `retired_rollouts`, by server name. */
export async function retiredRollouts(participants: Participants): Promise<Record<string, number>> {
  const replies: Record<string, StatusReply> = await status(participants, 10_000);
  return Object.fromEntries(
    Object.entries(replies).map(([name, reply]) => [name, reply.retired_rollouts]),
  );
}

/**
 * A run of the reference deployment, or of a variant of it (a YAML file under
 * reference-servers/, entrypoints relative to that directory), with what the crash suite reads.
 */
export class CrashRun extends DeploymentRun {
  /**
   * See {@link DeploymentRunOptions} (`GYM_E2E_NUM_WORKERS` sets the default worker count). The
   * built CLI and servers by default: the crash suite is not about tsx, and its restarts then
   * cost about half the CPU (`compiled: false` runs them from source).
   */
  constructor(
    dir: string,
    variant = "deployment.yaml",
    options: { compiled?: boolean; workers?: number } = {},
  ) {
    super(
      dir,
      {},
      {
        variant,
        compiled: options.compiled ?? true,
        workers: options.workers ?? Number(process.env.GYM_E2E_NUM_WORKERS ?? 1),
      },
    );
  }

  /** Kills whatever this run left behind (every process group, stopped ones included). */
  async cleanup(): Promise<void> {
    await killEverything(this.dir, [this.stateFile]);
  }

  /** Every backend call so far, in arrival order. */
  async calls(): Promise<BackendCall[]> {
    return (await this.backend<{ calls: BackendCall[] }>("GET", "/_ctl/calls")).calls;
  }

  /** The backend calls of one capture key, in arrival order. */
  async callsOf(key: string): Promise<BackendCall[]> {
    return (await this.calls()).filter((call) => call.rollout === key);
  }

  /** Every cut round so far: the model call IDs each one cut. */
  async cuts(): Promise<string[][]> {
    return (await this.backend<{ cuts: string[][] }>("GET", "/_ctl/cuts")).cuts;
  }

  /** Replaces the fake model's script: per rollout ID (every attempt of it). */
  async script(perRollout: Record<string, readonly Turn[]>): Promise<void> {
    await this.backend("POST", "/_ctl/script", { per_rollout: perRollout });
  }

  /** Places (or replaces) the hold rule. */
  async hold(rule: { after_calls: number } | { after_calls_per_rollout: number }): Promise<void> {
    await this.backend("POST", "/_ctl/hold", rule);
  }

  /** Lifts the hold and frees every held call. */
  async release(): Promise<number> {
    return (await this.backend<{ released: number }>("POST", "/_ctl/release", {})).released;
  }

  /** Sends an attempt of a rollout to its server. */
  start(rollout: Rollout, attempt = 0): PendingRun {
    return sendRun(this.url(rollout.server), rollout.body(attempt));
  }

  /** Waits until each key has a call blocked on the hold; answers those calls by key. */
  async heldCalls(keys: readonly string[], timeoutMs = 30_000): Promise<Map<string, BackendCall>> {
    return await until(
      `held calls of ${keys.join(", ")}`,
      async () => {
        const calls = await this.calls();
        const held = new Map<string, BackendCall>();
        for (const key of keys) {
          const call = calls.find((c) => c.rollout === key && c.held && !c.returned);
          if (call === undefined) return null;
          held.set(key, call);
        }
        return held;
      },
      timeoutMs,
    );
  }

  /** The rows of a capture key's ledger (`<capture_dir>/<key>.lineage.jsonl`), or null. */
  ledger(key: string): Record<string, unknown>[] | null {
    try {
      const text = readFileSync(path.join(this.dir, "capture", `${key}.lineage.jsonl`), "utf8");
      return text
        .split("\n")
        .filter((line) => line.length > 0)
        .map((line) => JSON.parse(line) as Record<string, unknown>);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw error;
    }
  }

  /** The model call IDs of a key's ledger, in row order (empty when it has none). */
  lineage(key: string): string[] {
    return (this.ledger(key) ?? []).map((row) => row.model_call_id as string);
  }

  /** Whether the capture dir holds the retire fence of `key`. */
  fenced(key: string): boolean {
    return readdirSync(path.join(this.dir, "capture")).includes(`${key}.lineage.retired`);
  }

  /** The staged record of a completed call, from the backend's token store. */
  staged(key: string, modelCallId: string): { parent_call_id: string | null; rollout_id: string } {
    const file = path.join(
      this.dir,
      "token-store",
      `${encodeURIComponent(`${key}/${modelCallId}`)}.json`,
    );
    return JSON.parse(readFileSync(file, "utf8")) as {
      parent_call_id: string | null;
      rollout_id: string;
    };
  }

  /** The records one participant wrote into a checkpoint directory. */
  records(checkpointDir: string, kind: string, name: string): Record<string, unknown>[] {
    const dir = path.join(checkpointDir, "gym", kind, name);
    const file = readdirSync(dir).find((f) => f.startsWith("records-") && f.endsWith(".jsonl"));
    if (file === undefined) return [];
    return readFileSync(path.join(dir, file), "utf8")
      .split("\n")
      .filter((line) => line.length > 0)
      .map((line) => JSON.parse(line) as Record<string, unknown>);
  }

  /** The process group of a server of the running deployment. */
  #pgid(server: string): number {
    const entry = stateServers(this.stateFile).find((s) => s.name === server);
    if (entry === undefined) throw new Error(`no server ${server} in ${this.stateFile}`);
    return entry.pgid;
  }

  /** Stops a server's process group (SIGSTOP): its sockets still take bytes, nothing reads them. */
  freeze(server: string): void {
    process.kill(-this.#pgid(server), "SIGSTOP");
  }

  /** Lets a stopped server's process group run again (SIGCONT). */
  thaw(server: string): void {
    process.kill(-this.#pgid(server), "SIGCONT");
  }

  /**
   * The bytes that wait unread at the server's port (Linux /proc/net/tcp{,6}): data queued in
   * its connections, accepted or not yet. Non-zero while the server is stopped means a request
   * reached it (a connection alone, with nothing sent on it yet, does not count).
   */
  unreadBytes(server: string): number {
    return waitingConnections(this.#port(server)).reduce((sum, c) => sum + c.bytes, 0);
  }

  /**
   * Who sent the bytes waiting at the server's port: per connection, the deployment's server
   * whose process group holds the client end ("test" for this process), else the process.
   */
  waitingSenders(server: string): { bytes: number; sender: string }[] {
    const groups = new Map(stateServers(this.stateFile).map((s) => [s.pgid, s.name]));
    return waitingConnections(this.#port(server)).map(({ bytes, senderPid }) => {
      if (senderPid === null) return { bytes, sender: "unknown" };
      if (senderPid === process.pid) return { bytes, sender: "test" };
      const group = processGroupOf(senderPid);
      const name = group === null ? undefined : groups.get(group);
      return { bytes, sender: name ?? `pid ${senderPid}: ${commandOf(senderPid)}` };
    });
  }

  #port(server: string): number {
    return Number(new URL(this.url(server)).port);
  }
}

/** Prepare (which must complete) and commit: the caller resumes or crashes afterwards. */
export async function checkpoint(
  participants: Participants,
  checkpointId: string,
  checkpointDir: string,
  episodes: (prepared: PrepareResult) => readonly EpisodeId[],
): Promise<{ prepared: PrepareResult; committed: Record<string, CommitReply> }> {
  const prepared = await prepare(participants, checkpointId, deadline(30));
  expect(prepared.prepared, JSON.stringify(prepared.blockers())).toBe(true);
  const committed = await commit(participants, {
    checkpointId,
    checkpointDir,
    episodeIds: episodes(prepared),
    deadlineTs: deadline(60),
  });
  return { prepared, committed };
}

/** Restores a checkpoint on `restoring` (default: every participant), then resumes everyone. */
export async function restoreAndResume(
  participants: Participants,
  options: {
    readonly restoreId: string;
    readonly checkpointDir: string;
    readonly episodes: readonly EpisodeId[];
    readonly restoring?: Participants;
  },
): Promise<Record<string, RestoreReply>> {
  const restored = await restore(options.restoring ?? participants, {
    checkpointId: options.restoreId,
    checkpointDir: options.checkpointDir,
    episodeIds: options.episodes,
    deadlineTs: deadline(60),
  });
  await resume(participants, options.restoreId, deadline(30));
  return restored;
}
