/**
 * The wire shapes of an agent server's data routes (see docs/agent.md): the session seed and
 * close, the Responses-style activation body, the legacy `/run` body.
 *
 * @module
 */
import { z } from "zod";
import { EpisodeIdSchema, episodeIdFromWire } from "../identity/episode-id.js";
import { hasOnlyKeys, isPlainRecord, shapeKeys } from "../util/plain-record.js";

/** The header carrying an activation's 1-based index within its session. */
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

/** The longest agent session ID accepted: it travels in the session cookie, on every reply. */
export const MAX_AGENT_SESSION_ID_LENGTH = 1024;

/**
 * The most bytes an agent session ID may take as escaped JSON in UTF-8, as the cookie carries it:
 * 1,024 control or astral characters escape to up to 6 KB, a cookie proxies refuse.
 */
const MAX_AGENT_SESSION_ID_BYTES = 2048;

/**
 * A caller-assigned agent session ID: 1 to {@link MAX_AGENT_SESSION_ID_LENGTH} characters and at
 * most 2,048 bytes once escaped.
 */
const AgentSessionIdSchema = z
  .string()
  .min(1)
  .max(
    MAX_AGENT_SESSION_ID_LENGTH,
    `an agent session ID is at most ${MAX_AGENT_SESSION_ID_LENGTH} characters (it travels in the session cookie)`,
  )
  .refine(
    (id) => Buffer.byteLength(JSON.stringify(id)) - 2 <= MAX_AGENT_SESSION_ID_BYTES,
    `an agent session ID is at most ${MAX_AGENT_SESSION_ID_BYTES} bytes as escaped JSON (it travels in the session cookie)`,
  );

