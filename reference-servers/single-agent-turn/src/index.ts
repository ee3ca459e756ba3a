/**
 * `single_agent_turn`: the reference environment server. Each `/run` seeds a resources session,
 * lets one agent session answer the task in one activation, closes the agent, has the resources
 * server verify the answer, and returns its verdict; every stage starts with a boundary, so a
 * checkpoint can continue an episode from any of them (see docs/environment-server.md).
 */
import { z } from "zod";
import {
  AggregateMetricsReplySchema,
  AggregateMetricsRequestSchema,
} from "gym-participant-sdk/protocol";
import {
  ConfigError,
  EnvironmentServer,
  dataRoute,
  isMainModule,
  serveMain,
  type DataRoute,
  type EpisodeOutcome,
  type RunEpisodeInput,
  type ServerOptions,
} from "gym-participant-sdk";
import { SingleAgentTurnEpisode } from "./episode.js";
import {
  SingleAgentTurnConfigSchema,
  SingleAgentTurnRunRequestSchema,
  type SingleAgentTurnConfig,
} from "./wire.js";

export {
  SessionHandlesSchema,
  SingleAgentTurnConfigSchema,
  SingleAgentTurnRunRequestSchema,
  StageBoundarySchema,
  STAGES,
  TaskInputSchema,
} from "./wire.js";
export type {
  SessionHandles,
  SingleAgentTurnConfig,
  Stage,
  StageBoundary,
  TaskInput,
} from "./wire.js";

/**
 * The `single_agent_turn` environment server.
 *
 * ## Stages
 * `seed` (replay: resources seed, agent seed) → `invoke_agent` (replay: the one activation,
 * sent with `x-ng-agent-activation: 1`) → `close_agent` (wait: the agent's observations and final
 * resources cookies) → `verify` (the mode the resources server declared on its seed reply, kept
 * in the session handles; a replayable verify sends `x-ng-checkpoint-close-follows: 1`) →
 * `return`. A restored episode continues at the recorded stage with the recorded sessions.
 *
 * ## Rules
 * - Every resources and agent call goes through the deployment's client for the episode's
 *   capture key (under `/ng-rollout/<key>` with checkpointing on).
 * - Final cleanup closes the agent session, then the resources session; a seed reply carrying
 *   `x-ng-checkpoint-restart: 1`, or an MCP tool grant, makes the episode a restart.
 * - An agent failure closes the agent session at once, so the failure keeps its observations.
 *
 * @example
 * // deployment.yaml
 * // servers:
 * //   env:
 * //     kind: environment
 * //     entrypoint: ./single-agent-turn
 * //     config: { cleanup_timeout_seconds: 30, resources_server: counter, agent_server: agent }
 * @see docs/environment-server.md
 */
export default class SingleAgentTurnServer extends EnvironmentServer<SingleAgentTurnConfig> {
  static override checkpointBoundaries = true;
  /** The protocol's own task input is checked with the request, so a bad one is a 422. */
  override readonly runRequest = SingleAgentTurnRunRequestSchema;

  constructor(options: ServerOptions) {
    super(options);
    if (this.checkpointEnabled && this.deployment.checkpoint?.enabled !== true) {
      // The client prefixes calls only when the deployment says checkpointing is on; without
      // the prefix the resources server could not bind the episode's session to it.
      throw new ConfigError(
        `server ${this.name}: checkpointing is on but the deployment's checkpoint block does not enable it`,
      );
    }
  }

  /** The validated settings. */
  get settings(): SingleAgentTurnConfig {
    return this.config;
  }

  protected override configSchema(): z.ZodType<SingleAgentTurnConfig> {
    return SingleAgentTurnConfigSchema.superRefine((config, ctx) => {
      for (const key of ["resources_server", "agent_server"] as const) {
        if (!Object.hasOwn(this.deployment.servers, config[key])) {
          ctx.addIssue({
            code: "custom",
            path: [key],
            message: `names server '${config[key]}', which the deployment does not define`,
          });
        }
      }
    });
  }

  protected override extraRoutes(): readonly DataRoute[] {
    return [
      dataRoute({
        method: "post",
        path: "/aggregate_metrics",
        summary: "Aggregate verify results (forwarded to the resources server)",
        // The resources server's own shapes: the body is checked here, so a bad one is the
        // caller's 422, not a 502 relayed from the resources server; the reply is relayed as is.
        request: AggregateMetricsRequestSchema,
        reply: AggregateMetricsReplySchema,
        errors: ["upstream_unreachable", "upstream_error"],
        handler: ({ body, signal }) =>
          this.client.post<z.infer<typeof AggregateMetricsReplySchema>>(
            this.settings.resources_server,
            "/aggregate_metrics",
            body,
            { signal },
          ),
      }),
    ];
  }

  protected override async runEpisode(input: RunEpisodeInput<this>): Promise<EpisodeOutcome> {
    const episode = new SingleAgentTurnEpisode(
      { client: this.client, config: this.settings, logger: this.logger },
      {
        episode: input.episode,
        taskId: input.body.task.task_id,
        taskInput: input.body.task.task_input,
        steps: input.steps,
        signal: input.signal,
        onCleanup: input.onCleanup,
      },
    );
    return await episode.run();
  }
}

if (isMainModule(import.meta.url)) await serveMain(SingleAgentTurnServer);
