/**
 * Coordination: the functions a training controller calls to checkpoint a deployment (see
 * docs/controller.md). Each is safe to retry with the same checkpoint ID. Stages run in the
 * contract's order; within a stage every participant is called at once; each fan-out body is
 * encoded once per participant clock (see "Clock skew" in docs/controller.md), so participants
 * whose clocks agree with the controller's get the same bytes.
 *
 * @see docs/controller.md
 */
import path from "node:path";
import { pino, type Logger } from "pino";
import {
  captureKey,
  episodeIdToWire,
  episodesInKeyOrder,
  fromCaptureKey,
  nextAttempt,
  type EpisodeId,
} from "../identity/episode-id.js";
import { sleep } from "../util/deadline.js";
import { ATTR } from "../telemetry/names.js";
import { inSpan } from "../telemetry/spans.js";
import {
  MAX_DEADLINE_AHEAD_SECONDS,
  PARTICIPANT_KINDS,
  type ForgetReply,
  type Operation,
  type ParticipantKind,
  type PrepareReply,
  type RenewReply,
  type ResumeReply,
  type RetireReply,
  type StatusReply,
} from "../wire/control.js";
import type { CommitReply, RestoreReply } from "../wire/storage.js";
import {
  DEFAULT_MAX_CLOCK_SKEW_MS,
  deadlineCorrectionMs,
  describeSkew,
  estimateClockOffset,
  translateDeadline,
} from "./clock.js";
import { ServerReplyError, ServerUnreachableError } from "./errors.js";
import {
  describeHostLoss,
  isHostLoss,
  locateServer,
  locatedName,
  type UnreachableParticipant,
} from "./host-loss.js";
import type { ServerClient } from "./server-client.js";

/** Prepare order; resume runs it backwards. */
export const PREPARE_ORDER: readonly ParticipantKind[] = [
  "environment",
  "model",
  "agent",
  "resources",
];
/** Retire and forget order: callers before callees. */
export const RETIRE_ORDER: readonly (readonly ParticipantKind[])[] = [
  ["environment"],
  ["agent"],
  ["model", "resources"],
];
/** Added to the time left before a call's deadline to bound the call itself, in ms. */
export const CALL_SLACK_MS = 5_000;

/** One participant of a deployment. */
export interface Member {
  readonly name: string;
  readonly kind: ParticipantKind;
  /**
   * The participant's clock minus the controller's, in ms, as discovery measured it (positive:
   * it is ahead). Deadlines sent to it are moved by this much; unknown (absent) means none.
   */
  readonly clockOffsetMs?: number;
  /** How far the true offset may be from `clockOffsetMs`, in ms. */
  readonly clockUncertaintyMs?: number;
}

/** The participants of a deployment and how to reach them. */
export interface Participants {
  readonly client: ServerClient;
  readonly token: string;
  /** Sorted by (stage of kind, name). */
  readonly members: readonly Member[];
  readonly logger?: Logger;
  /**
   * The largest clock offset (either way) prepare and restore accept, in ms; beyond it they
   * throw {@link ClockSkewError} before any participant is called.
   * @default 5_000
   */
  readonly maxClockSkewMs?: number;
}

/** A coordination step failed on some participants; `failures` says what happened on each. */
export class CoordinationError extends Error {
  override readonly name: string = "CoordinationError";
  constructor(
    readonly operation: string,
    /** Server name → description (`HTTP <status> <code> <detail>` for refusals). */
    readonly failures: Readonly<Record<string, string>>,
    message?: string,
  ) {
    const names = Object.keys(failures).sort();
    super(
      message ??
        `checkpoint ${operation} failed on ${names.length} participant(s): ` +
          names.map((name) => `${name}: ${failures[name]}`).join("; "),
    );
  }

  /** The remote error codes, by server (refusals only). */
  codes(): Record<string, string> {
    const codes: Record<string, string> = {};
    for (const [server, description] of Object.entries(this.failures)) {
      const match = /^HTTP \d+ (\S+)/.exec(description);
      if (match?.[1] !== undefined) codes[server] = match[1];
    }
    return codes;
  }
}