/** `POST /v1/agent_sessions`: seed a session. */
export const AgentSeedRequestSchema = z
  .strictObject({
    agent_session_id: AgentSessionIdSchema,
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
  .meta({
    id: "AgentSeedRequest",
    example: {
      agent_session_id: "s1",
      episode_id: { rollout_id: "task-3", attempt: 0 },
      task_id: { taskset: "demo", task_id: "3" },
    },
  });
/** A session seed request. */
export type AgentSeedRequest = z.infer<typeof AgentSeedRequestSchema>;

/** The seed reply. */
export const AgentSeedReplySchema = z
  .strictObject({ agent_session_id: z.string() })
  .meta({ id: "AgentSeedReply", example: { agent_session_id: "s1" } });
/** The seed reply. */
export type AgentSeedReply = z.infer<typeof AgentSeedReplySchema>;

/** `POST /v1/agent_sessions/close`: close a session. */
export const AgentCloseRequestSchema = z
  .strictObject({ agent_session_id: AgentSessionIdSchema, episode_id: EpisodeIdSchema })
  .meta({
    id: "AgentCloseRequest",
    example: { agent_session_id: "s1", episode_id: { rollout_id: "task-3", attempt: 0 } },
  });
/** A close request. */
export type AgentCloseRequest = z.infer<typeof AgentCloseRequestSchema>;

/** The close reply: the session's observations and final resources cookies. */
export const AgentCloseReplySchema = z
  .strictObject({
    agent_session_id: z.string(),
    agent_observations: z.unknown().nullable(),
    resources_cookies: z.record(z.string(), z.string()).nullable(),
  })
  .meta({
    id: "AgentCloseReply",
    example: { agent_session_id: "s1", agent_observations: null, resources_cookies: null },
  });
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
  .meta({ id: "ResponsesCreateRequest", example: { input: "What is 6 times 7?" } });
/** A Responses create request. */
export type ResponsesCreateRequest = z.infer<typeof ResponsesCreateRequestSchema>;

/**
 * The `/v1/responses` reply: a Responses-style object (`object`, `status`, `output`, ...), as
 * the agent's `respond` built it (an agent may add fields).
 */
export const ResponsesReplySchema = z
  .looseObject({
    object: z.string().optional(),
    status: z.string().optional(),
    output: z.array(z.unknown()).optional(),
  })
  .meta({
    id: "ResponsesReply",
    example: {
      object: "response",
      status: "completed",
      output: [
        { type: "message", role: "assistant", content: [{ type: "output_text", text: "42" }] },
      ],
    },
  });

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
 * The legacy `/run` reply: the verify response of the episode (at least `reward`), with whatever
 * other fields the verifier and the agent add.
 */
export const AgentRunReplySchema = z.looseObject({ reward: z.number() }).meta({
  id: "AgentRunReply",
  description: "The verify response of the episode: at least `reward`; other fields are kept.",
  example: { reward: 1, mask_sample: false, failure_kind: null, failure_reason: null },
});

/**
 * Parses an `x-ng-agent-activation` value: a positive decimal integer, or null when invalid.
 */
export function parseActivationIndex(value: string): number | null {
  if (!/^[0-9]+$/.test(value.trim())) return null;
  const n = Number(value.trim());
  return Number.isSafeInteger(n) && n >= 1 ? n : null;
}

const SEED_KEYS = shapeKeys(AgentSeedRequestSchema);
const DIRECT_HTTP_KEYS = shapeKeys(DirectHttpToolAccessSchema);
const TASK_KEYS = shapeKeys(AgentSeedRequestSchema.shape.task_id);
/**
 * Whether `value` holds an own `__proto__` key (JSON may): zod's records drop it, so such a
 * value is left to the schema, which alone decides what it becomes.
 */
function hasProtoKey(value: Record<string, unknown>): boolean {
  return Object.hasOwn(value, "__proto__");
}

/** A copy of a string-to-string record, or undefined when `value` is not one. */
function stringRecord(value: unknown): Record<string, string> | undefined {
  if (!isPlainRecord(value) || hasProtoKey(value)) return undefined;
  for (const key of Object.keys(value)) if (typeof value[key] !== "string") return undefined;
  return { ...(value as Record<string, string>) };
}

/** A direct HTTP grant as its schema parses it, or null (an MCP grant included). */
function directHttpAccess(value: unknown): DirectHttpToolAccess | null {
  if (
    !isPlainRecord(value) ||
    value.kind !== "direct_http" ||
    !hasOnlyKeys(value, DIRECT_HTTP_KEYS)
  ) {
    return null;
  }
  const { name, base_url: baseUrl } = value;
  const required = value.required === undefined ? true : value.required;
  if (typeof name !== "string" || name.length === 0 || typeof required !== "boolean") return null;
  if (typeof baseUrl !== "string" || baseUrl.length === 0) return null;
  const cookies =
    value.cookies === undefined || value.cookies === null ? null : stringRecord(value.cookies);
  const headers = value.headers === undefined ? {} : stringRecord(value.headers);
  if (cookies === undefined || headers === undefined) return null;
  return { kind: "direct_http", name, required, base_url: baseUrl, cookies, headers };
}

/**
 * The {@link AgentSeedRequest} {@link AgentSeedRequestSchema} would parse `value` into, checked
 * by hand (a property test holds the two equal); null when `value` breaks a rule or holds what
 * the hand check leaves to the schema (an MCP grant), so the schema decides and names the problem.
 *
 * Why: a restore rebuilds thousands of stored seed requests in a fresh process, where zod walks
 * each one's union of grants cold (~95 ms per 8,000).
 */
export function agentSeedRequestFromWire(value: unknown): AgentSeedRequest | null {
  if (!isPlainRecord(value) || !hasOnlyKeys(value, SEED_KEYS)) return null;
  const sessionId = value.agent_session_id;
  if (typeof sessionId !== "string" || sessionId.length === 0) return null;
  const episode = episodeIdFromWire(value.episode_id);
  if (episode === null) return null;
  const task = value.task_id;
  if (!isPlainRecord(task) || !hasOnlyKeys(task, TASK_KEYS)) return null;
  if (typeof task.taskset !== "string" || typeof task.task_id !== "string") return null;
  const grants = value.tool_accesses === undefined ? [] : value.tool_accesses;
  if (!Array.isArray(grants)) return null;
  const accesses: ToolAccess[] = [];
  const names = new Set<string>();
  for (const grant of grants) {
    const access = directHttpAccess(grant);
    if (access === null || names.has(access.name)) return null;
    names.add(access.name);
    accesses.push(access);
  }
  const sandbox = value.sandbox_access ?? null;
  if (sandbox !== null && (!isPlainRecord(sandbox) || hasProtoKey(sandbox))) return null;
  return {
    agent_session_id: sessionId,
    episode_id: episode,
    task_id: { taskset: task.taskset, task_id: task.task_id },
    tool_accesses: accesses,
    sandbox_access: sandbox === null ? null : { ...sandbox },
  };
}
