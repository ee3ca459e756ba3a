/**
 * `gym ckpt <verb>`: the training controller from a shell. Every verb reads the run's state
 * file, builds a {@link ServerClient} from the resolved deployment, discovers the participants
 * and calls the SDK's coordination functions (never HTTP of its own). Output is a table for
 * people, or the replies as JSON with `--json`. Exit status: 0 success, 1 refused (the remote
 * codes are printed per server), 2 bad usage.
 *
 * ## Commit scope
 * `commit` (and `checkpoint`) send `episode_ids: null` ("everything each participant holds") when
 * that is exactly the continued episodes: with `--scope all`, or with the default
 * `--scope continued` when the last prepare reported no restarts (participants never export
 * restarts they know of). The model, which refuses `null`, then commits what the others
 * exported (see `commitEverywhere`). When the prepare reported restarts, an earlier stage may have
 * exported an episode a later stage reported, so the continued scope must be explicit: pass
 * `--episodes FILE` (capture keys in flight, one per line) and the restarts are taken out with
 * `PrepareResult.continued`. The last prepare is kept in the state directory
 * (`last-prepare.json`).
 *
 * @see docs/deployment.md
 * @see docs/controller.md
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import path from "node:path";
import {
  CommitScopeRequiredError,
  commitEverywhere,
  type CommitStep,
} from "../client/commit-everywhere.js";
import { ServerClient } from "../client/server-client.js";
import {
  CoordinationError,
  PREPARE_ORDER,
  PrepareResult,
  discover,
  forget,
  prepare,
  restore,
  resume,
  retire,
  status,
  type Participants,
} from "../client/coordination.js";
import {
  captureKey,
  fromCaptureKey,
  nextAttempt,
  rolloutIdProblem,
  sortedCaptureKeys,
  type EpisodeId,
} from "../identity/episode-id.js";
import type { PrepareReply } from "../wire/control.js";
import type { CommitReply } from "../wire/storage.js";
import { DEFAULT_DEADLINE_MS } from "./defaults.js";
import { formatDuration } from "./duration.js";
import { inspectCheckpoint, noCheckpoint } from "./inspect.js";
import { CliError, UsageError, commandOf, describeError, type Io } from "./output.js";
import {
  readLastPrepare,
  requireState,
  runStateFile,
  statePaths,
  writeLastPrepare,
  type RunState,
  type StatePaths,
} from "./state-file.js";
import { listCell, table } from "./table.js";

/** Options every `gym ckpt` verb takes. */
export interface CkptOptions {
  readonly state?: string;
  readonly deployment?: string;
  readonly json?: boolean;
  /** Bound of each coordination step, in ms. @default {@link DEFAULT_DEADLINE_MS} */
  readonly deadlineMs?: number;
}

/** A fresh checkpoint ID: `ckpt-<UTC yyyymmddThhmmssZ>-<4 hex>`. */
export function freshCheckpointId(now = new Date()): string {
  const stamp = now
    .toISOString()
    .replace(/[-:]/g, "")
    .replace(/\.\d+Z$/, "Z");
  return `ckpt-${stamp}-${randomBytes(2).toString("hex")}`;
}

/** Parses capture keys (`r`, `r-a1`), each naming an episode; `source` names where they came from. */
export function parseCaptureKeys(keys: readonly string[], source: string): EpisodeId[] {
  return keys.map((key, index) => {
    try {
      return fromCaptureKey(key);
    } catch (error) {
      throw new UsageError(
        `${source}: ${JSON.stringify(key)} (item ${index + 1}) is not a capture key: ${describeError(error)}`,
        "write capture keys: the rollout ID for attempt 0 (task-3), with -aN for attempt N (task-3-a1)",
      );
    }
  });
}

/**
 * Reads an episodes file: capture keys one per line; blank lines and `#` comments ignored.
 * `inline` is the advice when the file cannot be read (e.g. the option that takes keys inline).
 */
export function readEpisodesFile(
  file: string,
  inline = "--episodes takes a file of capture keys, one per line: write them to a file and pass its path",
): EpisodeId[] {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    throw new UsageError(`cannot read the episodes file ${file}: ${describeError(error)}`, inline);
  }
  const episodes: EpisodeId[] = [];
  text.split(/\r?\n/).forEach((raw, index) => {
    const line = raw.replace(/#.*$/, "").trim();
    if (line === "") return;
    episodes.push(...parseCaptureKeys([line], `${file}:${index + 1}`));
  });
  return episodes;
}

