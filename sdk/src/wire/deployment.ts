/**
 * The deployment file (`deployment.yaml`) and the resolved deployment every server process
 * receives (names → URLs plus the `checkpoint:` block). See docs/deployment.md.
 */
import { z } from "zod";
import { CheckpointSettingsSchema, TelemetrySettingsSchema } from "./settings.js";

/** Server kinds a deployment can hold: the participant kinds, and `backend` (never a participant). */
export const SERVER_KINDS = ["environment", "agent", "resources", "model", "backend"] as const;
/** One server kind. */
export type ServerKind = (typeof SERVER_KINDS)[number];

/** The pattern of a server name in a deployment. */
export const SERVER_NAME_PATTERN = /^[A-Za-z0-9_-]+$/;

/** Config keys ending in this suffix name another server of the deployment. */
export const SERVER_REFERENCE_SUFFIX = "_server";

export const DeploymentServerSchema = z
  .strictObject({
    kind: z.enum(SERVER_KINDS),
    entrypoint: z.string().min(1),
    host: z
      .string()
      .regex(
        /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*|[0-9A-Fa-f:.]+)$/,
        "must be a host name or an IP address, e.g. 127.0.0.1 or localhost",
      )
      .default("127.0.0.1"),
    port: z.number().int().min(0).max(65_535).default(0),
    num_workers: z.number().int().min(1).default(1),
    /**
     * Extra flags for the Node.js process of this server, before its script: heap and
     * garbage-collector sizes, `--enable-source-maps`, and the like.
     */
    node_args: z
      .array(
        z
          .string()
          .regex(
            /^--?[A-Za-z]/,
            "a node_args entry is a Node.js flag, e.g. --max-old-space-size=8192",
          ),
      )
      .default([]),
    config: z.record(z.string(), z.unknown()).default({}),
    /**
     * The secret this server signs its session cookies with. Never written to the resolved
     * deployment: `gym serve` hands it to the server's process alone.
     */
    session_secret: z
      .string()
      .refine(
        (value) => value.trim() !== "",
        "a session secret must not be blank: set a long random value (e.g. session_secret: ${GYM_SESSION_SECRET}), or leave it out for the default",
      )
      .nullable()
      .default(null)
      .meta({
        description:
          "Secret signing the server's session cookies. Default: derived from checkpoint.control_auth_token with checkpointing on, else random per run.",
      }),
  })
  .meta({ id: "DeploymentServer" });
/** One server entry of a deployment file. */
export type DeploymentServer = z.infer<typeof DeploymentServerSchema>;

export const DeploymentFileSchema = z
  .strictObject({
    checkpoint: CheckpointSettingsSchema.optional(),
    telemetry: TelemetrySettingsSchema.optional(),
    servers: z
      .record(
        z.string().regex(SERVER_NAME_PATTERN, "a server name must match [A-Za-z0-9_-]+"),
        DeploymentServerSchema,
      )
      .refine(
        (servers) => Object.keys(servers).length > 0,
        "a deployment needs at least one server",
      ),
  })
  .meta({ id: "DeploymentFile" });
/** A parsed deployment file. */
export type DeploymentFile = z.infer<typeof DeploymentFileSchema>;

export const ResolvedServerSchema = z.strictObject({
  kind: z.enum(SERVER_KINDS),
  url: z.url(),
  host: z.string(),
  port: z.number().int().min(1).max(65_535),
  num_workers: z.number().int().min(1),
  config: z.record(z.string(), z.unknown()),
});
/** A server as other processes reach it. */
export type ResolvedServer = z.infer<typeof ResolvedServerSchema>;

export const ResolvedDeploymentSchema = z
  .strictObject({
    checkpoint: CheckpointSettingsSchema.nullable(),
    telemetry: TelemetrySettingsSchema.optional(),
    servers: z.record(z.string(), ResolvedServerSchema),
  })
  .meta({ id: "ResolvedDeployment" });
/** The deployment every server process receives: where each server is, and the checkpoint block. */
export type ResolvedDeployment = z.infer<typeof ResolvedDeploymentSchema>;
