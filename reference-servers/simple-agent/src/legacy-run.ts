/**
 * The Simple Agent's legacy `/run`: seed → loop → verify → return, each stage
 * recorded as a boundary of the run's episode, so a checkpoint can cut it and a replacement
 * continues from the stage it reached.
 *
 * @module
 */
import { z } from "zod";
import type { CookieJar, ReplyHeaders } from "gym-participant-sdk/protocol";
import type { JsonValue, LegacyRunInput, StepMode } from "gym-participant-sdk";
import { CLOSE_FOLLOWS_HEADER, isRestartReply, verifyModeOf } from "gym-participant-sdk/protocol";
import { GymError } from "gym-participant-sdk";
import type { Item } from "./trajectory.js";

/** An HTTP reply of a call the run makes. */
export interface RunCallReply {
  readonly status: number;
  readonly headers: ReplyHeaders;
  readonly body: string;
  /** The cookies the reply set. */
  readonly cookies: CookieJar;
}

/** What the run needs from the server. */
export interface LegacyRunContext extends LegacyRunInput {
  /** The run's capture key, or null (checkpointing off and no rollout fields). */
  readonly captureKey: string | null;
  readonly skipVerification: boolean;
  readonly skipVerificationReward: number;
  /** POSTs to the resources server under the run's rollout prefix. */
  resources(
    path: string,
    body: unknown,
    jar: CookieJar,
    headers: Record<string, string>,
    signal: AbortSignal,
  ): Promise<RunCallReply>;
  /** Sends the turn loop to the agent itself (activation 1 of the run's session). */
  dispatch(body: unknown, jar: CookieJar, signal: AbortSignal): Promise<RunCallReply>;
  /** Logs a failed resources close (the verdict stands). */
  closeFailed(error: unknown): void;
}

const CookiesSchema = z.record(z.string(), z.string());
const ObjectSchema = z.record(z.string(), z.unknown());

/** A boundary of the run, as recorded by this module. */
const RunBoundarySchema = z.looseObject({
  next: z.enum(["seed", "loop", "verify", "return"]),
  cookies: CookiesSchema.optional(),
  verify_mode: z.enum(["wait", "replay"]).optional(),
  response: ObjectSchema.optional(),
  result: ObjectSchema.optional(),
});

/** Runs (or continues) one legacy `/run` and returns its result. */
export async function runLegacy(ctx: LegacyRunContext): Promise<Item> {
  const { body, steps, signal } = ctx;
  const restored = ctx.steps.continuation();
  const continuation = restored === null ? null : parseBoundary(restored);
  let stage = continuation?.next ?? "seed";
  let jar: CookieJar = continuation?.cookies ?? { ...ctx.cookies };
  let verifyMode: StepMode = continuation?.verify_mode ?? "wait";
  let response: Item | null = continuation?.response ?? null;
  let result: Item | null = continuation?.result ?? null;

  if (stage === "seed") {
    await steps.boundary({ next: "seed" });
    const seedJar = jar;
    const seeded = await steps.step("replay", (stepSignal) =>
      ctx.resources("/seed_session", body, seedJar, {}, stepSignal),
    );
    requireOk(seeded, "resources /seed_session");
    jar = seeded.cookies;
    verifyMode = verifyModeOf(seeded.headers);
    if (isRestartReply(seeded.headers)) await steps.markRestart(signal);
    stage = "loop";
  }

  if (stage === "loop") {
    await steps.boundary({ next: "loop", cookies: jar, verify_mode: verifyMode });
    const loopJar = jar;
    const reply = await steps.step("replay", (stepSignal) =>
      ctx.dispatch(body.responses_create_params, loopJar, stepSignal),
    );
    requireOk(reply, "the self-dispatched turn loop");
    jar = reply.cookies;
    response = parseObject(reply.body, "the turn loop's reply");
    stage = "verify";
  }

  if (response === null) throw new Error(`the restored /run boundary at ${stage} has no response`);
  const loopResponse = response;

  if (stage === "verify") {
    if (ctx.skipVerification) {
      result = {
        ...body,
        response: withoutTrajectory(loopResponse),
        reward: Number(ctx.skipVerificationReward),
        verification_skipped: true,
      };
      // Recorded like a verified run's, so a checkpoint parks the run here until resume.
      await recordDropping(ctx, {
        next: "return",
        response: loopResponse,
        result,
        cookies: jar,
        verify_mode: verifyMode,
      } as unknown as JsonValue);
    } else {
      await recordDropping(ctx, {
        next: "verify",
        response: loopResponse,
        cookies: jar,
        verify_mode: verifyMode,
      } as unknown as JsonValue);
      const verifyJar = jar;
      const mode = verifyMode;
      // Keeps the resources session tracked until the close below, so a replay finds it.
      const headers: Record<string, string> =
        mode === "replay" ? { [CLOSE_FOLLOWS_HEADER]: "1" } : {};
      const verified = await steps.step(mode, (stepSignal) =>
        ctx.resources(
          "/verify",
          { ...body, response: withoutTrajectory(loopResponse) },
          verifyJar,
          headers,
          stepSignal,
        ),
      );
      requireOk(verified, "resources /verify");
      result = parseObject(verified.body, "the /verify reply");
      await steps.boundary({
        next: "return",
        response: loopResponse,
        result,
        cookies: jar,
        verify_mode: verifyMode,
      } as unknown as JsonValue);
    }
  }

  if (result === null) throw new Error("the restored /run boundary at return has no result");
  if (verifyMode === "replay" && result.verification_skipped !== true) {
    // Not a step: a failed replay step would drop the return boundary the verdict is in.
    try {
      const closed = await ctx.resources("/close_session", {}, jar, {}, signal);
      requireOk(closed, "resources /close_session");
    } catch (error) {
      if (signal.aborted) throw error;
      ctx.closeFailed(error);
    }
  }
  return withRunTrajectory(ctx, result, loopResponse);
}