function deadlineTs(options: CkptOptions): number {
  return (Date.now() + (options.deadlineMs ?? DEFAULT_DEADLINE_MS)) / 1000;
}

/** What to do about each remote code; `gym` is the command prefix ({@link commandOf}). */
const CODE_HINTS: Record<string, (gym: string) => string> = {
  checkpoint_conflict: (gym) =>
    `another checkpoint is open on these participants: see \`${gym} ckpt status\`, then resume it with \`${gym} ckpt resume --id <its id>\``,
  invalid_phase: (gym) =>
    `a participant is not in the phase this step needs: see \`${gym} ckpt status\` (commit needs a prepared checkpoint; retire and forget need none open)`,
  stale_checkpoint: () => "this ID was already resumed: start over with a new ID",
  deadline_exceeded: () => "the deadline passed first: retry with a longer --deadline",
  unauthorized: () =>
    "the control token does not match: check checkpoint.control_auth_token in the deployment file, then restart the servers",
  export_failed: (gym) =>
    `this checkpoint can no longer commit: abort it with \`${gym} ckpt resume --id ID\` and take a new one`,
  restart_in_scope: () =>
    "the scope names an episode reported as a restart: leave it out of --episodes",
  retire_incomplete: () => "a retire did not finish: retire those episodes again, then forget",
  stale_attempt: (gym) =>
    `those attempts are retired here (a failed restore retires its replacements): forget their rollouts first (\`${gym} ckpt forget --rollouts ID,...\`), or restore into freshly started servers`,
  checkpoint_error: () =>
    "the participant refused this step for the reason in DETAIL (its log says more): fix that, then take the step again",
};

/**
 * What to do about `invalid_checkpoint_state`, which covers both sides of the store: a commit
 * that cannot write (the directory holds another commit, or cannot be written) and a restore
 * that cannot read. The details say which.
 */
function invalidStateHint(operation: string, details: readonly string[], gym: string): string {
  if (details.some((detail) => /already holds a different commit|fresh directory/.test(detail))) {
    return "the directory already holds another checkpoint's commit: write each checkpoint to a fresh directory (a new --dir)";
  }
  if (operation === "commit") {
    return "the checkpoint could not be written (see DETAIL): fix what it names (permissions, disk space, a record that is not JSON), then take the checkpoint again into a fresh --dir";
  }
  return `the checkpoint directory cannot be restored from (see DETAIL): check it with \`${gym} ckpt inspect DIR\`, or restore another checkpoint`;
}

/** Where a refusal happened: the run, when its state file was read. */
interface RefusalContext {
  readonly state: RunState;
  readonly paths: StatePaths;
}

function logsOf(context: RefusalContext | null, names: readonly string[]): string {
  if (context === null) return "the servers' logs";
  const logs = names.map(
    (name) => context.state.servers[name]?.log ?? path.join(context.paths.logsDir, `${name}.log`),
  );
  return logs.length === 1 ? `its log, ${logs[0]}` : `their logs: ${logs.join(", ")}`;
}

function refusalHint(
  error: CoordinationError,
  names: readonly string[],
  codes: Readonly<Record<string, string>>,
  context: RefusalContext | null,
  gym: string,
): string {
  for (const code of new Set(names.map((name) => codes[name]))) {
    if (code === "invalid_checkpoint_state") {
      return invalidStateHint(
        error.operation,
        names.filter((name) => codes[name] === code).map((name) => error.failures[name] ?? ""),
        gym,
      );
    }
    if (code === "checkpoint_error" && error.operation === "restore") {
      return `a restore must go to servers that have served nothing yet: stop the deployment (\`${gym} stop\`), start it again (\`${gym} serve\`), then restore`;
    }
    const hint = code === undefined ? undefined : CODE_HINTS[code];
    if (hint !== undefined) return hint(gym);
  }
  if (names.length === 0) {
    return "the deployment's model server does not take part in checkpoints: serve it with checkpointing on (a PolicyModelServer), or look at its log";
  }
  const unreachable = names.filter((name) => codes[name] === undefined);
  if (unreachable.length > 0) {
    const serve =
      context === null
        ? `\`${gym} serve <deployment.yaml>\``
        : `\`${gym} serve ${context.state.deployment_file}\``;
    return `is the deployment running? if not, start it with ${serve}; if it is, see why ${unreachable.join(", ")} did not answer in ${logsOf(context, unreachable)}`;
  }
  return `see why it was refused in ${logsOf(context, names)}`;
}

