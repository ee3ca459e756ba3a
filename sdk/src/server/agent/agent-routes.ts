/**
 * The routes of an agent server, as data: what each serves, validates and can answer.
 *
 * @module
 */
import { z } from "zod";
import {
  AgentCloseReplySchema,
  AgentCloseRequestSchema,
  AgentRunReplySchema,
  AgentRunRequestSchema,
  AgentSeedReplySchema,
  AgentSeedRequestSchema,
  ResponsesCreateRequestSchema,
  ResponsesReplySchema,
  type AgentCloseReply,
  type AgentCloseRequest,
  type AgentRunRequest,
  type AgentSeedReply,
  type AgentSeedRequest,
  type ResponsesCreateRequest,
} from "../../wire/agent.js";
import { dataRoute, documentedReply, type DataRoute, type RouteInput } from "../data-route.js";
import { AggregateMetricsReplySchema } from "../resources/aggregate-metrics.js";

/** The handlers behind an agent's routes; a null optional handler leaves its route out. */
export interface AgentRouteHandlers {
  seed(input: RouteInput<AgentSeedRequest>): Promise<AgentSeedReply>;
  close(input: RouteInput<AgentCloseRequest>): Promise<AgentCloseReply>;
  responses(input: RouteInput<ResponsesCreateRequest>): Promise<unknown>;
  readonly run: ((input: RouteInput<AgentRunRequest>) => Promise<unknown>) | null;
  readonly aggregateMetrics: ((input: RouteInput<unknown>) => unknown) | null;
  /** What `/run` answers, as documented. @default {@link AgentRunReplySchema} */
  readonly runReply?: z.ZodType;
  /** What `/aggregate_metrics` answers, as documented. @default {@link AggregateMetricsReplySchema} */
  readonly aggregateMetricsReply?: z.ZodType;
}

/** The agent's data routes over `handlers`. */
export function agentRoutes(handlers: AgentRouteHandlers): DataRoute[] {
  const routes: DataRoute[] = [
    dataRoute({
      method: "post",
      path: "/v1/agent_sessions",
      summary: "Seed an agent session",
      request: AgentSeedRequestSchema,
      reply: AgentSeedReplySchema,
      errors: ["stale_attempt"],
      tag: "agent",
      handler: (input) => handlers.seed(input),
    }),
    dataRoute({
      method: "post",
      path: "/v1/agent_sessions/close",
      summary: "Close an agent session (idempotent receipt)",
      request: AgentCloseRequestSchema,
      reply: AgentCloseReplySchema,
      errors: ["stale_attempt"],
      tag: "agent",
      handler: (input) => handlers.close(input),
    }),
    dataRoute({
      method: "post",
      path: "/v1/responses",
      summary: "Activate a session (with its cookie) or make a direct call",
      description:
        "Also served under /ng-rollout/{capture_key}/ and /ng-rollout/{capture_key}/training-token-capture/. " +
        "With checkpointing on, a session activation needs the prefix; send x-ng-agent-activation to make it idempotent.",
      request: ResponsesCreateRequestSchema,
      reply: documentedReply(ResponsesReplySchema),
      errors: [
        "rollout_id_required",
        "stale_attempt",
        "activation_out_of_order",
        "checkpoint_error",
        "upstream_unreachable",
        "upstream_error",
      ],
      rolloutPrefixed: true,
      // With checkpointing on, every activation and direct call needs its rollout's prefix.
      rolloutRequired: true,
      tag: "agent",
      handler: (input) => handlers.responses(input),
    }),
  ];
  const run = handlers.run;
  if (run !== null) {
    routes.push(
      dataRoute({
        method: "post",
        path: "/run",
        summary: "Run a whole episode (legacy)",
        request: AgentRunRequestSchema,
        reply: documentedReply(handlers.runReply ?? AgentRunReplySchema),
        errors: [
          "rollout_id_required",
          "invalid_rollout_id",
          "stale_attempt",
          "admission_closed",
          "upstream_unreachable",
          "upstream_error",
        ],
        tag: "agent",
        handler: (input) => run(input),
      }),
    );
  }
  const aggregate = handlers.aggregateMetrics;
  if (aggregate !== null) {
    routes.push(
      dataRoute({
        method: "post",
        path: "/aggregate_metrics",
        summary: "Aggregate metrics",
        request: z.unknown(),
        reply: documentedReply(handlers.aggregateMetricsReply ?? AggregateMetricsReplySchema),
        errors: ["upstream_unreachable", "upstream_error"],
        handler: (input) => aggregate(input),
      }),
    );
  }
  return routes;
}
