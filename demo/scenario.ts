/**
 * The crash scenario the demo runs: rollouts through the reference deployment, a checkpoint
 * while most are in flight (each held inside its second model call), a crash of every server,
 * a restore into fresh processes, and the replacement attempts — then the contract checked:
 * every rollout finished before the checkpoint or was exported, every exported one finished
 * after the restore with the right reward, and no delivered model call ran twice.
 */
import { captureKey, episodeId, type EpisodeId } from "gym-participant-sdk";
import {
  commit,
  prepare,
  restore,
  resume,
  type MemberTiming,
  type ParticipantKind,
  type PrepareResult,
} from "gym-participant-sdk/controller";
import type { ServerClient } from "gym-participant-sdk";
import type { DeploymentRun } from "./deployment-run.js";

/** What one scenario run measured and found. */
export interface ScenarioReport {
  readonly rollouts: number;
  readonly finishedBeforeCheckpoint: number;
  readonly inFlight: number;
  readonly exported: number;
  readonly restarts: number;
  readonly cutCalls: number;
  readonly prepareSeconds: Readonly<Partial<Record<ParticipantKind, number>>>;
  readonly commitSeconds: number;
  readonly restoreSeconds: number;
  /** Each kind's slowest commit and restore, in seconds (who the totals wait for). */
  readonly commitSecondsByKind: Readonly<Partial<Record<ParticipantKind, number>>>;
  readonly restoreSecondsByKind: Readonly<Partial<Record<ParticipantKind, number>>>;
  readonly replacementFailures: number;
  readonly continuedFromCut: number;
  readonly rewards: Readonly<Record<string, number>>;
  /** Contract violations; empty when everything held. */
  readonly problems: readonly string[];
}

/** Progress events for a live display. */
export type Progress = (stage: string, detail?: string) => void;

interface RunOutcome {
  readonly status: number;
  /** Why the request failed without a status (status 0). */
  readonly error?: string;
  readonly body: {
    result?: { reward?: number } | null;
    failure?: { failure_reason?: string } | null;
  } | null;
}

/** The final answer the scripted model gives after its tool call (long enough to cut). */
const ANSWER =
  "I incremented the counter exactly once, so its value now matches the target of one.";
const TOOL = {
  type: "function",
  name: "increment_counter",
  description: "Add count to the counter",
  parameters: {
    type: "object",
    properties: { count: { type: "integer" } },
    required: ["count"],
  },
};

/** Whether rollout `i` is tool-less and finishes in one call: every `quickEvery`-th, none for 0. */
function isQuick(i: number, quickEvery: number): boolean {
  return quickEvery > 0 && i % quickEvery === quickEvery - 1;
}

/** The `/run` body of rollout `i` (task `i` of the counter taskset); a quick one asks for no tool. */
export function runBody(episode: EpisodeId, i: number, quick: boolean): Record<string, unknown> {
  return {
    episode_id: episode,
    task: {
      task_id: { taskset: "counter", task_id: String(i) },
      task_input: {
        responses_create_params: quick
          ? { input: "Leave the counter alone and say done." }
          : { input: "Increment the counter once.", tools: [TOOL] },
        task_data: { initial_count: 0, target: quick ? 0 : 1 },
      },
    },
  };
}

async function sendRun(client: ServerClient, server: string, body: unknown): Promise<RunOutcome> {
  try {
    const reply = await client.postText(server, "/run", body);
    return { status: reply.status, body: reply.body.length === 0 ? null : JSON.parse(reply.body) };
  } catch (error) {
    // The server died under it, or the connection failed.
    const reason = (error as { reason?: string }).reason;
    const cause = (error as { cause?: { code?: string } }).cause?.code;
    return {
      status: 0,
      body: null,
      error: [reason, cause].filter(Boolean).join(": ") || String(error),
    };
  }
}

async function until<T>(
  what: string,
  probe: () => Promise<T | null>,
  timeoutMs: number,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== null) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

interface BackendCall {
  readonly rollout: string | null;
  readonly held: boolean;
  readonly returned: boolean;
  readonly continued_from: string | null;
  readonly reused_prefix_tokens: number;
  readonly capture: string | null;
  readonly capture_error: string | null;
}

/** Keeps each kind's slowest member time, in seconds. */
function slowestByKind(): {
  seconds: Partial<Record<ParticipantKind, number>>;
  record: MemberTiming;
} {
  const seconds: Partial<Record<ParticipantKind, number>> = {};
  return {
    seconds,
    record: (member, ms) => {
      seconds[member.kind] = Math.max(seconds[member.kind] ?? 0, ms / 1000);
    },
  };
}