/**
 * Records the boundary that holds the turn loop's reply and drops the kept copy in the same
 * synchronous step, so the reply is never held twice nor lost.
 */
async function recordDropping(ctx: LegacyRunContext, state: JsonValue): Promise<void> {
  const recorded = ctx.steps.boundary(state);
  ctx.steps.dropKeptReply();
  await recorded;
}

function parseBoundary(value: JsonValue): z.infer<typeof RunBoundarySchema> {
  const parsed = RunBoundarySchema.safeParse(value);
  if (!parsed.success) {
    throw new Error(
      `the restored /run boundary is invalid: ${parsed.error.issues
        .slice(0, 3)
        .map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`)
        .join("; ")}`,
    );
  }
  return parsed.data;
}

/**
 * Refuses a non-2xx reply as the other server's failure: 502 `upstream_error` naming it, or,
 * when that server itself reports a failure further upstream (`upstream_*`, as the
 * self-dispatched turn loop does when the model is down), that failure as it was reported.
 */
function requireOk(reply: RunCallReply, what: string): void {
  if (reply.status >= 200 && reply.status < 300) return;
  const further = upstreamFailureOf(reply.body);
  if (further !== null) throw new GymError(further.code, further.detail);
  throw new GymError(
    "upstream_error",
    `${what} answered HTTP ${reply.status}: ${reply.body.slice(0, 500)}`,
  );
}

/** The `upstream_*` error envelope of a reply body, or null. */
function upstreamFailureOf(
  body: string,
): { code: "upstream_unreachable" | "upstream_error"; detail: string } | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return null;
  }
  const error = (parsed as { error?: { code?: unknown; detail?: unknown } } | null)?.error;
  const code = error?.code;
  if (code !== "upstream_unreachable" && code !== "upstream_error") return null;
  return { code, detail: typeof error?.detail === "string" ? error.detail : String(code) };
}

function parseObject(text: string, what: string): Item {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new Error(`${what} is not JSON: ${text.slice(0, 200)}`);
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    throw new Error(`${what} is not a JSON object`);
  }
  return json as Item;
}

function withoutTrajectory(response: Item): Item {
  if (!Object.hasOwn(response, "_ng_trajectory")) return response;
  const { _ng_trajectory: _dropped, ...rest } = response;
  return rest;
}

/** The result, with the loop's trajectory attached as `ng_trajectory` when it has one. */
function withRunTrajectory(ctx: LegacyRunContext, result: Item, response: Item): Item {
  const trajectory = response._ng_trajectory;
  if (typeof trajectory !== "object" || trajectory === null || Array.isArray(trajectory)) {
    return { ...result };
  }
  const t = trajectory as Item;
  const turns = Array.isArray(t.turns) ? [...(t.turns as Item[])] : [];
  const gaps = Array.isArray(t.gaps) ? [...(t.gaps as Item[])] : [];
  const last = turns.at(-1);
  if (typeof result.resolved === "boolean" && last !== undefined) {
    turns[turns.length - 1] = { ...last, resolved: result.resolved };
  } else {
    gaps.push({ kind: "resolution_unavailable", detail: "the verdict has no boolean resolved" });
  }
  return {
    ...result,
    ng_trajectory: {
      ...t,
      turns,
      gaps,
      task_id: taskIdOf(ctx.body),
      rollout_id: ctx.captureKey ?? "unknown",
    },
  };
}

function taskIdOf(body: Item): string {
  for (const field of ["task_id", "problem_id", "instance_id", "_ng_task_index"]) {
    const value = body[field];
    if (value === undefined || value === null) continue;
    return typeof value === "string" ? value : JSON.stringify(value);
  }
  return "unknown";
}