/**
 * A participant's clock is further from the controller's than the bound allows: prepare or
 * restore was refused before any participant was called. `failures` names each such server
 * with its offset; `offsetsMs` has the offsets (its clock minus the controller's, in ms).
 */
export class ClockSkewError extends CoordinationError {
  override readonly name = "ClockSkewError";
  constructor(
    operation: string,
    readonly offsetsMs: Readonly<Record<string, number>>,
    readonly boundMs: number,
  ) {
    const failures: Record<string, string> = {};
    for (const [server, offsetMs] of Object.entries(offsetsMs)) {
      failures[server] = describeSkew(server, offsetMs, boundMs);
    }
    const names = Object.keys(failures).sort();
    super(
      operation,
      failures,
      `checkpoint ${operation} refused: ` + names.map((name) => failures[name]).join("; "),
    );
  }
}

/**
 * Throws {@link ClockSkewError} when a member's measured offset is beyond the bound by more than
 * the measurement's uncertainty.
 */
function checkClockSkew(participants: Participants, operation: string): void {
  const boundMs = participants.maxClockSkewMs ?? DEFAULT_MAX_CLOCK_SKEW_MS;
  const offsets: Record<string, number> = {};
  for (const member of participants.members) {
    const offsetMs = member.clockOffsetMs;
    // Only what the measurement proves: a status reply that waited in a busy server reads as
    // an offset of up to half its round trip, which is its uncertainty.
    const uncertaintyMs = member.clockUncertaintyMs ?? 0;
    if (offsetMs !== undefined && Math.abs(offsetMs) - uncertaintyMs > boundMs) {
      offsets[member.name] = offsetMs;
    }
  }
  if (Object.keys(offsets).length > 0) throw new ClockSkewError(operation, offsets, boundMs);
}

/**
 * A coordination step failed, and some participants did not answer at all: their host (or the
 * server's process) is gone, frozen or cut off. `unreachable` names each with its node and the
 * host of its URL; the message names them the same way, e.g. `policy (node gpu, 10.0.0.2:8001):
 * no reply within the prepare deadline (30 s) — is host 10.0.0.2 down or frozen?`.
 */
export class UnreachableParticipantsError extends CoordinationError {
  override readonly name = "UnreachableParticipantsError";
  constructor(
    operation: string,
    failures: Readonly<Record<string, string>>,
    /** Server name → where it runs and why it did not answer. */
    readonly unreachable: Readonly<Record<string, UnreachableParticipant>>,
  ) {
    const names = Object.keys(failures).sort();
    const shown = (name: string): string => {
      const where = unreachable[name];
      return where === undefined ? name : locatedName(name, where);
    };
    super(
      operation,
      failures,
      `checkpoint ${operation} failed on ${names.length} participant(s): ` +
        names.map((name) => `${shown(name)}: ${failures[name]}`).join("; "),
    );
  }

  /** The hosts that did not answer, sorted. */
  hosts(): string[] {
    return [...new Set(Object.values(this.unreachable).map((where) => where.host))].sort();
  }
}

/** One CoordinationError for a step's failures: {@link UnreachableParticipantsError} if any. */
function stepFailed(
  operation: string,
  failures: Readonly<Record<string, string>>,
  unreachable: Readonly<Record<string, UnreachableParticipant>>,
): CoordinationError {
  return Object.keys(unreachable).length > 0
    ? new UnreachableParticipantsError(operation, failures, unreachable)
    : new CoordinationError(operation, failures);
}

/**
 * Records why `member` failed `operation` into `failures` (and `unreachable` when its host did
 * not answer). `stepMs` is the time the step had, for the description of a missed deadline.
 */
