/**
 * The Simple Agent's `config:` settings and the session state it builds from a seed (see
 * docs/agent.md).
 *
 * @module
 */
import { z } from "zod";
import { AgentConfigSchema, type AgentSeedRequest } from "gym-participant-sdk";
import {
  ToolAccessSchema,
  type CookieJar,
  type DirectHttpToolAccess,
  type McpToolAccess,
  type ToolAccess,
} from "gym-participant-sdk/protocol";
import type { ObservationBundle } from "./trajectory.js";

/** The Simple Agent's settings: the agent base settings plus the turn loop's. */
export const SimpleAgentConfigSchema = AgentConfigSchema.extend({
  /** The policy model server (a server name of the deployment). */
  model_server: z.string().min(1),
  /** The resources server for legacy `/run`, session-less tool calls and metrics. */
  resources_server: z.string().min(1).nullable().default(null),
  /** Model calls per activation; null or 0: unbounded. */
  max_steps: z.int().min(0).nullable().default(null),
  /** False returns a session activation's tool calls unexecuted. */
  execute_tools: z.boolean().default(true),
  /** A legacy `/run` skips `/verify` and reports {@link skip_verification_reward}. */
  skip_verification: z.boolean().default(false),
  /** The reward of a legacy `/run` that skips verification. */
  skip_verification_reward: z.number().default(0),
  /** Configured tool grants; a seed's grants replace them by `name`. */
  tool_accesses: z.array(ToolAccessSchema).default([]),
  /** Send self-dispatched turn loops under the training-token-capture path segment. */
  token_id_capture: z.boolean().default(false),
  /** Collect a trajectory for activations made under a rollout prefix (observability on). */
  collect_trajectory: z.boolean().default(true),
}).meta({ id: "SimpleAgentConfig" });
/** The Simple Agent's validated settings. */
export type SimpleAgentConfig = z.infer<typeof SimpleAgentConfigSchema>;

/** What the Simple Agent keeps per seeded session (the seed request itself lives in the base). */
export interface SimpleSessionState {
  /** The session's single direct HTTP tool grant, or null. */
  readonly toolAccess: DirectHttpToolAccess | null;
  /**
   * The session's MCP grants (URL and headers only: each activation connects anew, so a
   * restored session needs nothing else).
   */
  readonly mcpGrants: readonly McpToolAccess[];
  /** The resources cookie jar; null when the session has no direct grant. */
  readonly resourcesCookies: CookieJar | null;
  /** Observations of the session's activations, or null until one collected a trajectory. */
  readonly observations: ObservationBundle | null;
}

/** The MCP transports the Simple Agent speaks: Streamable HTTP, by either name. */
const MCP_TRANSPORTS: ReadonlySet<string> = new Set(["streamable_http", "http"]);

/**
 * Builds a session's state from its seed request, as a seed and a restore both do. Throws a
 * plain `Error` (a server error, not a 409) for what the Simple Agent cannot serve: sandbox
 * access, an MCP grant over a transport other than Streamable HTTP, or more than one direct
 * HTTP grant.
 */
export function buildSessionState(
  request: AgentSeedRequest,
  configured: readonly ToolAccess[],
): SimpleSessionState {
  if (request.sandbox_access !== null) {
    throw new Error(
      `agent session ${request.agent_session_id}: the Simple Agent does not support sandbox_access`,
    );
  }
  // The seed's grants replace configured ones of the same name.
  const byName = new Map<string, ToolAccess>();
  for (const access of configured) byName.set(access.name, access);
  for (const access of request.tool_accesses) byName.set(access.name, access);
  const grants = [...byName.values()];
  const mcp = grants.filter((access): access is McpToolAccess => access.kind === "mcp");
  const unspoken = mcp.filter((access) => !MCP_TRANSPORTS.has(access.connection.transport));
  if (unspoken.length > 0) {
    throw new Error(
      `agent session ${request.agent_session_id}: the Simple Agent speaks MCP over Streamable HTTP only (transport streamable_http or http), not [${unspoken.map((a) => `${a.name}: ${a.connection.transport}`).join(", ")}]`,
    );
  }
  const direct = grants.filter(
    (access): access is DirectHttpToolAccess => access.kind === "direct_http",
  );
  if (direct.length > 1) {
    throw new Error(
      `agent session ${request.agent_session_id}: the Simple Agent takes at most one direct HTTP grant, got [${direct.map((a) => a.name).join(", ")}]`,
    );
  }
  const grant = direct[0] ?? null;
  return {
    toolAccess: grant,
    mcpGrants: mcp,
    resourcesCookies: grant === null ? null : { ...(grant.cookies ?? {}) },
    observations: null,
  };
}
