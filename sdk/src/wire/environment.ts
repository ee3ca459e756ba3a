/**
 * The environment server's wire shapes: the `/run` request and the task it names.
 *
 * @module
 */
import { z } from "zod";
import { EpisodeIdSchema } from "../identity/episode-id.js";

/** A task's identity: its task set and its ID within it. */
export const TaskIdSchema = z
  .strictObject({ taskset: z.string().min(1), task_id: z.string().min(1) })
  .meta({ id: "TaskId" });
/** A task's identity. */
export type TaskId = z.infer<typeof TaskIdSchema>;

/**
 * The `/run` request: the episode (as `episode_id`, or the collector's `_ng_*` row fields) and
 * the task.
 */
export const RunRequestSchema = z
  .strictObject({
    episode_id: EpisodeIdSchema.optional(),
    task: z.strictObject({ task_id: TaskIdSchema, task_input: z.unknown() }),
    _ng_rollout_id: z.unknown().optional(),
    _ng_task_index: z.unknown().optional(),
    _ng_rollout_index: z.unknown().optional(),
    _ng_attempt_index: z.unknown().optional(),
  })
  .meta({ id: "RunRequest" });
/** A `/run` request. */
export type RunRequest = z.infer<typeof RunRequestSchema>;

/** Why an episode failed, as the `/run` reply carries it (servers may add fields). */
export const EpisodeFailureSchema = z
  .looseObject({
    failure_reason: z.string(),
    terminal: z.boolean().meta({ description: "True: the collector must not retry this rollout." }),
    failure_kind: z.string().optional(),
    stage: z.enum(["admission", "seed", "agent", "verification", "cleanup"]).optional(),
  })
  .meta({ id: "EpisodeFailure" });

/** The `/run` reply: the attempt that ran, its task, and exactly one of a result or a failure. */
export const RunReplySchema = z
  .strictObject({
    episode_id: EpisodeIdSchema,
    task_id: TaskIdSchema,
    result: z.unknown().meta({ description: "What the episode returned; null on a failure." }),
    failure: EpisodeFailureSchema.nullable(),
  })
  .meta({
    id: "RunReply",
    example: {
      episode_id: { rollout_id: "task-3", attempt: 0 },
      task_id: { taskset: "demo", task_id: "3" },
      result: { reward: 1 },
      failure: null,
    },
  });