/** Runs the scenario on a deployment that is not running yet; leaves it running (restored). */
export async function runScenario(
  run: DeploymentRun,
  options: {
    readonly rollouts: number;
    /**
     * Every `quickEvery`-th rollout is tool-less and finishes before the checkpoint; 0: none,
     * every rollout is in flight at the checkpoint. @default 4
     */
    readonly quickEvery?: number;
    readonly progress?: Progress;
    /** Called just before and just after the commit and the restore (a bench's CPU figures). */
    readonly phase?: (phase: "commit" | "restore", edge: "start" | "end") => void;
  },
): Promise<ScenarioReport> {
  const progress = options.progress ?? (() => undefined);
  const quickEvery = options.quickEvery ?? 4;
  const quick = (i: number): boolean => isQuick(i, quickEvery);
  const problems: string[] = [];
  progress("serve", "starting 7 servers");
  await run.serve();
  const episodes = Array.from({ length: options.rollouts }, (_, i) => episodeId(`rollout-${i}`));
  await run.backend("POST", "/_ctl/script", {
    default: [
      { tool_calls: [{ name: "increment_counter", arguments: { count: 1 } }] },
      { content: ANSWER },
    ],
    // The tool-less rollouts answer at once and finish before the checkpoint.
    per_rollout: Object.fromEntries(
      episodes.filter((_, i) => quick(i)).map((e) => [e.rollout_id, [{ content: "Done." }]]),
    ),
  });
  // Every rollout's second model call stops part-way, so it is in flight at the checkpoint.
  await run.backend("POST", "/_ctl/hold", { after_calls_per_rollout: 1 });

  const first = new Map<string, Promise<RunOutcome>>();
  const replied = new Set<string>();
  /** How rollouts that did not answer 200 ended, by status and detail (for the problems). */
  const unanswered = new Map<string, number>();
  episodes.forEach((episode, i) => {
    const key = captureKey(episode);
    const sent = sendRun(run.rolloutClient, "counter_env", runBody(episode, i, quick(i)));
    first.set(key, sent);
    void sent.then((outcome) => {
      if (outcome.status === 200) {
        replied.add(key);
        return;
      }
      const why = `status ${outcome.status}: ${JSON.stringify(outcome.body ?? outcome.error ?? null).slice(0, 200)}`;
      unanswered.set(why, (unanswered.get(why) ?? 0) + 1);
    });
  });
  const expectedHeld = episodes.filter((_, i) => !quick(i)).length;
  progress(
    "send",
    `${options.rollouts} rollouts sent; waiting for them to reach their second model call`,
  );
  // Until every rollout is held or has replied; a run that stops making progress for 20 s is
  // checkpointed as it stands (the stragglers are reported as problems).
  let lastSeen = "";
  let lastChange = Date.now();
  await until(
    "the rollouts to reach their held call",
    async () => {
      const { calls } = await run.backend<{ calls: BackendCall[] }>("GET", "/_ctl/calls");
      const held = calls.filter((call) => call.held && !call.returned).length;
      const quick = options.rollouts - expectedHeld;
      progress(
        "send",
        `${held} of ${expectedHeld} rollouts held in their second model call` +
          (quick > 0 ? `, ${replied.size} of ${quick} tool-less rollouts finished` : ""),
      );
      const seen = `${held}/${replied.size}`;
      if (seen !== lastSeen) {
        lastSeen = seen;
        lastChange = Date.now();
      }
      if (held >= expectedHeld && replied.size >= options.rollouts - expectedHeld) return held;
      if (held > 0 && Date.now() - lastChange > 20_000) {
        const ended = [...unanswered].map(([why, n]) => `${n} ended with ${why}`);
        const endedCount = [...unanswered.values()].reduce((sum, n) => sum + n, 0);
        const pending = options.rollouts - held - replied.size - endedCount;
        problems.push(
          `${options.rollouts - held - replied.size} rollouts neither replied nor reached their held call before the checkpoint` +
            ` (${[`${pending} still waiting for their reply`, ...ended].join("; ")})`,
        );
        return held;
      }
      return null;
    },
    60_000 + options.rollouts * 100,
  );

  // Checkpoint while they are in flight.
  const participants = await run.participants();
  const checkpointId = `demo-${Date.now()}`;
  const prepareSeconds: Partial<Record<ParticipantKind, number>> = {};
  progress("prepare", "environment → model → agent → resources");
  const prepared: PrepareResult = await prepare(
    participants,
    checkpointId,
    Date.now() / 1000 + 60,
    {
      onStage: (kind, ms) => {
        prepareSeconds[kind] = ms / 1000;
      },
    },
  );
  if (!prepared.prepared) {
    throw new Error(`prepare did not complete: ${JSON.stringify(prepared.blockers())}`);
  }
  const finishedBefore = new Set(replied);
  const inFlight = episodes.filter((e) => !finishedBefore.has(captureKey(e)));
  const scope = prepared.continued(inFlight);
  const checkpointDir = `${run.dir}/checkpoints/${checkpointId}`;
  progress("commit", `${scope.length} episodes continued`);
  options.phase?.("commit", "start");
  const committedAt = performance.now();
  const commitSecondsByKind = slowestByKind();
  const committed = await commit(participants, {
    checkpointId,
    checkpointDir,
    episodeIds: scope,
    deadlineTs: Date.now() / 1000 + 120,
    onReply: commitSecondsByKind.record,
  });
  const commitSeconds = (performance.now() - committedAt) / 1000;
  options.phase?.("commit", "end");
  const envExported = new Set(committed.counter_env?.episode_ids ?? []);
  const { cuts } = await run.backend<{ cuts: string[][] }>("GET", "/_ctl/cuts");
  const cutCalls = cuts.reduce((n, round) => n + round.length, 0);

  const rewards: Record<string, number> = {};
  const count = (reward: number): void => {
    rewards[String(reward)] = (rewards[String(reward)] ?? 0) + 1;
  };
  for (const key of finishedBefore) {
    const outcome = await (first.get(key) as Promise<RunOutcome>);
    const reward = outcome.body?.result?.reward;
    if (typeof reward === "number") count(reward);
    if (reward !== 1) {
      const why = outcome.body?.failure?.failure_reason ?? `reward ${String(reward)}`;
      problems.push(`${key} finished before the checkpoint: ${why}`);
    }
    first.delete(key);
  }

  progress("crash", "gym stop --kill: every Gym process group dies (the backend survives)");
  await run.crash();
  await Promise.all(first.values()); // the dead attempts' /run calls fail

  progress("restore", "starting fresh processes");
  await run.serve({ afterCrash: true });
  // The dead attempts' held calls may finish now: nobody receives their answers.
  await run.backend("POST", "/_ctl/release", {});
  const restoredParticipants = await run.participants();
  progress("restore", `restoring ${scope.length} episodes into the fresh processes`);
  options.phase?.("restore", "start");
  const restoredAt = performance.now();
  const restoreSecondsByKind = slowestByKind();
  await restore(restoredParticipants, {
    checkpointId,
    checkpointDir,
    episodeIds: scope,
    deadlineTs: Date.now() / 1000 + 120,
    onReply: restoreSecondsByKind.record,
  });
  const restoreSeconds = (performance.now() - restoredAt) / 1000;
  options.phase?.("restore", "end");
  progress("resume", "resume: admission reopens");
  await resume(restoredParticipants, checkpointId, Date.now() / 1000 + 60);

  progress("replace", `${scope.length} replacement attempts`);
  const before = await run.backend<{ calls: BackendCall[] }>("GET", "/_ctl/calls");
  let failures = 0;
  let done = 0;
  await Promise.all(
    scope.map(async (episode) => {
      const replacement = episodeId(episode.rollout_id, episode.attempt + 1);
      const i = Number(episode.rollout_id.slice("rollout-".length));
      const outcome = await sendRun(
        run.rolloutClient,
        "counter_env",
        runBody(replacement, i, quick(i)),
      );
      done += 1;
      progress("replace", `${done}/${scope.length} replacements finished`);
      const reward = outcome.body?.result?.reward;
      if (outcome.status !== 200 || typeof reward !== "number") {
        failures += 1;
        problems.push(
          `${captureKey(replacement)}: ${outcome.status} ${JSON.stringify(outcome.body?.failure ?? outcome.body ?? outcome.error ?? null)}`,
        );
        return;
      }
      count(reward);
      if (reward !== 1) problems.push(`${captureKey(replacement)} was rewarded ${reward}, not 1`);
    }),
  );
  const after = await run.backend<{ calls: BackendCall[] }>("GET", "/_ctl/calls");
  const newCalls = after.calls.slice(before.calls.length);
  const continued = newCalls.filter(
    (call) => call.continued_from !== null && call.reused_prefix_tokens > 0,
  );

  // The contract.
  for (const episode of inFlight) {
    const key = captureKey(episode);
    if (!scope.some((e) => captureKey(e) === key)) continue;
    if (!envExported.has(key)) problems.push(`${key} was in flight but not exported`);
  }
  for (const call of newCalls) {
    if (call.rollout !== null && !call.rollout.endsWith("-a1")) {
      problems.push(`a call of ${call.rollout} ran after the restore: only replacements may call`);
    }
  }
  for (const call of newCalls) {
    if (
      call.continued_from !== null &&
      (call.reused_prefix_tokens === 0 || call.capture !== "staged")
    ) {
      problems.push(
        `${call.rollout}: the continuation of ${call.continued_from} reused nothing (${call.capture_error ?? call.capture})`,
      );
    }
  }
  const firstCalls = newCalls.filter((call) => call.continued_from === null);
  if (firstCalls.length > 0) {
    problems.push(
      `${firstCalls.length} replacement calls regenerated instead of continuing their cut`,
    );
  }
  return {
    rollouts: options.rollouts,
    finishedBeforeCheckpoint: finishedBefore.size,
    inFlight: inFlight.length,
    exported: envExported.size,
    restarts: prepared.restarts().length,
    cutCalls,
    prepareSeconds,
    commitSeconds,
    restoreSeconds,
    commitSecondsByKind: commitSecondsByKind.seconds,
    restoreSecondsByKind: restoreSecondsByKind.seconds,
    replacementFailures: failures,
    continuedFromCut: continued.length,
    rewards,
    problems,
  };
}
