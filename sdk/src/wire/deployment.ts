/**
 * The deployment file (`deployment.yaml`) and the resolved deployment every server process
 * receives (names → URLs plus the `checkpoint:` block). See docs/deployment.md.
 */
import { z } from "zod";
import {
  CheckpointSettingsSchema,
  TelemetrySettingsSchema,
  TlsSettingsSchema,
} from "./settings.js";

/** Server kinds a deployment can hold: the participant kinds, and `backend` (never a participant). */
export const SERVER_KINDS = ["environment", "agent", "resources", "model", "backend"] as const;
/** One server kind. */
export type ServerKind = (typeof SERVER_KINDS)[number];

/** The pattern of a server name in a deployment. */
export const SERVER_NAME_PATTERN = /^[A-Za-z0-9_-]+$/;

/** Config keys ending in this suffix name another server of the deployment. */
export const SERVER_REFERENCE_SUFFIX = "_server";

/** A host name or an IP address. */
const HostSchema = z
  .string()
  .regex(
    /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*|[0-9A-Fa-f:.]+)$/,
    "must be a host name or an IP address, e.g. 127.0.0.1 or localhost",
  );

/** The URL a server is reached at: http or https, a host, no path beyond `/`. */
const AdvertisedUrlSchema = z
  .url({
    protocol: /^https?$/,
    error: "must be an http:// or https:// URL, e.g. https://policy-0.policy:8000",
  })
  .refine((url) => {
    const parsed = new URL(url);
    return (
      (parsed.pathname === "/" || parsed.pathname === "") &&
      parsed.search === "" &&
      parsed.hash === ""
    );
  }, "must name only a scheme, a host and a port (no path, query or fragment)")
  .transform((url) => url.replace(/\/$/, ""));

/**
 * One machine (or pod, or group of machines treated alike) of a deployment that spans several.
 * Its servers bind its `host` unless they say otherwise, and other machines reach them there.
 */
export const DeploymentNodeSchema = z
  .strictObject({
    host: HostSchema.meta({
      description:
        "The address other machines reach this node's servers at (a name or an IP). Usually `${VAR}` set from the engine: a Slurm node's address, a Kubernetes Service name.",
    }),
  })
  .meta({ id: "DeploymentNode" });
/** One node of a deployment file. */
export type DeploymentNode = z.infer<typeof DeploymentNodeSchema>;

export const DeploymentServerSchema = z
  .strictObject({
    kind: z.enum(SERVER_KINDS),
    entrypoint: z.string().min(1),
    node: z.string().nullable().default(null).meta({
      description:
        "The node (of `nodes:`) this server runs on; required when the deployment has nodes. `gym serve --node NAME` starts that node's servers.",
    }),
    host: HostSchema.nullable().default(null).meta({
      description:
        "The address to bind. Default: the node's host, or 127.0.0.1 without nodes. 0.0.0.0 binds every interface.",
    }),
    port: z.number().int().min(0).max(65_535).default(0),
    url: AdvertisedUrlSchema.nullable().default(null).meta({
      description:
        "The URL other processes reach this server at, when it is not the bound address (behind a Service, a proxy or NAT). Default: built from the node's host (or `host`) and `port`.",
    }),
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
    tls: TlsSettingsSchema.optional(),
    nodes: z
      .record(
        z.string().regex(SERVER_NAME_PATTERN, "a node name must match [A-Za-z0-9_-]+"),
        DeploymentNodeSchema,
      )
      .optional(),
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
  /** The address the server binds. */
  host: z.string(),
  port: z.number().int().min(1).max(65_535),
  /** The node the server runs on, or null in a deployment without nodes. */
  node: z.string().nullable().optional(),
  num_workers: z.number().int().min(1),
  config: z.record(z.string(), z.unknown()),
});
/** A server as other processes reach it. */
export type ResolvedServer = z.infer<typeof ResolvedServerSchema>;

export const ResolvedDeploymentSchema = z
  .strictObject({
    checkpoint: CheckpointSettingsSchema.nullable(),
    telemetry: TelemetrySettingsSchema.optional(),
    tls: TlsSettingsSchema.optional(),
    servers: z.record(z.string(), ResolvedServerSchema),
  })
  .meta({ id: "ResolvedDeployment" });
/** The deployment every server process receives: where each server is, and the checkpoint block. */
export type ResolvedDeployment = z.infer<typeof ResolvedDeploymentSchema>;
