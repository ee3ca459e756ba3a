/**
 * `POST /v1/chat/completions`: the scripted reply, generated token by token, captured through
 * `RolloutTokenCapture` when the request carries `ng_capture`, continued from a staged cut when
 * its admission names one, and streamed as server-sent events when asked (uncaptured only).
 *
 * @module
 */
import { randomUUID } from "node:crypto";
import { DetailError, type RouteInput } from "gym-participant-sdk";
import type { CallEntry, CallLog } from "./call-log.js";
import { renderPrompt, ReplyPlan } from "./chat-template.js";
import { startCapture } from "./capture-start.js";
import { generate, type Generated } from "./generator.js";
import type { HoldGate } from "./holds.js";
import type { LiveCall, LiveCalls } from "./live-calls.js";
import type { TurnScript } from "./script.js";
import {
  CaptureError,
  type CaptureAdmission,
  type CommitCoords,
  type RolloutTokenCapture,
} from "./sdk-capture.js";
import { ChunkStream } from "./sse.js";
import type { TokenStore } from "./token-store.js";
import { maxTokensOf, type ChatCompletionReply, type ChatCompletionRequest } from "./wire.js";

/** The header naming an uncaptured call's rollout, for holds and scripts. */
export const ROLLOUT_HEADER = "x-ng-rollout";

/** What answering a completion needs. */
export interface CompletionDeps {
  readonly script: TurnScript;
  readonly holds: HoldGate;
  readonly log: CallLog;
  readonly live: LiveCalls;
  readonly capture: RolloutTokenCapture;
  readonly store: TokenStore;
  /** The policy version stamped on capture failures that have no active call. */
  readonly weightVersion: number;
}

/** One call being answered. */
interface Turn {
  readonly deps: CompletionDeps;
  readonly body: ChatCompletionRequest;
  readonly entry: CallEntry;
  readonly plan: ReplyPlan;
  readonly prompt: readonly number[];
  readonly hold: Promise<void> | null;
  readonly signal: AbortSignal;
  readonly id: string;
  readonly created: number;
  readonly model: string;
}

function sameIds(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((id, i) => id === b[i]);
}

/**
 * Answers one chat completion request. The call is logged on arrival (before any hold), and
 * matched against the hold rule then.
 *
 * Capture: a stream with `ng_capture` is refused with 422. A captured call whose capture cannot
 * begin (a staged record missing, a `beginCall` refusal), whose prompt does not extend the
 * authorized prefix, or whose cut prefix does not match this request's scripted reply, is still
 * answered, with `capture_failed` coordinates.
 */
export async function completeChat(
  deps: CompletionDeps,
  input: RouteInput<ChatCompletionRequest>,
): Promise<ChatCompletionReply | undefined> {
  const { body, req, res, signal } = input;
  const admission = body.ng_capture ?? null;
  const stream = body.stream === true;
  if (stream && admission !== null) {
    throw new DetailError(422, "worker-owned token capture does not support streaming requests");
  }
  const rollout = admission?.rollout_id ?? (req.get(ROLLOUT_HEADER) || input.rollout?.captureKey);
  const { entry, index, ordinal } = deps.log.arrive({
    rollout: rollout ?? null,
    model_call_id: admission?.model_call_id ?? null,
    n_messages: body.messages.length,
    stream,
    continued_from: admission?.generation_cut?.source_model_call_id ?? null,
  });
  const turn: Turn = {
    deps,
    body,
    entry,
    hold: deps.holds.eventFor({ index, ordinal }),
    plan: new ReplyPlan(
      deps.script.replyFor({
        rollout: rollout ?? null,
        roles: body.messages.map((message) => message.role),
        tools: body.tools ?? undefined,
      }),
    ),
    prompt: renderPrompt(body.messages),
    signal,
    id: `chatcmpl-${randomUUID().replaceAll("-", "")}`,
    created: Math.floor(Date.now() / 1000),
    model: body.model ?? "fake-inference",
  };
  try {
    if (stream) return await streamed(turn, res);
    if (admission === null) return reply(turn, await plain(turn), null);
    return await captured(turn, admission);
  } catch (error) {
    // A client that went away, or a shutdown: nobody is left to answer.
    if (signal.aborted) {
      res.destroy();
      return undefined;
    }
    throw error;
  }
}

/** Generates the turn's reply from token `from` within `limit` tokens. */
function run(
  turn: Turn,
  options: { from?: number; limit: number; onToken: (index: number) => void },
): Promise<Generated> {
  const { plan, hold, entry, signal } = turn;
  return generate({ plan, hold, entry, signal, holds: turn.deps.holds, ...options });
}

/** Generates the whole reply within the request's budget, capturing nothing. */
function plain(turn: Turn): Promise<Generated> {
  return run(turn, { limit: maxTokensOf(turn.body), onToken() {} });
}