function recordFailure(
  participants: Participants,
  member: Member,
  operation: string,
  stepMs: number,
  error: unknown,
  failures: Record<string, string>,
  unreachable: Record<string, UnreachableParticipant>,
): void {
  if (!isHostLoss(error)) {
    failures[member.name] = describeFailure(error);
    return;
  }
  const where = locateServer(participants.client.deployment, member.name);
  failures[member.name] = describeHostLoss(error, where, operation, stepMs);
  unreachable[member.name] = { ...where, reason: error.reason };
}

function describeFailure(error: unknown): string {
  if (error instanceof ServerReplyError)
    return `HTTP ${error.status} ${error.code} ${error.detail}`;
  // The failures are keyed by server already: its name is not repeated in the description.
  if (error instanceof ServerUnreachableError) {
    return error.message.startsWith(`${error.server}: `)
      ? error.message.slice(error.server.length + 2)
      : error.message;
  }
  return error instanceof Error ? error.message : String(error);
}

function stageIndex(kind: ParticipantKind): number {
  return PREPARE_ORDER.indexOf(kind);
}

/** Options of {@link discover}. */
export interface DiscoverOptions {
  /** Connection tries per probe, in all. @default 3 */
  readonly tries?: number;
  /** Bound on one probe, in ms. @default 60_000 */
  readonly probeTimeoutMs?: number;
  /** Fail unless a policy model takes part. @default true */
  readonly requireModel?: boolean;
  /**
   * The largest clock offset of a participant that prepare and restore accept, in ms (kept on
   * the returned {@link Participants}). @default 5_000
   */
  readonly maxClockSkewMs?: number;
  readonly logger?: Logger;
}

/**
 * Finds the participants: probes every server of the deployment except `backend`s with
 * `GET .../status` over the control pool. 404 means "not a participant" (skipped); a server that
 * is down, never answers, answers otherwise, or reports an unknown kind fails discovery. Each
 * member's clock offset is measured from its reply (`now`, else the `Date` header).
 */
export async function discover(
  client: ServerClient,
  token: string,
  options: DiscoverOptions = {},
): Promise<Participants> {
  const maxClockSkewMs = options.maxClockSkewMs ?? DEFAULT_MAX_CLOCK_SKEW_MS;
  if (!(maxClockSkewMs >= 0) || !Number.isFinite(maxClockSkewMs)) {
    throw new RangeError(`maxClockSkewMs must be a finite number >= 0, got ${maxClockSkewMs}`);
  }
  const tries = options.tries ?? 3;
  const probeTimeoutMs = options.probeTimeoutMs ?? 60_000;
  const candidates = client.serverNames().filter((name) => client.server(name).kind !== "backend");
  const failures: Record<string, string> = {};
  const members: Member[] = [];
  await Promise.all(
    candidates.map(async (name) => {
      const started = Date.now();
      for (let attempt = 1; ; attempt++) {
        const left = probeTimeoutMs - (Date.now() - started);
        try {
          const sentMs = Date.now();
          const reply = await client.controlWithReply<StatusReply>(name, "status", null, {
            token,
            timeoutMs: Math.max(1, left),
          });
          const clock = estimateClockOffset({
            sentMs,
            receivedMs: Date.now(),
            serverNow: reply.body?.now,
            dateHeader: reply.headers.date,
          });
          const kind = reply.body?.kind;
          if (!(PARTICIPANT_KINDS as readonly string[]).includes(kind)) {
            failures[name] = `unknown participant kind ${JSON.stringify(kind)}`;
          } else {
            members.push({
              name,
              kind: kind as ParticipantKind,
              ...(clock === null
                ? {}
                : {
                    clockOffsetMs: Math.round(clock.offsetMs),
                    clockUncertaintyMs: Math.ceil(clock.uncertaintyMs),
                  }),
            });
          }
          return;
        } catch (error) {
          if (error instanceof ServerReplyError && error.status === 404) return;
          const retry =
            error instanceof ServerUnreachableError &&
            error.reason === "connect" &&
            attempt < tries;
          if (retry && left > 0) {
            // Kept alive: a controller with nothing else pending must see the retry through.
            await sleep(Math.min(250 * attempt, left), undefined, { keepAlive: true });
            continue;
          }
          failures[name] =
            error instanceof ServerUnreachableError && error.reason === "timeout"
              ? `no status reply within ${Math.round(probeTimeoutMs / 1000)} seconds`
              : describeFailure(error);
          return;
        }
      }
    }),
  );
  if (Object.keys(failures).length > 0) throw new CoordinationError("discover", failures);
  if ((options.requireModel ?? true) && !members.some((member) => member.kind === "model")) {
    throw new CoordinationError("discover", {}, "no policy model takes part in checkpoints");
  }
  members.sort(
    (a, b) =>
      stageIndex(a.kind) - stageIndex(b.kind) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0),
  );
  return { client, token, members, logger: options.logger, maxClockSkewMs };
}

