/**
 * The resources server's wire shapes: the native `/seed_session` and `/close_session` bodies
 * and the base `/verify` body.
 *
 * @module
 */
import { z } from "zod";
import { EpisodeIdSchema } from "../identity/episode-id.js";

/** The native `/seed_session` body. */
export const ResourcesSeedSessionRequestSchema = z
  .strictObject({
    resources_session_id: z.string().min(1),
    episode_id: EpisodeIdSchema,
    task_id: z.strictObject({ taskset: z.string().min(1), task_id: z.string().min(1) }),
    task_data: z.record(z.string(), z.unknown()),
  })
  .meta({ id: "ResourcesSeedSessionRequest" });
/** The native `/seed_session` body. */
export type ResourcesSeedSessionRequest = z.infer<typeof ResourcesSeedSessionRequestSchema>;

/** The `/close_session` body (servers may widen it). */
export const ResourcesCloseSessionRequestSchema = z
  .looseObject({
    resources_session_id: z.string().optional(),
    episode_id: EpisodeIdSchema.optional(),
  })
  .meta({ id: "ResourcesCloseSessionRequest" });

/** The base `/verify` body: any JSON object; servers narrow it with `ResourcesServer.verifyRequestSchema()`. */
export const VerifyRequestSchema = z.looseObject({}).meta({ id: "VerifyRequest" });
