/**
 * The chat completions request this backend reads (the OpenAI shape, unknown fields kept), plus
 * the worker wire key `ng_capture` (see docs/policy-model.md).
 *
 * @module
 */
import { z } from "zod";
import { CaptureAdmissionSchema, CommitCoordsSchema } from "./sdk-capture.js";

/** The output budget of a call that names none. */
export const DEFAULT_MAX_TOKENS = 256;

const ChatMessageSchema = z.looseObject({
  role: z.string().min(1),
  content: z
    .union([z.string(), z.array(z.unknown())])
    .nullable()
    .optional(),
  tool_calls: z
    .array(
      z.looseObject({
        function: z.looseObject({ name: z.string(), arguments: z.unknown().optional() }),
      }),
    )
    .nullable()
    .optional(),
});

/** `POST /v1/chat/completions`. */
export const ChatCompletionRequestSchema = z
  .looseObject({
    model: z.string().optional(),
    messages: z.array(ChatMessageSchema).min(1),
    tools: z.array(z.unknown()).nullable().optional(),
    max_tokens: z.int().min(1).nullable().optional(),
    max_completion_tokens: z.int().min(1).nullable().optional(),
    stream: z.boolean().nullable().optional(),
    /** The gate's capture admission: capture this call's tokens. */
    ng_capture: CaptureAdmissionSchema.nullable().optional(),
  })
  .meta({ id: "FakeChatCompletionRequest" });
/** A chat completions request. */
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequestSchema>;

/** The output budget of a request: `max_completion_tokens`, else `max_tokens`, else 256. */
export function maxTokensOf(request: ChatCompletionRequest): number {
  return request.max_completion_tokens ?? request.max_tokens ?? DEFAULT_MAX_TOKENS;
}

/**
 * The `POST /v1/chat/completions` reply (without `stream`): one choice, and `ng_commit_coords`
 * when the call was captured.
 */
export const ChatCompletionReplySchema = z
  .strictObject({
    id: z.string(),
    object: z.literal("chat.completion"),
    created: z.int(),
    model: z.string(),
    choices: z.array(
      z.strictObject({
        index: z.int(),
        message: z.strictObject({
          role: z.literal("assistant"),
          content: z.string().nullable(),
          tool_calls: z.array(z.unknown()).optional(),
        }),
        logprobs: z.null(),
        finish_reason: z.enum(["stop", "length", "tool_calls"]),
      }),
    ),
    usage: z.strictObject({
      prompt_tokens: z.int(),
      completion_tokens: z.int(),
      total_tokens: z.int(),
    }),
    /** Where the worker staged the call's tokens (a captured call only). */
    ng_commit_coords: CommitCoordsSchema.optional(),
  })
  .meta({ id: "FakeChatCompletionReply" });
/** A chat completions reply. */
export type ChatCompletionReply = z.infer<typeof ChatCompletionReplySchema>;