/**
 * A list of episodes as a control body carries it: in capture-key order, each attempt once.
 * Order and repeats mean nothing to a participant, but a list in this order is one each of
 * them checks in a pass rather than sorts (docs/controller.md).
 */
function scopeOnWire(episodes: readonly EpisodeId[]): { rollout_id: string; attempt: number }[] {
  // Not the per-list cache of scope-keys.ts: a caller's array may change between calls.
  return episodesInKeyOrder(episodes, episodes.map(captureKey)).map(episodeIdToWire);
}

/** The controller's span of one coordination step: `gym.checkpoint.coordinate.<operation>`. */
async function coordinateSpan<T>(
  operation: string,
  checkpointId: string,
  fn: () => Promise<T>,
  attributes: Record<string, number> = {},
): Promise<T> {
  return await inSpan(
    `gym.checkpoint.coordinate.${operation}`,
    { [ATTR.checkpointId]: checkpointId, ...attributes },
    async () => await fn(),
  );
}

/**
 * A fan-out body, encoded once per participant clock: its `deadline_ts` is the controller's,
 * moved by each participant's offset (see {@link deadlineCorrectionMs}).
 */
interface EncodedBody {
  bytesFor(member: Member): Uint8Array;
}

function encode(body: { readonly deadline_ts: number } & Record<string, unknown>): EncodedBody {
  const byCorrection = new Map<number, Uint8Array>();
  return {
    bytesFor(member) {
      const correction = deadlineCorrectionMs(member.clockOffsetMs, member.clockUncertaintyMs);
      let bytes = byCorrection.get(correction);
      if (bytes === undefined) {
        const deadline = translateDeadline(body.deadline_ts, correction);
        bytes = Buffer.from(JSON.stringify({ ...body, deadline_ts: deadline }), "utf8");
        byCorrection.set(correction, bytes);
      }
      return bytes;
    },
  };
}

/** max(deadline − now, 0) + 5 s, in whole milliseconds (deadlines may carry microseconds). */
function callTimeoutMs(deadlineTs: number): number {
  return Math.ceil(Math.max(0, deadlineTs * 1000 - Date.now())) + CALL_SLACK_MS;
}

/**
 * Calls `members` at once, each with the body in its clock (the same bytes for agreeing clocks);
 * returns replies or throws one CoordinationError.
 */
async function fanOut<T>(
  participants: Participants,
  members: readonly Member[],
  operation: Operation,
  body: EncodedBody,
  deadlineTs: number,
  onReply?: MemberTiming,
  /** The time the whole step had to its deadline, for a failure's description. */
  stepMs = deadlineTs * 1000 - Date.now(),
): Promise<Record<string, T>> {
  checkDeadline(deadlineTs);
  const replies: Record<string, T> = {};
  const failures: Record<string, string> = {};
  const unreachable: Record<string, UnreachableParticipant> = {};
  await Promise.all(
    members.map(async (member) => {
      const started = performance.now();
      try {
        const bytes = body.bytesFor(member);
        replies[member.name] = await participants.client.control<T>(member.name, operation, bytes, {
          token: participants.token,
          timeoutMs: callTimeoutMs(deadlineTs),
        });
        onReply?.(member, performance.now() - started);
      } catch (error) {
        recordFailure(participants, member, operation, stepMs, error, failures, unreachable);
      }
    }),
  );
  if (Object.keys(failures).length > 0) throw stepFailed(operation, failures, unreachable);
  return replies;
}

