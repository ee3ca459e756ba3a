/**
 * Runs the requirements against one running server: reads what it declares from its status,
 * checks each selected requirement in turn (skipping those that do not apply, saying why), and
 * applies the expected failures. Checks run one at a time; each leaves the server idle.
 *
 * @see docs/conformance.md
 */
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import type { ParticipantKind } from "../wire/control.js";
export type { RequirementResult, ResultKind } from "./requirement.js";
import { applyExpectedFailures, type ExpectedFailures } from "./expected-failures.js";
import { describeProfile, profileOf, type ServerProfile } from "./profile.js";
import { REQUIREMENTS, selectRequirements } from "./registry.js";
import {
  CheckFailed,
  groupOf,
  type CheckContext,
  type Outcome,
  type Requirement,
  type RequirementResult,
  type ToolCall,
} from "./requirement.js";
import { describeReply, errorCodeOf, NoReply, Target } from "./target.js";
import { resolveTool } from "./tool-route.js";
import { LaunchError, LaunchedServer } from "./launch.js";

/** The task of the kit's `/run` calls when none is given: a `single_agent_turn` task. */
export const DEFAULT_TASK = Object.freeze({
  task_id: { taskset: "conformance", task_id: "1" },
  task_input: { responses_create_params: { input: "Say hello." }, task_data: {} },
});

/** What to check, against which server. */
export interface ConformanceOptions {
  /** The server's base URL; with `launch`, the launched server's is used instead. */
  readonly url?: string;
  /**
   * The kit starts the server with this shell command and may kill and restart it (the crash
   * requirements need it). `{port}`, `{token}` and `{checkpoint_root}` are replaced, and set as
   * `GYM_CONFORMANCE_PORT`, `GYM_CONTROL_TOKEN`, `GYM_CONFORMANCE_CHECKPOINT_ROOT`.
   * @default null: the server is already running at `url`
   */
  readonly launch?: {
    readonly command: string;
    /** @default 60_000 */
    readonly readyTimeoutMs?: number;
    readonly cwd?: string;
  } | null;
  /** The `task` of an environment's `/run` calls. @default a `single_agent_turn` task */
  readonly task?: unknown;
  /** Its checkpoint control token. */
  readonly token: string;
  /** The kind the caller expects; the status must report it. @default the status's kind */
  readonly kind?: ParticipantKind;
  /** IDs or groups to run (all when empty). @default [] */
  readonly only?: readonly string[];
  /** IDs or groups to leave out. @default [] */
  readonly skip?: readonly string[];
  /** Seed of the hostile slice. @default a random one, reported */
  readonly seed?: number;
  /** Known gaps: their failures do not fail the run; a listed one that passes does. */
  readonly expectedFailures?: ExpectedFailures | null;
  /**
   * Where the kit makes checkpoint directories (the server must see the same path).
   * @default the system's temporary directory
   */
  readonly checkpointRoot?: string;
  /** The body of `/seed_session` calls. @default {} */
  readonly seedBody?: unknown;
  /** The tool the resources checks call. @default the first one `GET /openapi.json` documents */
  readonly tool?: ToolCall | null;
  /** The requirements to choose from. @default every requirement of the kit */
  readonly requirements?: readonly Requirement[];
  /** Called as each result is known (progress). */
  readonly onResult?: (result: RequirementResult) => void;
}

/** A whole run. */
export interface ConformanceReport {
  readonly url: string;
  readonly profile: ServerProfile;
  /** The profile in words (`resources 'counter', mode exported, verify wait`). */
  readonly declared: string;
  readonly seed: number;
  readonly results: readonly RequirementResult[];
  /** True when no required check failed (skips and expected failures do not fail a run). */
  readonly passed: boolean;
}

/** The kit could not start checking: the server is unreachable, refuses the token, or is no participant. */
export class ConformanceSetupError extends Error {
  override readonly name = "ConformanceSetupError";
  constructor(
    message: string,
    /** What to do about it. */
    readonly hint: string,
  ) {
    super(message);
  }
}

/** Reads the server's profile from its status, or says why it cannot be checked. */
async function readProfile(
  target: Target,
  kind: ParticipantKind | undefined,
): Promise<ServerProfile> {
  let reply;
  try {
    reply = await target.status();
  } catch (error) {
    throw new ConformanceSetupError(
      `cannot reach ${target.url}: ${error instanceof Error ? error.message : String(error)}`,
      "start the server first (or pass --launch), and check the URL",
    );
  }
  if (reply.status === 401) {
    throw new ConformanceSetupError(
      `${target.url} refuses the control token (401 ${errorCodeOf(reply) ?? ""})`.trim(),
      "pass the server's checkpoint.control_auth_token with --token (or GYM_CONTROL_TOKEN)",
    );
  }
  if (reply.status === 404) {
    throw new ConformanceSetupError(
      `${target.url} serves no checkpoint control routes (404): not a participant, or checkpointing is off`,
      "start the server with checkpoint.enabled: true and a control token",
    );
  }
  if (reply.status !== 200 || typeof reply.json !== "object" || reply.json === null) {
    throw new ConformanceSetupError(
      `GET status of ${target.url} answered ${describeReply(reply)}, not a status object`,
      "check that the URL is the participant's base URL",
    );
  }
  const profile = profileOf(reply.json as Record<string, unknown>);
  if (profile === null) {
    throw new ConformanceSetupError(
      `the status of ${target.url} names kind ${JSON.stringify((reply.json as { kind?: unknown }).kind)}, not a participant kind`,
      "a participant's status reports kind environment, model, agent or resources",
    );
  }
  if (kind !== undefined && profile.kind !== kind) {
    throw new ConformanceSetupError(
      `${target.url} is a ${profile.kind} participant, not ${kind}`,
      `drop --kind (it is read from the status) or pass --kind ${profile.kind}`,
    );
  }
  return profile;
}