/** A failure's detail without the server name the SERVER column shows already. */
function detailOf(name: string, description: string): string {
  return description.startsWith(`${name}: `) ? description.slice(name.length + 2) : description;
}

/** A coordination step was refused or failed; printable per server. */
export class RefusalError extends CliError {
  override readonly name = "RefusalError";
  constructor(
    readonly operation: string,
    readonly failures: Readonly<Record<string, string>>,
    readonly codes: Readonly<Record<string, string>>,
    message: string,
    hint: string,
    json: unknown,
  ) {
    super(message, hint);
    this.json = json;
  }
}

function refusal(
  error: CoordinationError,
  context: RefusalContext | null,
  what: string,
  gym: string,
): RefusalError {
  const codes = error.codes();
  const names = Object.keys(error.failures).sort();
  const hint = refusalHint(error, names, codes, context, gym);
  const body =
    names.length === 0
      ? error.message
      : `${what} failed on ${names.length} participant(s):\n` +
        table(
          ["SERVER", "CODE", "DETAIL"],
          names.map((name) => [
            name,
            codes[name] ?? "-",
            detailOf(name, error.failures[name] ?? ""),
          ]),
        );
  return new RefusalError(error.operation, error.failures, codes, body, hint, {
    error: {
      operation: error.operation,
      message: error.message,
      failures: error.failures,
      codes,
    },
  });
}

/** A running deployment's participants, ready for coordination. */
interface Session {
  readonly state: RunState;
  readonly paths: StatePaths;
  readonly participants: Participants;
  readonly client: ServerClient;
}

/**
 * Reads the state file and discovers the participants. `probeTimeoutMs` bounds each discovery
 * probe (default: the SDK's discovery default).
 */
async function openSession(
  options: CkptOptions,
  io: Io,
  probeTimeoutMs?: number,
): Promise<Session> {
  const gym = commandOf(io);
  const stateFile = runStateFile({ ...options, cwd: io.cwd, command: gym });
  const state = requireState(stateFile, gym);
  const paths = statePaths(stateFile);
  const checkpoint = state.deployment.checkpoint;
  if (checkpoint?.enabled !== true || !checkpoint.control_auth_token) {
    throw new CliError(
      `checkpointing is off in ${state.deployment_file}`,
      `turn it on (checkpoint: {enabled: true, control_auth_token: ...}) and restart the deployment with \`${gym} serve\``,
    );
  }
  const client = new ServerClient(state.deployment);
  try {
    const requireModel = Object.values(state.deployment.servers).some(
      (server) => server.kind === "model",
    );
    const participants = await discover(client, checkpoint.control_auth_token, {
      requireModel,
      ...(probeTimeoutMs === undefined ? {} : { probeTimeoutMs }),
    });
    return { state, paths, participants, client };
  } catch (error) {
    await client.close();
    if (error instanceof CoordinationError)
      throw refusal(error, { state, paths }, "discovering the participants", gym);
    throw error;
  }
}

async function withSession<T>(
  options: CkptOptions,
  io: Io,
  what: string,
  body: (session: Session) => Promise<T>,
  probeTimeoutMs?: number,
): Promise<T> {
  const session = await openSession(options, io, probeTimeoutMs);
  try {
    return await body(session);
  } catch (error) {
    if (error instanceof CoordinationError) throw refusal(error, session, what, commandOf(io));
    throw error;
  } finally {
    await session.client.close();
  }
}

function printJson(io: Io, value: unknown): void {
  io.out(JSON.stringify(value, null, 2));
}

function kindOf(session: Session, name: string): string {
  return session.participants.members.find((member) => member.name === name)?.kind ?? "?";
}

function memberNames(session: Session): string[] {
  return session.participants.members.map((member) => member.name);
}

// ---------------------------------------------------------------------------------------------
// status
// ---------------------------------------------------------------------------------------------

function leaseCell(expiresAt: number | null): string {
  if (expiresAt === null) return "-";
  const left = expiresAt * 1000 - Date.now();
  return left <= 0 ? "expired" : `${formatDuration(left)} left`;
}

