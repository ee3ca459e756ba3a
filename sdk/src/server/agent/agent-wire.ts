/**
 * The wire shapes of an agent server's data routes (spec agent §3): the session seed and
 * close, the Responses-style activation body, the legacy `/run` body.
 *
 * @module
 */
import { z } from "zod";
import { EpisodeIdSchema } from "../../identity/episode-id.js";

/** The header carrying an activation's 1-based index within its session (spec agent §6). */
export const ACTIVATION_HEADER = "x-ng-agent-activation";

/** A grant to call the resources server's tools over plain HTTP. */
export const DirectHttpToolAccessSchema = z
  .strictObject({
    kind: z.literal("direct_http"),
    name: z.string().min(1),
    required: z.boolean().default(true),
    /** The resources server's base URL; may end with the seeding attempt's rollout prefix. */
    base_url: z.string().min(1),
    /** The resources session's cookies. */
    cookies: z.record(z.string(), z.string()).nullable().default(null),
    /** Extra headers for every call. */
    headers: z.record(z.string(), z.string()).default({}),
  })
  .meta({ id: "DirectHttpToolAccess" });
/** A direct HTTP tool grant. */
export type DirectHttpToolAccess = z.infer<typeof DirectHttpToolAccessSchema>;

/** A grant to an MCP server. */
export const McpToolAccessSchema = z
  .strictObject({
    kind: z.literal("mcp"),
    name: z.string().min(1),
    required: z.boolean().default(true),
    connection: z.looseObject({
      transport: z.string(),
      url: z.string(),
      headers: z.record(z.string(), z.string()).default({}),
    }),
  })
  .meta({ id: "McpToolAccess" });
/** An MCP tool grant. */
export type McpToolAccess = z.infer<typeof McpToolAccessSchema>;

/** One tool access grant. */
export const ToolAccessSchema = z.discriminatedUnion("kind", [
  DirectHttpToolAccessSchema,
  McpToolAccessSchema,
]);
/** One tool access grant. */
export type ToolAccess = z.infer<typeof ToolAccessSchema>;

/** `POST /v1/agent_sessions` (spec agent §3.1). */
export const AgentSeedRequestSchema = z
  .strictObject({
    agent_session_id: z.string().min(1),
    episode_id: EpisodeIdSchema,
    task_id: z.strictObject({ taskset: z.string(), task_id: z.string() }),
    tool_accesses: z
      .array(ToolAccessSchema)
      .default([])
      .superRefine((accesses, ctx) => {
        const seen = new Set<string>();
        for (const [i, access] of accesses.entries()) {
          if (seen.has(access.name)) {
            ctx.addIssue({
              code: "custom",
              path: [i, "name"],
              message: `tool access name ${JSON.stringify(access.name)} is used twice; names must be unique`,
            });
          }
          seen.add(access.name);
        }
      }),
    sandbox_access: z.record(z.string(), z.unknown()).nullable().default(null),
  })
  .meta({ id: "AgentSeedRequest" });
/** A session seed request. */
export type AgentSeedRequest = z.infer<typeof AgentSeedRequestSchema>;

/** The seed reply. */
export const AgentSeedReplySchema = z
  .strictObject({ agent_session_id: z.string() })
  .meta({ id: "AgentSeedReply" });

/** `POST /v1/agent_sessions/close` (spec agent §3.3). */
export const AgentCloseRequestSchema = z
  .strictObject({ agent_session_id: z.string().min(1), episode_id: EpisodeIdSchema })
  .meta({ id: "AgentCloseRequest" });
/** A close request. */
export type AgentCloseRequest = z.infer<typeof AgentCloseRequestSchema>;

/** The close reply: the session's observations and final resources cookies. */
export const AgentCloseReplySchema = z
  .strictObject({
    agent_session_id: z.string(),
    agent_observations: z.unknown().nullable(),
    resources_cookies: z.record(z.string(), z.string()).nullable(),
  })
  .meta({ id: "AgentCloseReply" });
/** A close receipt. */
export interface AgentCloseReply {
  readonly agent_session_id: string;
  readonly agent_observations: unknown;
  readonly resources_cookies: Record<string, string> | null;
}

/** An OpenAI-Responses-style create request; unknown fields pass through to the model. */
export const ResponsesCreateRequestSchema = z
  .looseObject({
    input: z.union([z.string(), z.array(z.unknown())]),
    model: z.string().optional(),
    tools: z.array(z.unknown()).optional(),
  })
  .meta({ id: "ResponsesCreateRequest" });
/** A Responses create request. */
export type ResponsesCreateRequest = z.infer<typeof ResponsesCreateRequestSchema>;

/** The legacy `/run` body: `responses_create_params` plus any fields the verifier reads. */
export const AgentRunRequestSchema = z
  .looseObject({
    responses_create_params: ResponsesCreateRequestSchema,
    _ng_rollout_id: z.unknown().optional(),
    _ng_task_index: z.unknown().optional(),
    _ng_rollout_index: z.unknown().optional(),
    _ng_attempt_index: z.unknown().optional(),
  })
  .meta({ id: "AgentRunRequest" });
/** A legacy `/run` body. */
export type AgentRunRequest = z.infer<typeof AgentRunRequestSchema>;

/**
 * Parses an `x-ng-agent-activation` value: a positive decimal integer, or null when invalid.
 */
export function parseActivationIndex(value: string): number | null {
  if (!/^[0-9]+$/.test(value.trim())) return null;
  const n = Number(value.trim());
  return Number.isSafeInteger(n) && n >= 1 ? n : null;
}