/**
 * `dir` resolved against the controller's working directory: a participant would resolve a
 * relative one against its own (the deployment file's directory), silently elsewhere. An empty
 * string stays empty, for the participant to refuse.
 */
function absoluteDir(dir: string): string {
  return dir === "" ? dir : path.resolve(dir);
}

/** A deadline further ahead than this is a mistake (milliseconds given for seconds). */

/**
 * Refuses a deadline that cannot be meant: not a finite number, or more than a year ahead, which
 * is what `Date.now() + 30_000` (milliseconds, where the contract takes Unix seconds) gives. Such
 * a deadline would otherwise be accepted and hold every lease for millennia.
 */
function checkDeadline(deadlineTs: number): void {
  if (!Number.isFinite(deadlineTs)) {
    throw new RangeError(`deadlineTs must be a finite number of Unix seconds, got ${deadlineTs}`);
  }
  if (deadlineTs > Date.now() / 1000 + MAX_DEADLINE_AHEAD_SECONDS) {
    throw new RangeError(
      `deadlineTs ${deadlineTs} is more than a year ahead: it is Unix seconds, not milliseconds ` +
        "(Date.now() / 1000 + 30 is 30 s from now)",
    );
  }
}

/** Told each member and how long its call took, in ms, as its reply arrives. */
export type MemberTiming = (member: Member, elapsedMs: number) => void;

function byKinds(participants: Participants, kinds: readonly ParticipantKind[]): Member[] {
  return participants.members.filter((member) => kinds.includes(member.kind));
}

/** The outcome of a staged prepare. */
export class PrepareResult {
  constructor(
    /** Whether every stage reached `prepared`. */
    readonly prepared: boolean,
    /** Server name → prepare reply, for every stage contacted. */
    readonly replies: Readonly<Record<string, PrepareReply>>,
  ) {}

  /** Server name → blockers, for replies not `prepared`. */
  blockers(): Record<string, string[]> {
    const blockers: Record<string, string[]> = {};
    for (const [name, reply] of Object.entries(this.replies)) {
      if (reply.phase !== "prepared") blockers[name] = reply.report.blockers;
    }
    return blockers;
  }

  /** Every episode any participant reported as a restart. */
  restarts(): EpisodeId[] {
    const keys = new Set<string>();
    for (const reply of Object.values(this.replies))
      for (const key of reply.report.restarts) keys.add(key);
    return [...keys].sort().map(fromCaptureKey);
  }

  /** The commit scope: `episodes` minus the restarts, order kept. */
  continued(episodes: readonly EpisodeId[]): EpisodeId[] {
    const restarts = new Set(this.restarts().map(captureKey));
    return episodes.filter((episode) => !restarts.has(captureKey(episode)));
  }
}

/**
 * Prepares stage by stage (environment, model, agent, resources). Stops after the first stage
 * with a participant not `prepared`; later stages are not contacted. Each later stage's body
 * carries the restarts reported by every earlier stage, only when there are any.
 */
export async function prepare(
  participants: Participants,
  checkpointId: string,
  deadlineTs: number,
  options: {
    /** Told each stage's kind and how long its fan-out took, in ms, as it ends. */
    readonly onStage?: (kind: ParticipantKind, elapsedMs: number) => void;
  } = {},
): Promise<PrepareResult> {
  // Before any participant is asked anything: nothing is prepared on a refusal.
  checkClockSkew(participants, "prepare");
  return await coordinateSpan("prepare", checkpointId, async () => {
    return await prepareStages(participants, checkpointId, deadlineTs, options);
  });
}