/** `gym ckpt status`: discovery and the status calls together take at most `--deadline`. */
export async function statusCommand(options: CkptOptions, io: Io): Promise<number> {
  const deadlineMs = options.deadlineMs ?? DEFAULT_DEADLINE_MS;
  const end = Date.now() + deadlineMs;
  return await withSession(
    options,
    io,
    "status",
    async (session) => {
      const replies = await status(session.participants, Math.max(1, end - Date.now()));
      const others = Object.keys(session.state.deployment.servers)
        .filter((name) => !(name in replies))
        .sort();
      if (options.json === true) {
        printJson(io, { servers: replies, not_participants: others });
        return 0;
      }
      const rows = memberNames(session).map((name) => {
        const reply = replies[name];
        if (reply === undefined) return [name, kindOf(session, name), "?"];
        return [
          name,
          reply.kind,
          reply.phase,
          reply.checkpoint_id ?? "-",
          leaseCell(reply.lease_expires_at),
          reply.report.ready ? "yes" : "no",
          reply.report.blocker_count === 0
            ? "-"
            : `${reply.report.blocker_count}: ${listCell(reply.report.blockers)}`,
          listCell(reply.report.restarts),
          String(reply.retired_rollouts),
        ];
      });
      for (const name of others) {
        rows.push([
          name,
          session.state.deployment.servers[name]?.kind ?? "?",
          "(not a participant)",
        ]);
      }
      io.out(
        table(
          [
            "SERVER",
            "KIND",
            "PHASE",
            "CHECKPOINT",
            "LEASE",
            "READY",
            "BLOCKERS",
            "RESTARTS",
            "RETIRED",
          ],
          rows,
        ),
      );
      return 0;
    },
    deadlineMs,
  );
}

// ---------------------------------------------------------------------------------------------
// prepare
// ---------------------------------------------------------------------------------------------

function prepareTable(session: Session, result: PrepareResult): string {
  return table(
    ["SERVER", "KIND", "PHASE", "BLOCKERS", "RESTARTS"],
    memberNames(session).map((name) => {
      const reply: PrepareReply | undefined = result.replies[name];
      if (reply === undefined) return [name, kindOf(session, name), "(not contacted)", "-", "-"];
      return [
        name,
        kindOf(session, name),
        reply.phase,
        reply.report.blocker_count === 0
          ? "-"
          : `${reply.report.blocker_count}: ${listCell(reply.report.blockers)}`,
        listCell(reply.report.restarts),
      ];
    }),
  );
}

function prepareJson(id: string, result: PrepareResult): unknown {
  return {
    checkpoint_id: id,
    prepared: result.prepared,
    replies: result.replies,
    blockers: result.blockers(),
    restarts: sortedCaptureKeys(result.restarts()),
  };
}

async function runPrepare(
  session: Session,
  id: string,
  options: CkptOptions,
): Promise<PrepareResult> {
  const result = await prepare(session.participants, id, deadlineTs(options));
  writeLastPrepare(session.paths.lastPrepareFile, {
    checkpoint_id: id,
    prepared: result.prepared,
    at: new Date().toISOString(),
    replies: { ...result.replies },
  });
  return result;
}

function notPrepared(id: string, result: PrepareResult, hint: string): CliError {
  const blockers = result.blockers();
  const count = Object.values(result.replies).reduce(
    (sum, reply) => sum + (reply.phase === "prepared" ? 0 : reply.report.blocker_count),
    0,
  );
  return new CliError(
    `checkpoint ${id} is not prepared: ${count} blocker(s) on ${Object.keys(blockers).sort().join(", ")} ` +
      `(${Object.entries(blockers)
        .map(([name, keys]) => `${name}: ${listCell(keys, 5)}`)
        .join("; ")})`,
    hint,
  );
}

/** `gym ckpt prepare --id ID`. */
export async function prepareCommand(id: string, options: CkptOptions, io: Io): Promise<number> {
  const gym = commandOf(io);
  return await withSession(options, io, "prepare", async (session) => {
    const result = await runPrepare(session, id, options);
    if (options.json === true) printJson(io, prepareJson(id, result));
    else io.out(prepareTable(session, result));
    if (!result.prepared) {
      throw notPrepared(
        id,
        result,
        `the checkpoint stays open: prepare again with the same ID to keep waiting (${gym} ckpt prepare --id ${id} --deadline 60s), or abort it with \`${gym} ckpt resume --id ${id}\``,
      );
    }
    if (options.json !== true) {
      const restarts = result.restarts();
      io.out(
        `\ncheckpoint ${id} is prepared on ${session.participants.members.length} participant(s)` +
          (restarts.length > 0 ? `; ${restarts.length} restart(s) will not be captured` : "") +
          `\nnext: ${gym} ckpt commit --id ${id} --dir DIR`,
      );
    }
    return 0;
  });
}

