/**
 * The shapes of the files a run writes to its state directory: the state file and the last
 * prepare. Kept apart from `state-file.ts` (validated reads) and `state-io.ts` (plain writes) so
 * both can name these types without importing each other.
 */
import { z } from "zod";
import { PrepareReplySchema } from "../wire/control.js";
import { ResolvedDeploymentSchema, SERVER_KINDS } from "../wire/deployment.js";

/** Validates one started server of the state file. */
export const StateServerSchema = z.object({
  name: z.string(),
  kind: z.enum(SERVER_KINDS),
  url: z.string(),
  /** The server process. */
  pid: z.number().int().positive(),
  /** Its process group (the server was started as a group leader, so usually equal to pid). */
  pgid: z.number().int().positive(),
  /** Where its output goes. */
  log: z.string(),
  /** The `gym serve` process watching it (it reaps the server when it exits), or null. */
  supervisor_pid: z.number().int().positive().nullable(),
  started_at: z.string(),
  /** The machine it runs on (`os.hostname()`): its pid means something only there. */
  hostname: z.string().optional(),
  /** Its node, in a deployment with `nodes:`. */
  node: z.string().optional(),
  /** The signal that stops it at once: SIGINT when it was started with a term grace. */
  stop_signal: z.enum(["SIGTERM", "SIGINT"]).optional(),
});
/** One started server in the state file. */
export type StateServer = z.infer<typeof StateServerSchema>;

/** Validates the state file. */
export const RunStateSchema = z.object({
  version: z.literal(1),
  /** The deployment file the run was started from (absolute). */
  deployment_file: z.string(),
  /** The resolved deployment every server process received (absolute). */
  resolved_file: z.string(),
  /** The resolved deployment itself, so other verbs need nothing else. */
  deployment: ResolvedDeploymentSchema,
  servers: z.record(z.string(), StateServerSchema),
});
/** The state file's contents. */
export type RunState = z.infer<typeof RunStateSchema>;

/** Validates the last prepare's file. */
export const LastPrepareSchema = z.object({
  checkpoint_id: z.string(),
  prepared: z.boolean(),
  at: z.string(),
  replies: z.record(z.string(), PrepareReplySchema),
});
/** The last prepare's outcome, kept for `gym ckpt commit`'s default scope. */
export type LastPrepare = z.infer<typeof LastPrepareSchema>;