async function prepareStages(
  participants: Participants,
  checkpointId: string,
  deadlineTs: number,
  options: { readonly onStage?: (kind: ParticipantKind, elapsedMs: number) => void },
): Promise<PrepareResult> {
  const replies: Record<string, PrepareReply> = {};
  const restarts = new Set<string>();
  // A later stage has less time left; a failure's description names the whole step's.
  const stepMs = deadlineTs * 1000 - Date.now();
  for (const kind of PREPARE_ORDER) {
    const stage = byKinds(participants, [kind]);
    if (stage.length === 0) continue;
    const body: { deadline_ts: number } & Record<string, unknown> = {
      checkpoint_id: checkpointId,
      deadline_ts: deadlineTs,
    };
    if (restarts.size > 0) body.restarts = [...restarts].sort();
    const started = performance.now();
    const stageReplies = await inSpan(
      `gym.checkpoint.coordinate.prepare.${kind}`,
      { [ATTR.stage]: kind },
      async () =>
        await fanOut<PrepareReply>(
          participants,
          stage,
          "prepare",
          encode(body),
          deadlineTs,
          undefined,
          stepMs,
        ),
    );
    options.onStage?.(kind, performance.now() - started);
    Object.assign(replies, stageReplies);
    for (const reply of Object.values(stageReplies))
      for (const key of reply.report.restarts) restarts.add(key);
    if (Object.values(stageReplies).some((reply) => reply.phase !== "prepared")) {
      return new PrepareResult(false, replies);
    }
  }
  return new PrepareResult(true, replies);
}

/** Extends every participant's lease to `deadlineTs` plus its grace. */
export async function renew(
  participants: Participants,
  checkpointId: string,
  deadlineTs: number,
): Promise<Record<string, RenewReply>> {
  const bytes = encode({ checkpoint_id: checkpointId, deadline_ts: deadlineTs });
  return await fanOut(participants, participants.members, "renew", bytes, deadlineTs);
}

/** What {@link commit} writes. */
export interface CommitOptions {
  readonly checkpointId: string;
  /** Where the checkpoint lives; a relative path is resolved against `process.cwd()`. */
  readonly checkpointDir: string;
  /**
   * Every continued episode (build it with `PrepareResult.continued`); null: everything each
   * participant holds, which a policy model refuses (409 `checkpoint_error`, per the contract).
   */
  readonly episodeIds: readonly EpisodeId[] | null;
  readonly deadlineTs: number;
  /** The controller stops after this checkpoint instead of resuming. @default false */
  readonly stop?: boolean;
  /** Told each participant's commit time as its reply arrives (for progress and benchmarks). */
  readonly onReply?: MemberTiming;
}

/** Commits on every participant at once. */
export async function commit(
  participants: Participants,
  options: CommitOptions,
): Promise<Record<string, CommitReply>> {
  const body: { deadline_ts: number } & Record<string, unknown> = {
    checkpoint_id: options.checkpointId,
    deadline_ts: options.deadlineTs,
    checkpoint_dir: absoluteDir(options.checkpointDir),
    episode_ids: options.episodeIds === null ? null : scopeOnWire(options.episodeIds),
  };
  if (options.stop === true) body.stop = true;
  return await coordinateSpan(
    "commit",
    options.checkpointId,
    async () =>
      await fanOut<CommitReply>(
        participants,
        participants.members,
        "commit",
        encode(body),
        options.deadlineTs,
        options.onReply,
      ),
    options.episodeIds === null ? {} : { [ATTR.episodes]: options.episodeIds.length },
  );
}

/** What {@link restore} installs. */
export interface RestoreOptions {
  readonly checkpointId: string;
  /** Where the checkpoint lives; a relative path is resolved against `process.cwd()`. */
  readonly checkpointDir: string;
  /** The checkpointed attempts to continue (not the replacements). */
  readonly episodeIds: readonly EpisodeId[];
  readonly deadlineTs: number;
  /** Told each participant's restore time as its reply arrives. */
  readonly onReply?: MemberTiming;
}