// ---------------------------------------------------------------------------------------------
// commit
// ---------------------------------------------------------------------------------------------

/** How the commit scope is chosen. */
export type CommitScope = "continued" | "all";

/** The `episode_ids` of a commit (see the module documentation). */
export function commitScope(
  id: string,
  result: PrepareResult,
  scope: CommitScope,
  episodes: readonly EpisodeId[] | null,
): EpisodeId[] | null {
  if (scope === "all") {
    if (episodes !== null) {
      throw new UsageError(
        "--scope all and --episodes cannot be combined",
        "--scope all commits everything each participant holds; --episodes FILE names the continued episodes",
      );
    }
    return null;
  }
  if (episodes !== null) return result.continued(episodes);
  const restarts = result.restarts();
  if (restarts.length === 0) return null;
  throw new UsageError(
    `the prepare of ${id} reported ${restarts.length} restart(s) (${listCell(sortedCaptureKeys(restarts), 5)}), ` +
      "so the continued episodes must be named",
    "pass --episodes FILE (the capture keys in flight, one per line; the restarts are left out for you), " +
      "or --scope all to commit everything each participant holds",
  );
}

/**
 * {@link commitEverywhere}, with the CLI's hint when nothing says which episodes continue.
 */
async function commitAll(
  participants: Participants,
  step: CommitStep,
): Promise<Record<string, CommitReply>> {
  try {
    return await commitEverywhere(participants, step);
  } catch (error) {
    if (!(error instanceof CommitScopeRequiredError)) throw error;
    throw new UsageError(
      error.message,
      "pass --episodes FILE (the capture keys in flight, one per line)",
    );
  }
}

function lastPrepareFor(session: Session, id: string, gym: string): PrepareResult {
  const last = readLastPrepare(session.paths.lastPrepareFile);
  if (last === null || last.checkpoint_id !== id) {
    throw new UsageError(
      last === null
        ? `no prepare is recorded in ${session.paths.dir}, and the default scope (continued) needs the prepare of ${id}`
        : `the last prepare recorded in ${session.paths.dir} is ${last.checkpoint_id}, not ${id}`,
      `prepare it from this state directory first (${gym} ckpt prepare --id ${id}), or pass --scope all`,
    );
  }
  if (!last.prepared) {
    throw new CliError(
      `the last prepare of ${id} did not reach prepared`,
      `prepare again with the same ID (${gym} ckpt prepare --id ${id}), or abort it with \`${gym} ckpt resume --id ${id}\``,
    );
  }
  return new PrepareResult(last.prepared, last.replies);
}

function commitTable(session: Session, replies: Record<string, CommitReply>): string {
  return table(
    ["SERVER", "KIND", "RECORDS", "EPISODES", "RECORDS FILE"],
    memberNames(session).map((name) => {
      const reply = replies[name];
      if (reply === undefined) return [name, kindOf(session, name), "?", "?", "?"];
      return [
        name,
        kindOf(session, name),
        String(reply.manifest.record_count),
        listCell(reply.episode_ids, 4),
        reply.manifest.records_file.slice(0, 20) + "…",
      ];
    }),
  );
}

/** What `commit` and `checkpoint` take besides the common options. */
export interface CommitCommandOptions extends CkptOptions {
  readonly scope?: CommitScope;
  /** A file of capture keys: the continued episodes. */
  readonly episodes?: string;
}

function episodesOption(options: CommitCommandOptions, io: Io): EpisodeId[] | null {
  return options.episodes === undefined
    ? null
    : readEpisodesFile(path.resolve(io.cwd, options.episodes));
}

/** `gym ckpt commit --id ID --dir DIR`. */
export async function commitCommand(
  id: string,
  dir: string,
  options: CommitCommandOptions,
  io: Io,
): Promise<number> {
  const checkpointDir = path.resolve(io.cwd, dir);
  const episodes = episodesOption(options, io);
  const gym = commandOf(io);
  return await withSession(options, io, "commit", async (session) => {
    const scope = options.scope ?? "continued";
    const episodeIds =
      scope === "all" && episodes === null
        ? null
        : commitScope(id, lastPrepareFor(session, id, gym), scope, episodes);
    const replies = await commitAll(session.participants, {
      checkpointId: id,
      checkpointDir,
      episodeIds,
      deadlineTs: () => deadlineTs(options),
    });
    if (options.json === true) {
      printJson(io, {
        checkpoint_id: id,
        checkpoint_dir: checkpointDir,
        episode_ids: episodeIds === null ? null : episodeIds.map(captureKey),
        replies,
      });
    } else {
      io.out(commitTable(session, replies));
      io.out(
        `\ncommitted ${id} to ${checkpointDir}\nnext: ${gym} ckpt resume --id ${id} (check it with ${gym} ckpt inspect ${dir})`,
      );
    }
    return 0;
  });
}