/** Puts the server back to idle between checks when a check left one of the kit's checkpoints open. */
async function backToIdle(target: Target, tag: string): Promise<void> {
  const reply = await target.status().catch(() => null);
  const status = reply?.json as { phase?: unknown; checkpoint_id?: unknown } | undefined;
  if (status === undefined || status.phase === "idle") return;
  if (typeof status.checkpoint_id === "string" && status.checkpoint_id.startsWith(tag)) {
    await target
      .control("resume", {
        checkpoint_id: status.checkpoint_id,
        deadline_ts: Date.now() / 1000 + 30,
      })
      .catch(() => undefined);
  }
}

async function runOne(requirement: Requirement, context: CheckContext): Promise<Outcome> {
  const notApplicable = requirement.appliesTo(context.profile);
  if (notApplicable !== null) return { result: "skip", why: notApplicable };
  try {
    return await requirement.check(context);
  } catch (error) {
    if (error instanceof CheckFailed || error instanceof NoReply) {
      return { result: "fail", reason: error.message };
    }
    return {
      result: "fail",
      reason: `the check broke off: ${error instanceof Error ? error.message : String(error)}`,
    };
  }
}

/**
 * Checks the server at `options.url` and returns the report; never throws for a failed
 * requirement, only when it cannot start ({@link ConformanceSetupError}).
 *
 * @example
 * const report = await runConformance({ url: "http://127.0.0.1:8001", token: "t" });
 * if (!report.passed) process.exitCode = 1;
 */
export async function runConformance(options: ConformanceOptions): Promise<ConformanceReport> {
  const root = options.checkpointRoot ?? tmpdir();
  let launched: LaunchedServer | null = null;
  if (options.launch != null) {
    await mkdir(root, { recursive: true });
    try {
      launched = await LaunchedServer.start({
        command: options.launch.command,
        token: options.token,
        checkpointRoot: root,
        ...(options.launch.readyTimeoutMs === undefined
          ? {}
          : { readyTimeoutMs: options.launch.readyTimeoutMs }),
        ...(options.launch.cwd === undefined ? {} : { cwd: options.launch.cwd }),
      });
    } catch (error) {
      if (error instanceof LaunchError) {
        throw new ConformanceSetupError(error.message, "check the --launch command on its own");
      }
      throw error;
    }
  }
  const url = launched?.url ?? options.url;
  if (url === undefined) {
    throw new ConformanceSetupError("no server to check", "give its URL, or --launch a command");
  }
  const target = new Target(url, options.token);
  let scratch: string | null = null;
  try {
    const profile = await readProfile(target, options.kind);
    await mkdir(root, { recursive: true });
    scratch = await mkdtemp(path.join(root, "gym-conformance-"));
    const tag = `conformance-${randomBytes(3).toString("hex")}`;
    let checkpoints = 0;
    let rollouts = 0;
    let dirs = 0;
    const seed = options.seed ?? randomBytes(4).readUInt32BE(0);
    let tool: Promise<ToolCall | null> | null = null;
    const where = scratch;
    const context: CheckContext = {
      target,
      profile,
      seed,
      seedBody: options.seedBody ?? {},
      checkpointId: () => `${tag}-c${++checkpoints}`,
      rolloutId: () => `${tag}-r${++rollouts}`,
      checkpointDir: async () => {
        const dir = path.join(where, `ckpt-${++dirs}`);
        await mkdir(dir);
        return dir;
      },
      deadline: (seconds = 30) => Date.now() / 1000 + seconds,
      tool: () => (tool ??= resolveTool(target, options.tool ?? null)),
      task: options.task ?? DEFAULT_TASK,
      restart:
        launched === null
          ? null
          : async () => {
              await (launched as LaunchedServer).restart();
              await target.reconnect();
            },
    };
    const results: RequirementResult[] = [];
    for (const requirement of selectRequirements(
      options.only ?? [],
      options.skip ?? [],
      options.requirements ?? REQUIREMENTS,
    )) {
      const started = Date.now();
      const outcome = await runOne(requirement, context);
      await backToIdle(target, tag);
      const result = applyExpectedFailures(
        {
          id: requirement.id,
          group: groupOf(requirement.id),
          title: requirement.title,
          docs: requirement.docs,
          result: outcome.result,
          reason:
            outcome.result === "fail"
              ? outcome.reason
              : outcome.result === "skip"
                ? outcome.why
                : null,
          ms: Date.now() - started,
        },
        options.expectedFailures ?? null,
      );
      results.push(result);
      options.onResult?.(result);
    }
    return {
      url: target.url,
      profile,
      declared: describeProfile(profile),
      seed,
      results,
      passed: results.every((r) => r.result !== "fail" && r.result !== "stale"),
    };
  } finally {
    await target.close();
    await launched?.kill();
    if (scratch !== null) await rm(scratch, { recursive: true, force: true });
  }
}