/**
 * Restores on every participant at once, all or nothing: on failure the replacement attempts
 * are retired everywhere and everyone is resumed (both only logged when they fail), then the
 * restore's own error is raised. This holds however the restore failed, even when every
 * participant refused it: the replacements can then never run in these processes (a later
 * restore of them there is refused with `stale_attempt` until their rollouts are forgotten),
 * and a request of a crashed attempt that outlived the crash is refused as well.
 */
export async function restore(
  participants: Participants,
  options: RestoreOptions,
): Promise<Record<string, RestoreReply>> {
  // A mistaken deadline or a skewed clock is refused before the try: it must not trigger the
  // rollback below.
  checkDeadline(options.deadlineTs);
  checkClockSkew(participants, "restore");
  return await coordinateSpan(
    "restore",
    options.checkpointId,
    async () => await restoreAllOrNothing(participants, options),
    { [ATTR.episodes]: options.episodeIds.length },
  );
}

async function restoreAllOrNothing(
  participants: Participants,
  options: RestoreOptions,
): Promise<Record<string, RestoreReply>> {
  const body = {
    checkpoint_id: options.checkpointId,
    deadline_ts: options.deadlineTs,
    checkpoint_dir: absoluteDir(options.checkpointDir),
    episode_ids: scopeOnWire(options.episodeIds),
  };
  try {
    return await fanOut(
      participants,
      participants.members,
      "restore",
      encode(body),
      options.deadlineTs,
      options.onReply,
    );
  } catch (error) {
    const log = participants.logger ?? pino({ level: "silent" });
    const cleanupDeadline = Math.max(options.deadlineTs, Date.now() / 1000 + 30);
    // Every stage is asked even when an earlier one fails, and every participant, whether it
    // refused or accepted: a failed restore's replacements must not run anywhere (a refusal
    // does not tell which participants installed nothing), and a fresh process that refused
    // has not fenced the crashed attempts yet.
    // Except a participant that let the restore's deadline pass without a word: its host is
    // down or frozen, and asking again would only hold the caller up twice more (a cleanup call
    // is bounded by 30 s at least). It resumes on its own when its lease expires; a caller must
    // fence the replacements on it before using it again, which fails until it answers.
    const silent = silentMembers(error);
    if (silent.size > 0) {
      log.warn(
        { servers: [...silent].sort() },
        "not cleaning up after the failed restore on participants that did not answer it",
      );
    }
    const answering: Participants = {
      ...participants,
      members: participants.members.filter((member) => !silent.has(member.name)),
    };
    const fenced = options.episodeIds.map(nextAttempt);
    const bytes = encode({
      checkpoint_id: options.checkpointId,
      deadline_ts: cleanupDeadline,
      episode_ids: scopeOnWire(fenced),
    });
    for (const kinds of RETIRE_ORDER) {
      const stage = byKinds(answering, kinds);
      if (stage.length === 0 || fenced.length === 0) continue;
      try {
        await fanOut(answering, stage, "retire", bytes, cleanupDeadline);
      } catch (cleanupError) {
        log.error({ err: cleanupError }, "retiring the attempts of a failed restore failed");
      }
    }
    try {
      if (answering.members.length > 0) {
        await resume(answering, options.checkpointId, cleanupDeadline);
      }
    } catch (cleanupError) {
      log.error({ err: cleanupError }, "resuming after a failed restore failed");
    }
    throw error;
  }
}

/** The participants a step's error says let its deadline pass without answering. */
function silentMembers(error: unknown): Set<string> {
  if (!(error instanceof UnreachableParticipantsError)) return new Set();
  return new Set(
    Object.entries(error.unreachable)
      .filter(([, where]) => where.reason === "timeout")
      .map(([name]) => name),
  );
}

/**
 * Resumes in reverse stage order. A failing stage does not stop later ones (an unreachable
 * participant resumes on its own when its lease expires); failures are reported together.
 */
export async function resume(
  participants: Participants,
  checkpointId: string,
  deadlineTs: number,
): Promise<Record<string, ResumeReply>> {
  return await coordinateSpan(
    "resume",
    checkpointId,
    async () => await resumeStages(participants, checkpointId, deadlineTs),
  );
}