// ---------------------------------------------------------------------------------------------
// resume
// ---------------------------------------------------------------------------------------------

/** `gym ckpt resume --id ID`. */
export async function resumeCommand(id: string, options: CkptOptions, io: Io): Promise<number> {
  return await withSession(options, io, "resume", async (session) => {
    const replies = await resume(session.participants, id, deadlineTs(options));
    if (options.json === true) {
      printJson(io, { checkpoint_id: id, replies });
      return 0;
    }
    io.out(
      table(
        ["SERVER", "KIND", "PHASE", "RESULT"],
        [...PREPARE_ORDER]
          .reverse()
          .flatMap((kind) => session.participants.members.filter((m) => m.kind === kind))
          .map((member) => {
            const reply = replies[member.name];
            return [
              member.name,
              member.kind,
              reply?.phase ?? "?",
              reply === undefined ? "?" : reply.idempotent ? "nothing to resume" : "resumed",
            ];
          }),
      ),
    );
    return 0;
  });
}

// ---------------------------------------------------------------------------------------------
// checkpoint
// ---------------------------------------------------------------------------------------------

/** `gym ckpt checkpoint --dir DIR`: prepare + commit + resume with a fresh ID. */
export async function checkpointCommand(
  dir: string,
  options: CommitCommandOptions,
  io: Io,
): Promise<number> {
  const checkpointDir = path.resolve(io.cwd, dir);
  const episodes = episodesOption(options, io);
  const scope = options.scope ?? "continued";
  if (scope === "all" && episodes !== null) {
    throw new UsageError(
      "--scope all and --episodes cannot be combined",
      "--scope all commits everything each participant holds; --episodes FILE names the continued episodes",
    );
  }
  const id = freshCheckpointId();
  const gym = commandOf(io);
  return await withSession(options, io, "checkpoint", async (session) => {
    const timings: [string, number][] = [];
    const timed = async <T>(stage: string, work: () => Promise<T>): Promise<T> => {
      const started = performance.now();
      try {
        return await work();
      } finally {
        timings.push([stage, performance.now() - started]);
      }
    };
    const abort = async (why: unknown): Promise<never> => {
      // Nothing will be published: reopen every participant, then report the first failure.
      try {
        await resume(session.participants, id, deadlineTs(options));
      } catch (error) {
        io.err(`gym: resuming ${id} after the failure also failed: ${describeError(error)}`);
      }
      throw why;
    };
    if (options.json !== true) io.err(`gym: checkpoint ${id} → ${checkpointDir}`);

    const prepared = await timed("prepare", () => runPrepare(session, id, options));
    if (!prepared.prepared) {
      if (options.json === true)
        printJson(io, { checkpoint_id: id, prepare: prepareJson(id, prepared) });
      else io.out(prepareTable(session, prepared));
      return await abort(
        notPrepared(
          id,
          prepared,
          `the checkpoint was aborted (resumed): retry with a longer --deadline, or retire the blockers first (${gym} ckpt retire --keys KEY,...)`,
        ),
      );
    }
    let episodeIds: EpisodeId[] | null;
    try {
      episodeIds = commitScope(id, prepared, scope, episodes);
    } catch (error) {
      // Prepared, then refused here: say that nothing was left open or written.
      if (!(error instanceof CliError)) return await abort(error);
      const aborted = `nothing was written, and ${id} was aborted (every participant resumed)`;
      return await abort(
        new CliError(
          error.message,
          error.hint === null ? aborted : `${error.hint}; ${aborted}`,
          error.exitCode,
        ),
      );
    }
    let committed: Record<string, CommitReply>;
    try {
      committed = await timed("commit", () =>
        commitAll(session.participants, {
          checkpointId: id,
          checkpointDir,
          episodeIds,
          deadlineTs: () => deadlineTs(options),
        }),
      );
    } catch (error) {
      return await abort(error);
    }
    let resumed: Awaited<ReturnType<typeof resume>>;
    try {
      resumed = await timed("resume", () => resume(session.participants, id, deadlineTs(options)));
    } catch (error) {
      if (!(error instanceof CoordinationError)) throw error;
      const failure = refusal(error, session, "resume", gym);
      throw new RefusalError(
        failure.operation,
        failure.failures,
        failure.codes,
        `checkpoint ${id} was committed to ${checkpointDir}, but ${failure.message}`,
        `resume again: ${gym} ckpt resume --id ${id} (a participant that cannot be reached resumes on its own when its lease expires)`,
        failure.json,
      );
    }
    const total = timings.reduce((sum, [, ms]) => sum + ms, 0);
    if (options.json === true) {
      printJson(io, {
        checkpoint_id: id,
        checkpoint_dir: checkpointDir,
        episode_ids: episodeIds === null ? null : episodeIds.map(captureKey),
        timings_ms: {
          ...Object.fromEntries(timings.map(([stage, ms]) => [stage, Math.round(ms)])),
          total: Math.round(total),
        },
        prepare: prepareJson(id, prepared),
        commit: committed,
        resume: resumed,
      });
      return 0;
    }
    io.out(commitTable(session, committed));
    io.out("");
    io.out(
      table(
        ["STAGE", "TIME"],
        [
          ...timings.map(([stage, ms]) => [stage, formatDuration(ms)]),
          ["total", formatDuration(total)],
        ],
      ),
    );
    const episodesHeld = new Set(Object.values(committed).flatMap((reply) => reply.episode_ids));
    io.out(
      `\ncheckpoint ${id} written to ${checkpointDir} (${episodesHeld.size} episode(s)); every participant resumed` +
        `\ncheck it with: ${gym} ckpt inspect ${dir}`,
    );
    return 0;
  });
}

