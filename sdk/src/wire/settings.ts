/** The `checkpoint:` settings block of a deployment file (see docs/deployment.md). */
import { z } from "zod";

export const CheckpointSettingsSchema = z
  .strictObject({
    enabled: z.boolean().default(false),
    control_auth_token: z.string().nullable().default(null),
    lease_grace_seconds: z.number().gt(0).default(600).meta({
      description:
        "Seconds past a control call's deadline before a quiet participant resumes itself.",
    }),
  })
  .superRefine((value, ctx) => {
    const token = value.control_auth_token ?? "";
    if (value.enabled && token.trim() === "") {
      ctx.addIssue({
        code: "custom",
        path: ["control_auth_token"],
        message:
          token === ""
            ? "checkpoint.control_auth_token is required and non-empty when checkpoint.enabled is true"
            : "checkpoint.control_auth_token must not be blank (whitespace only) when checkpoint.enabled is true: set a secret token",
      });
    }
  })
  .meta({ id: "CheckpointSettings" });
/** The validated `checkpoint:` block. */
export type CheckpointSettings = z.infer<typeof CheckpointSettingsSchema>;
/** What a user writes in the `checkpoint:` block. */
export type CheckpointSettingsInput = z.input<typeof CheckpointSettingsSchema>;

/** The `telemetry:` settings block of a deployment file (see docs/observability.md). */
export const TelemetrySettingsSchema = z
  .strictObject({
    metrics: z.boolean().default(true).meta({
      description: "Serve Prometheus text at `metrics_path` on every server.",
    }),
    metrics_path: z
      .string()
      .regex(/^\/[A-Za-z0-9._~/-]*$/, "a path such as /metrics")
      .default("/metrics"),
    request_log_level: z
      .enum(["silent", "trace", "debug", "info"])
      .default("debug")
      .meta({ description: "Level of the one log line per request; `silent` logs none." }),
  })
  .meta({ id: "TelemetrySettings" });
/** The validated `telemetry:` block. */
export type TelemetrySettings = z.infer<typeof TelemetrySettingsSchema>;
/** What a user writes in the `telemetry:` block. */
export type TelemetrySettingsInput = z.input<typeof TelemetrySettingsSchema>;

/**
 * The `tls:` settings block of a deployment file (see docs/multi-host.md): every server serves
 * HTTPS with this certificate, and every client of the deployment (servers calling each other,
 * `gym collect`, `gym ckpt`, `gym top`) trusts `ca_file`. Paths are absolute or relative to the
 * deployment file; `${VAR}` gives each node its own.
 */
export const TlsSettingsSchema = z
  .strictObject({
    cert_file: z.string().min(1).meta({
      description: "PEM certificate (chain) the servers present; its names must cover their hosts.",
    }),
    key_file: z.string().min(1).meta({ description: "PEM private key of `cert_file`." }),
    ca_file: z.string().min(1).nullable().default(null).meta({
      description:
        "PEM CA certificate(s) clients trust for the servers' certificates. Default: the system's CAs.",
    }),
    client_ca_file: z.string().min(1).nullable().default(null).meta({
      description:
        "Mutual TLS: servers require a client certificate signed by one of these CAs. Servers and controllers present `cert_file` as theirs.",
    }),
  })
  .meta({ id: "TlsSettings" });
/** The validated `tls:` block. */
export type TlsSettings = z.infer<typeof TlsSettingsSchema>;