async function resumeStages(
  participants: Participants,
  checkpointId: string,
  deadlineTs: number,
): Promise<Record<string, ResumeReply>> {
  const bytes = encode({ checkpoint_id: checkpointId, deadline_ts: deadlineTs });
  const replies: Record<string, ResumeReply> = {};
  const failures: Record<string, string> = {};
  const unreachable: Record<string, UnreachableParticipant> = {};
  for (const kind of [...PREPARE_ORDER].reverse()) {
    const stage = byKinds(participants, [kind]);
    if (stage.length === 0) continue;
    try {
      Object.assign(
        replies,
        await fanOut<ResumeReply>(participants, stage, "resume", bytes, deadlineTs),
      );
    } catch (error) {
      if (!(error instanceof CoordinationError)) throw error;
      Object.assign(failures, error.failures);
      if (error instanceof UnreachableParticipantsError) {
        Object.assign(unreachable, error.unreachable);
      }
    }
  }
  if (Object.keys(failures).length > 0) throw stepFailed("resume", failures, unreachable);
  return replies;
}

/** Retires attempts everywhere, callers first. No call when the list is empty. */
export async function retire(
  participants: Participants,
  checkpointId: string,
  episodeIds: readonly EpisodeId[],
  deadlineTs: number,
): Promise<Record<string, RetireReply>> {
  if (episodeIds.length === 0) return {};
  const bytes = encode({
    checkpoint_id: checkpointId,
    deadline_ts: deadlineTs,
    episode_ids: scopeOnWire(episodeIds),
  });
  return await coordinateSpan(
    "retire",
    checkpointId,
    async () => await callersFirst<RetireReply>(participants, "retire", bytes, deadlineTs),
    { [ATTR.episodes]: episodeIds.length },
  );
}

/** Forgets finished rollouts everywhere, callers first. No call when the list is empty. */
export async function forget(
  participants: Participants,
  checkpointId: string,
  rolloutIds: readonly string[],
  deadlineTs: number,
): Promise<Record<string, ForgetReply>> {
  const unique = [...new Set(rolloutIds)].sort();
  if (unique.length === 0) return {};
  const bytes = encode({
    checkpoint_id: checkpointId,
    deadline_ts: deadlineTs,
    rollout_ids: unique,
  });
  return await coordinateSpan(
    "forget",
    checkpointId,
    async () => await callersFirst<ForgetReply>(participants, "forget", bytes, deadlineTs),
    { [ATTR.rollouts]: unique.length },
  );
}

/** Runs RETIRE_ORDER stage by stage (callers before callees); the first failing stage stops it. */
async function callersFirst<T>(
  participants: Participants,
  operation: "retire" | "forget",
  bytes: EncodedBody,
  deadlineTs: number,
): Promise<Record<string, T>> {
  const replies: Record<string, T> = {};
  for (const kinds of RETIRE_ORDER) {
    const stage = byKinds(participants, kinds);
    if (stage.length > 0) {
      Object.assign(replies, await fanOut<T>(participants, stage, operation, bytes, deadlineTs));
    }
  }
  return replies;
}

/** Every participant's status, by server name. */
export async function status(
  participants: Participants,
  timeoutMs = 60_000,
): Promise<Record<string, StatusReply>> {
  const replies: Record<string, StatusReply> = {};
  const failures: Record<string, string> = {};
  const unreachable: Record<string, UnreachableParticipant> = {};
  await Promise.all(
    participants.members.map(async (member) => {
      try {
        replies[member.name] = await participants.client.control<StatusReply>(
          member.name,
          "status",
          null,
          {
            token: participants.token,
            timeoutMs,
          },
        );
      } catch (error) {
        recordFailure(participants, member, "status", timeoutMs, error, failures, unreachable);
      }
    }),
  );
  if (Object.keys(failures).length > 0) throw stepFailed("status", failures, unreachable);
  return replies;
}