async function streamed(turn: Turn, res: RouteInput<unknown>["res"]): Promise<undefined> {
  const out = new ChunkStream(res, { id: turn.id, created: turn.created, model: turn.model });
  out.open();
  const result = await run(turn, {
    limit: maxTokensOf(turn.body),
    onToken: (index) => out.token(turn.plan.effect(index)),
  });
  out.finish(settle(turn, result));
  return undefined;
}

async function captured(turn: Turn, admission: CaptureAdmission): Promise<ChatCompletionReply> {
  const { deps, entry } = turn;
  const start = await startCapture({ ...deps, admission });
  if (start.kind === "failed") {
    entry.capture = "capture_failed";
    entry.capture_error = start.reason;
    return reply(turn, await plain(turn), start.coords);
  }
  const { call } = start;
  const maxTokens = maxTokensOf(turn.body);
  let live: LiveCall = {
    call,
    enginePrompt: turn.prompt,
    generated: [],
    logprobs: [],
    effectiveOutputLimit: maxTokens,
    finishReason: null,
  };
  let from = 0;
  let limit = maxTokens;
  const cut = call.generationCut;
  if (cut !== null) {
    const reused = cut.token_ids_delta.filter((_, i) => cut.token_mask_delta[i] === 1);
    // The engine prompt a continuation runs on: this request's prompt plus the reused tokens.
    const enginePrompt = [...turn.prompt, ...turn.plan.tokens.slice(0, reused.length)];
    if (!sameIds(call.continuationPrompt ?? [], enginePrompt)) {
      // The prefix was generated for another prompt or reply: regenerate, capture nothing.
      entry.capture = "capture_failed";
      entry.capture_error = "generation_cut_diverged";
      const coords = deps.capture.failCall(
        call,
        "the generation-cut prefix does not fit the reply",
      );
      return reply(turn, await plain(turn), coords);
    }
    from = reused.length;
    limit = from + (call.remainingOutputLimit ?? 0);
    entry.reused_prefix_tokens = from;
    live = {
      ...live,
      enginePrompt,
      effectiveOutputLimit: admission.generation_cut?.effective_output_limit ?? maxTokens,
    };
  }
  const remove = deps.live.add(live);
  try {
    const result = await run(turn, {
      from,
      limit,
      onToken: (index) => {
        live.generated.push(turn.plan.tokens[index] as number);
        live.logprobs.push(turn.plan.logprobs[index] as number);
      },
    });
    live.finishReason = result.truncated ? "length" : "stop";
    return reply(turn, result, await stage(deps.capture, live, entry));
  } finally {
    if (!call.completed) deps.capture.failCall(call, "generation stopped before the reply");
    remove();
  }
}

/**
 * Stages a finished call. The record is built once first: `completeCall` answers
 * `capture_failed` without saying why, and the log entry should.
 */
async function stage(
  capture: RolloutTokenCapture,
  live: LiveCall,
  entry: CallEntry,
): Promise<CommitCoords> {
  const tokens = {
    promptTokenIds: live.enginePrompt,
    generatedTokenIds: live.generated,
    generatedLogprobs: live.logprobs,
  };
  try {
    capture.buildPrefixRecord(live.call, tokens);
  } catch (error) {
    if (!(error instanceof CaptureError)) throw error;
    entry.capture = "capture_failed";
    entry.capture_error = error.reason;
    return capture.failCall(live.call, error.message);
  }
  const coords = await capture.completeCall(live.call, tokens);
  entry.capture = coords.disposition;
  if (coords.disposition === "capture_failed") entry.capture_error = "staging_failed";
  return coords;
}

/** Marks the call answered; returns its finish reason. */
function settle(turn: Turn, result: Generated): "stop" | "length" | "tool_calls" {
  const reason = result.truncated
    ? "length"
    : turn.plan.message.toolCalls === undefined
      ? "stop"
      : "tool_calls";
  turn.entry.finish_reason = reason;
  turn.entry.returned = true;
  return reason;
}

function reply(turn: Turn, result: Generated, coords: CommitCoords | null): ChatCompletionReply {
  const finishReason = settle(turn, result);
  return {
    id: turn.id,
    object: "chat.completion",
    created: turn.created,
    model: turn.model,
    choices: [
      {
        index: 0,
        message: { role: "assistant", ...turn.plan.messageOf(result.count) },
        logprobs: null,
        finish_reason: finishReason,
      },
    ],
    usage: {
      prompt_tokens: turn.prompt.length,
      completion_tokens: result.count,
      total_tokens: turn.prompt.length + result.count,
    },
    ...(coords === null ? {} : { ng_commit_coords: coords }),
  };
}
