/**
 * The resources server's wire shapes: the native `/seed_session` and `/close_session` bodies
 * and the base `/verify` body.
 *
 * @module
 */
import { z } from "zod";
import { EpisodeIdSchema } from "../identity/episode-id.js";

/** A native seed, as the examples of the seed schemas show it. */
function nativeSeedExample() {
  return {
    resources_session_id: "s1",
    episode_id: { rollout_id: "task-3", attempt: 0 },
    task_id: { taskset: "demo", task_id: "3" },
    task_data: {},
  };
}

/**
 * The default `/seed_session` body: any JSON value (a server narrows it with
 * `ResourcesServer.seedRequest`); the example is a native seed.
 */
export const AnySeedRequestSchema = z.unknown().meta({
  description: "Any JSON value; a native seed is a `ResourcesSeedSessionRequest`.",
  example: nativeSeedExample(),
});

/** The native `/seed_session` body. */
export const ResourcesSeedSessionRequestSchema = z
  .strictObject({
    resources_session_id: z.string().min(1),
    episode_id: EpisodeIdSchema,
    task_id: z.strictObject({ taskset: z.string().min(1), task_id: z.string().min(1) }),
    task_data: z.record(z.string(), z.unknown()),
  })
  .meta({ id: "ResourcesSeedSessionRequest", example: nativeSeedExample() });
/** The native `/seed_session` body. */
export type ResourcesSeedSessionRequest = z.infer<typeof ResourcesSeedSessionRequestSchema>;

/** The `/close_session` body (servers may widen it). */
export const ResourcesCloseSessionRequestSchema = z
  .looseObject({
    resources_session_id: z.string().optional(),
    episode_id: EpisodeIdSchema.optional(),
  })
  .meta({ id: "ResourcesCloseSessionRequest", example: { resources_session_id: "s1" } });
/** The `/close_session` body. */
export type ResourcesCloseSessionRequest = z.infer<typeof ResourcesCloseSessionRequestSchema>;

/** The base `/verify` body: any JSON object; servers narrow it with `ResourcesServer.verifyRequest`. */
export const VerifyRequestSchema = z.looseObject({}).meta({ id: "VerifyRequest" });

/**
 * The `/seed_session` reply: a native seed is answered with its session's ID (and the tools and
 * sandbox it set up, when any); a legacy seed with `{}`. Servers may add fields.
 */
export const ResourcesSeedSessionReplySchema = z
  .looseObject({
    resources_session_id: z.string().optional(),
    resources_tools: z.unknown().optional(),
    sandbox_access: z.unknown().optional(),
  })
  .meta({ id: "ResourcesSeedSessionReply", example: { resources_session_id: "s1" } });

/** The `/close_session` reply: the closed session's ID (null when the body named none). */
export const ResourcesCloseSessionReplySchema = z
  .looseObject({ resources_session_id: z.string().nullable().optional() })
  .meta({ id: "ResourcesCloseSessionReply", example: { resources_session_id: "s1" } });

/**
 * The `/verify` reply: the request's fields, then the verifier's reward and its defaults
 * (`mask_sample` false, `failure_kind` and `failure_reason` null).
 */
export const VerifyReplySchema = z
  .looseObject({
    reward: z.number(),
    mask_sample: z.boolean(),
    failure_kind: z.string().nullable(),
    failure_reason: z.string().nullable(),
  })
  .meta({
    id: "VerifyReply",
    example: { reward: 1, mask_sample: false, failure_kind: null, failure_reason: null },
  });
/** A `/verify` reply. */
export type VerifyReply = z.infer<typeof VerifyReplySchema>;

/**
 * One JSON-RPC message posted to a resources server's `/mcp` (MCP Streamable HTTP): a request
 * such as `tools/list` or `tools/call`, or a notification (no `id`).
 */
export const McpMessageSchema = z
  .looseObject({
    jsonrpc: z.literal("2.0"),
    id: z.union([z.string(), z.int()]).optional(),
    method: z.string(),
    params: z.record(z.string(), z.unknown()).optional(),
  })
  .meta({
    id: "McpMessage",
    example: {
      jsonrpc: "2.0",
      id: 1,
      method: "tools/call",
      params: { name: "increment_counter", arguments: { count: 2 } },
    },
  });

/** The JSON-RPC reply of `/mcp`: a result, or a JSON-RPC error. */
export const McpReplySchema = z
  .looseObject({
    jsonrpc: z.literal("2.0"),
    id: z.union([z.string(), z.int()]).nullable(),
    result: z.record(z.string(), z.unknown()).optional(),
    error: z.looseObject({ code: z.int(), message: z.string() }).optional(),
  })
  .meta({
    id: "McpReply",
    example: {
      jsonrpc: "2.0",
      id: 1,
      result: { content: [{ type: "text", text: '{"success":true}' }] },
    },
  });