// ---------------------------------------------------------------------------------------------
// restore
// ---------------------------------------------------------------------------------------------

/** What `restore` takes besides the common options. */
export interface RestoreCommandOptions extends CkptOptions {
  /** A file of capture keys to restore. */
  readonly episodes?: string;
  /** Restore every episode the checkpoint holds. */
  readonly all?: boolean;
  /** Resume right after a successful restore. @default false */
  readonly resume?: boolean;
}

/**
 * The episodes a checkpoint directory holds, verified; a corrupt one is refused with advice that
 * starts its commands with `gym` ({@link commandOf}).
 */
export async function checkpointEpisodes(dir: string, gym: string): Promise<EpisodeId[]> {
  const report = await inspectCheckpoint(dir);
  if (!report.found) throw noCheckpoint(report, gym);
  if (!report.ok) {
    throw new CliError(
      `cannot list the episodes of ${dir}: it is corrupt:\n` +
        report.problems.map((problem) => `  - ${problem}`).join("\n"),
      `restore from another checkpoint, or see \`${gym} ckpt inspect DIR\``,
    );
  }
  return report.episodes.map(fromCaptureKey);
}

/** `gym ckpt restore --id ID --dir DIR (--episodes FILE | --all)`. */
export async function restoreCommand(
  id: string,
  dir: string,
  options: RestoreCommandOptions,
  io: Io,
): Promise<number> {
  const checkpointDir = path.resolve(io.cwd, dir);
  const gym = commandOf(io);
  if ((options.episodes === undefined) === (options.all !== true)) {
    throw new UsageError(
      options.all === true
        ? "--episodes and --all cannot be combined"
        : "restore needs the episodes to continue",
      "pass --all (every episode the checkpoint holds) or --episodes FILE (capture keys, one per line)",
    );
  }
  const episodes =
    options.all === true
      ? await checkpointEpisodes(checkpointDir, gym)
      : readEpisodesFile(path.resolve(io.cwd, options.episodes as string));
  return await withSession(options, io, "restore", async (session) => {
    const replies = await restore(session.participants, {
      checkpointId: id,
      checkpointDir,
      episodeIds: episodes,
      deadlineTs: deadlineTs(options),
    });
    const restored = [...new Set(Object.values(replies).flatMap((reply) => reply.restored))].sort();
    const resumed =
      options.resume === true ? await resume(session.participants, id, deadlineTs(options)) : null;
    if (options.json === true) {
      printJson(io, {
        checkpoint_id: id,
        checkpoint_dir: checkpointDir,
        episode_ids: episodes.map(captureKey),
        restored,
        replies,
        resume: resumed,
      });
      return 0;
    }
    io.out(
      table(
        ["SERVER", "KIND", "SOURCE", "RESTORED"],
        memberNames(session).map((name) => {
          const reply = replies[name];
          return [
            name,
            kindOf(session, name),
            reply?.source_checkpoint_id ?? "?",
            reply === undefined ? "?" : `${reply.restored.length}: ${listCell(reply.restored, 4)}`,
          ];
        }),
      ),
    );
    io.out(
      `\nrestored ${restored.length} episode(s) as their next attempts: ${restored.join(", ") || "none"}`,
    );
    io.out(
      resumed !== null
        ? "every participant resumed"
        : `the participants stay closed until: ${gym} ckpt resume --id ${id}`,
    );
    return 0;
  });
}

