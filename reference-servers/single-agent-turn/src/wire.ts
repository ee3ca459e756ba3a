/**
 * The shapes `single_agent_turn` reads and writes: its
 * settings, the task input, the session handles and stage boundaries it records, and the replies
 * of the resources server and the agent it validates.
 */
import { z } from "zod";
import {
  EnvironmentConfigSchema,
  JsonPayloadSchema,
  RunRequestSchema,
  TaskIdSchema,
  type JsonValue,
} from "gym-participant-sdk";
import { ResponsesCreateRequestSchema } from "gym-participant-sdk/protocol";

/** A JSON object (replies arrive parsed from JSON, so they are JSON by construction). */
export type JsonObject = { [key: string]: JsonValue };

/** A cookie jar: name → value. */
const CookieJarSchema = z.record(z.string(), z.string());

/** How the tools of the resources server are granted to the agent. */
export const TOOL_TRANSPORTS = ["direct_http", "mcp"] as const;

/**
 * The settings of a `single_agent_turn` server: the base environment
 * settings plus the two servers it drives, named as in the deployment (`*_server` keys name a
 * server of the deployment).
 */
export const SingleAgentTurnConfigSchema = EnvironmentConfigSchema.extend({
  /** The resources server that seeds, verifies and closes each episode's session. */
  resources_server: z.string().min(1),
  /** The agent server that runs the episode's one turn. */
  agent_server: z.string().min(1),
  /** How the agent reaches the resources server's tools. @default [] (no tools) */
  resources_tool_transports: z.array(z.enum(TOOL_TRANSPORTS)).default([]),
}).meta({ id: "SingleAgentTurnConfig" });
/** The settings of a `single_agent_turn` server. */
export type SingleAgentTurnConfig = z.infer<typeof SingleAgentTurnConfigSchema>;

/** `task.task_input` of a `/run`. */
export const TaskInputSchema = z
  .strictObject({
    /** Sent to the agent as the activation body, verbatim. */
    responses_create_params: ResponsesCreateRequestSchema,
    /** The benchmark fields, sent to the resources server's seed and verify. */
    task_data: z.record(z.string(), JsonPayloadSchema),
  })
  .meta({ id: "SingleAgentTurnTaskInput" });
/** A `single_agent_turn` task input. */
export type TaskInput = z.infer<typeof TaskInputSchema>;

/** The `/run` request of `single_agent_turn`: the base request with its task input checked. */
export const SingleAgentTurnRunRequestSchema = RunRequestSchema.extend({
  task: z.strictObject({ task_id: TaskIdSchema, task_input: TaskInputSchema }),
}).meta({ id: "SingleAgentTurnRunRequest" });

/**
 * The sessions an episode holds, part of every boundary so a restored
 * episode closes and verifies the very sessions its first attempt opened.
 */
export const SessionHandlesSchema = z.strictObject({
  /** Caller-assigned before any call, so a lost seed reply never hides what to close. */
  resources_session_id: z.string().min(1),
  resources_cookies: CookieJarSchema.default({}),
  agent_session_id: z.string().min(1),
  agent_cookies: CookieJarSchema.default({}),
  /** The verify mode the resources server declared on its seed reply. */
  resources_verify: z.enum(["wait", "replay"]).default("wait"),
});
/** The session handles of an episode. */
export type SessionHandles = z.infer<typeof SessionHandlesSchema>;

/** The stages, in order. */
export const STAGES = ["seed", "invoke_agent", "close_agent", "verify", "return"] as const;
/** One stage. */
export type Stage = (typeof STAGES)[number];

const JsonObjectSchema = z.record(z.string(), JsonPayloadSchema);

/** A recorded boundary: the stage to run next and everything it needs. */
export const StageBoundarySchema = z.discriminatedUnion("next", [
  z.strictObject({ next: z.literal("seed"), handles: SessionHandlesSchema }),
  z.strictObject({ next: z.literal("invoke_agent"), handles: SessionHandlesSchema }),
  z.strictObject({
    next: z.literal("close_agent"),
    handles: SessionHandlesSchema,
    response: JsonObjectSchema,
  }),
  z.strictObject({
    next: z.literal("verify"),
    handles: SessionHandlesSchema,
    response: JsonObjectSchema,
    observations: JsonPayloadSchema,
  }),
  z.strictObject({
    next: z.literal("return"),
    handles: SessionHandlesSchema,
    result: JsonObjectSchema,
    observations: JsonPayloadSchema,
  }),
]);
/** A recorded boundary. */
export type StageBoundary = z.infer<typeof StageBoundarySchema>;

/** `resources_tools` of a seed reply: where the resources server serves its tools over MCP. */
const ResourcesToolsSchema = z.looseObject({
  server_name: z.string().min(1),
  url_path: z.string().default("/mcp"),
  transport: z.string().default("http"),
  headers: z.record(z.string(), z.string()).default({}),
});

/** The resources server's `/seed_session` reply body. */
export const ResourcesSeedReplySchema = z.looseObject({
  resources_session_id: z.string(),
  resources_tools: ResourcesToolsSchema.nullish(),
  sandbox_access: z.record(z.string(), JsonPayloadSchema).nullish(),
});

/** The resources server's `/verify` reply: the result, kept whole. */
export const VerifyReplySchema = z.looseObject({ reward: z.number() });

/** The agent's seed reply. */
export const AgentSeedReplySchema = z.looseObject({ agent_session_id: z.string() });

/** An activation reply: a Responses-API response (`status: "failed"` is still one). */
export const ActivationReplySchema = z.looseObject({ output: z.array(z.unknown()) });

/** The agent's close reply. */
export const AgentCloseReplySchema = z.looseObject({
  agent_session_id: z.string(),
  agent_observations: JsonPayloadSchema.optional(),
  resources_cookies: CookieJarSchema.nullish(),
});