// ---------------------------------------------------------------------------------------------
// retire and forget
// ---------------------------------------------------------------------------------------------

/** The attempts `retire` stops: a file of capture keys, or keys given inline. */
export interface RetireSelection {
  /** `--episodes FILE`: capture keys, one per line (as for commit and restore). */
  readonly file?: string;
  /** `--keys KEY[,KEY]`: capture keys inline. */
  readonly keys?: readonly string[];
}

/** `gym ckpt retire (--episodes FILE | --keys KEY[,KEY])`. */
export async function retireCommand(
  selection: RetireSelection,
  options: CkptOptions & { id?: string },
  io: Io,
): Promise<number> {
  if ((selection.file === undefined) === (selection.keys === undefined)) {
    throw new UsageError(
      selection.file === undefined
        ? "retire needs the attempts to stop"
        : "--episodes and --keys cannot be combined",
      "pass --episodes FILE (capture keys, one per line) or --keys KEY[,KEY] (capture keys inline)",
    );
  }
  const episodes =
    selection.keys !== undefined
      ? parseCaptureKeys(selection.keys, "--keys")
      : readEpisodesFile(
          path.resolve(io.cwd, selection.file as string),
          "--episodes takes a file of capture keys, one per line; to name the keys inline, use --keys KEY[,KEY]",
        );
  if (episodes.length === 0) {
    throw new UsageError(
      `the episodes file ${selection.file ?? ""} names no capture key`,
      "write the capture keys to retire, one per line, or pass them with --keys KEY[,KEY]",
    );
  }
  const id = options.id ?? freshCheckpointId();
  return await withSession(options, io, "retire", async (session) => {
    const replies = await retire(session.participants, id, episodes, deadlineTs(options));
    if (options.json === true) {
      printJson(io, { checkpoint_id: id, episode_ids: episodes.map(captureKey), replies });
      return 0;
    }
    io.out(
      table(
        ["SERVER", "KIND", "RETIRED"],
        memberNames(session).map((name) => [
          name,
          kindOf(session, name),
          String(replies[name]?.retired_count ?? "?"),
        ]),
      ),
    );
    io.out(
      `\nretired ${episodes.map(captureKey).join(", ")} (and earlier attempts); ` +
        `next attempts: ${episodes.map((episode) => captureKey(nextAttempt(episode))).join(", ")}`,
    );
    return 0;
  });
}

/** `gym ckpt forget --rollouts ID[,ID]`. */
export async function forgetCommand(
  rolloutIds: readonly string[],
  options: CkptOptions & { id?: string },
  io: Io,
): Promise<number> {
  for (const rolloutId of rolloutIds) {
    const problem = rolloutIdProblem(rolloutId);
    if (problem !== null) {
      throw new UsageError(
        `--rollouts: ${JSON.stringify(rolloutId)} is not a rollout ID: ${problem}`,
        "name rollouts by their rollout ID, without an -aN attempt suffix",
      );
    }
  }
  const id = options.id ?? freshCheckpointId();
  return await withSession(options, io, "forget", async (session) => {
    const replies = await forget(session.participants, id, rolloutIds, deadlineTs(options));
    if (options.json === true) {
      printJson(io, { checkpoint_id: id, rollout_ids: [...new Set(rolloutIds)].sort(), replies });
      return 0;
    }
    io.out(
      table(
        ["SERVER", "KIND", "FORGOTTEN"],
        memberNames(session).map((name) => [
          name,
          kindOf(session, name),
          String(replies[name]?.forgotten_count ?? "?"),
        ]),
      ),
    );
    return 0;
  });
}
