/**
 * Wire schemas of the control routes under `/ng-control/v1/checkpoint` (see
 * docs/control-plane.md).
 * Every request forbids unknown properties. Types come from `z.infer`; the OpenAPI document is
 * generated from these same schemas.
 */
import { isAbsolute } from "node:path";
import { z } from "zod";
import { EpisodeIdSchema, SAFE_ID_PATTERN } from "../identity/episode-id.js";

/** The path under which every control route lives. */
export const CONTROL_PREFIX = "/ng-control/v1/checkpoint";

/**
 * The header in which a controller sends its clock (Unix seconds, millisecond resolution) on
 * every control call, so a participant can report how far its own clock is from the
 * controller's (`gym_clock_offset_seconds`). Optional; a malformed value is ignored.
 */
export const CONTROLLER_TIME_HEADER = "x-ng-controller-time";

/** The phases of a participant's checkpoint state machine. */
export const PHASES = ["idle", "preparing", "prepared", "committed", "restored"] as const;
/** One phase of the checkpoint state machine. */
export type Phase = (typeof PHASES)[number];
export const PhaseSchema = z.enum(PHASES).meta({ id: "Phase" });

/** The control operations, as the dispatcher names them. */
export const OPERATIONS = [
  "status",
  "prepare",
  "renew",
  "retire",
  "forget",
  "commit",
  "restore",
  "resume",
] as const;
/** One control operation. */
export type Operation = (typeof OPERATIONS)[number];

/** The participant kinds. */
export const PARTICIPANT_KINDS = ["environment", "model", "agent", "resources"] as const;
/** One participant kind. */
export type ParticipantKind = (typeof PARTICIPANT_KINDS)[number];

export const CheckpointIdSchema = z
  .string()
  .min(1)
  .max(128)
  .regex(SAFE_ID_PATTERN, "must match ^[A-Za-z0-9][A-Za-z0-9._-]*$")
  .meta({
    id: "CheckpointId",
    description: "Controller-chosen checkpoint ID.",
    example: "ckpt-0007",
  });

/**
 * How far ahead a deadline may be: a year (and a day). Further is a mistake (milliseconds sent as
 * seconds, a sentinel like 1e308) that would pin the lease until then; the controller client
 * refuses the same bound before sending.
 */
export const MAX_DEADLINE_AHEAD_SECONDS = 366 * 24 * 3600;

export const DeadlineSchema = z
  .number()
  .refine((deadline) => deadline <= Date.now() / 1000 + MAX_DEADLINE_AHEAD_SECONDS, {
    message:
      "deadline_ts is more than a year ahead: send absolute Unix time in seconds (not milliseconds)",
  })
  .meta({
    id: "DeadlineTs",
    description:
      "Absolute Unix time in seconds; finite, at most a year ahead. A deadline in the past means: do not wait.",
    example: 1_767_000_000.5,
  });

const checkpointFields = { checkpoint_id: CheckpointIdSchema, deadline_ts: DeadlineSchema };

/**
 * The directory a commit writes into or a restore reads from, as the server sees it: an
 * absolute path. A relative one would be resolved against the server's working directory,
 * which the controller neither knows nor shares, so a commit would land where no restore looks.
 */
export const CheckpointDirSchema = z
  .string()
  .min(1)
  .refine((dir) => dir.length === 0 || isAbsolute(dir), {
    message:
      "must be an absolute path: a relative one would resolve against this server's working directory; send the directory as the server sees it (e.g. /checkpoints/step-120)",
  })
  .meta({
    id: "CheckpointDir",
    description:
      "Absolute path of the checkpoint directory on the server's machine, owned by the controller. A relative path is refused (422 invalid_request).",
    example: "/checkpoints/step-120",
  });

const CaptureKeySchema = z
  .string()
  .regex(SAFE_ID_PATTERN, "must match ^[A-Za-z0-9][A-Za-z0-9._-]*$")
  .meta({
    id: "CaptureKey",
    description: "`r` for attempt 0, `r-aN` for attempt N.",
    example: "task-3-a1",
  });

/** Body of renew and resume. */
export const CheckpointRequestSchema = z.strictObject(checkpointFields).meta({
  id: "CheckpointRequest",
  example: { checkpoint_id: "ckpt-0007", deadline_ts: 1_767_000_000 },
});
export type CheckpointRequest = z.infer<typeof CheckpointRequestSchema>;

/** Body of prepare. `restarts` carries the restarts earlier stages reported; absent means none. */
export const PrepareRequestSchema = z
  .strictObject({ ...checkpointFields, restarts: z.array(CaptureKeySchema).optional() })
  .meta({
    id: "PrepareRequest",
    example: { checkpoint_id: "ckpt-0007", deadline_ts: 1_767_000_000, restarts: ["task-9-0"] },
  });
export type PrepareRequest = z.infer<typeof PrepareRequestSchema>;

/** Body of commit. `episode_ids` null or absent: no scope; an array: exactly what continues. */
export const CommitRequestSchema = z
  .strictObject({
    ...checkpointFields,
    checkpoint_dir: CheckpointDirSchema,
    episode_ids: z.array(EpisodeIdSchema).nullable().default(null),
    stop: z.boolean().default(false),
  })
  .meta({
    id: "CommitRequest",
    example: {
      checkpoint_id: "ckpt-0007",
      deadline_ts: 1_767_000_000,
      checkpoint_dir: "/checkpoints/step-120",
      episode_ids: [{ rollout_id: "task-3-0", attempt: 0 }],
      stop: false,
    },
  });
export type CommitRequest = z.infer<typeof CommitRequestSchema>;

/** Body of restore: the checkpointed attempts (not the replacements) the controller continues. */
export const RestoreRequestSchema = z
  .strictObject({
    ...checkpointFields,
    checkpoint_dir: CheckpointDirSchema,
    episode_ids: z.array(EpisodeIdSchema),
  })
  .meta({
    id: "RestoreRequest",
    example: {
      checkpoint_id: "ckpt-0007",
      deadline_ts: 1_767_000_000,
      checkpoint_dir: "/checkpoints/step-120",
      episode_ids: [{ rollout_id: "task-3-0", attempt: 0 }],
    },
  });
export type RestoreRequest = z.infer<typeof RestoreRequestSchema>;

/** Body of retire: the attempts to stop (and every earlier attempt of their rollouts). */
export const RetireRequestSchema = z
  .strictObject({ ...checkpointFields, episode_ids: z.array(EpisodeIdSchema).min(1) })
  .meta({
    id: "RetireRequest",
    example: {
      checkpoint_id: "ckpt-0007",
      deadline_ts: 1_767_000_000,
      episode_ids: [{ rollout_id: "task-3-0", attempt: 1 }],
    },
  });
export type RetireRequest = z.infer<typeof RetireRequestSchema>;

/** Body of forget: rollouts finished for good, whose retired marks can go. */
export const ForgetRequestSchema = z
  .strictObject({ ...checkpointFields, rollout_ids: z.array(z.string()).min(1) })
  .meta({
    id: "ForgetRequest",
    example: { checkpoint_id: "ckpt-0007", deadline_ts: 1_767_000_000, rollout_ids: ["task-3-0"] },
  });
export type ForgetRequest = z.infer<typeof ForgetRequestSchema>;

/** Is every live execution at a committable boundary, and if not, which are not. */
export const PrepareReportSchema = z
  .strictObject({
    ready: z.boolean(),
    blockers: z.array(z.string()).default([]).meta({
      description: "Capture keys preventing a safe cut; at most 100 listed.",
    }),
    blocker_count: z
      .number()
      .int()
      .min(0)
      .default(0)
      .meta({ description: "Full number of blockers." }),
    counts: z.record(z.string(), z.number().int()).default({}),
    restarts: z.array(z.string()).default([]).meta({
      description:
        "In-flight episodes this participant cannot capture; never capped, never blocking.",
    }),
  })
  .meta({
    id: "PrepareReport",
    example: {
      ready: false,
      blockers: ["task-3-0"],
      blocker_count: 1,
      counts: { episodes: 4 },
      restarts: [],
    },
  });
export type PrepareReport = z.infer<typeof PrepareReportSchema>;

/** At most this many blockers are listed in a report. */
export const MAX_LISTED_BLOCKERS = 100;

/**
 * Builds a report. Without `blockerCount`, `blockers` is cut to its first 100 entries and the
 * count is the full length; with it, nothing is cut (so a report round-trips unchanged).
 */
export function prepareReport(input: {
  ready: boolean;
  blockers?: readonly string[];
  blockerCount?: number;
  counts?: Record<string, number>;
  restarts?: readonly string[];
}): PrepareReport {
  const blockers = input.blockers ?? [];
  return {
    ready: input.ready,
    blockers:
      input.blockerCount === undefined ? blockers.slice(0, MAX_LISTED_BLOCKERS) : [...blockers],
    blocker_count: input.blockerCount ?? blockers.length,
    counts: { ...(input.counts ?? {}) },
    restarts: [...(input.restarts ?? [])],
  };
}

export const StatusReplySchema = z
  .looseObject({
    kind: z.string(),
    instance: z.string(),
    phase: PhaseSchema,
    checkpoint_id: z.string().nullable(),
    lease_expires_at: z.number().nullable(),
    retired_rollouts: z.number().int().min(0),
    report: PrepareReportSchema,
    now: z.number().optional().meta({
      description:
        "The server's clock when it answered, Unix seconds with millisecond resolution: a controller measures its clock offset with it.",
    }),
  })
  .meta({
    id: "StatusReply",
    description: "Participant state; participant-specific extras are merged in at top level.",
    example: {
      kind: "resources",
      instance: "counter",
      phase: "idle",
      checkpoint_id: null,
      lease_expires_at: null,
      retired_rollouts: 0,
      report: { ready: true, blockers: [], blocker_count: 0, counts: {}, restarts: [] },
      now: 1767225600.123,
    },
  });
export type StatusReply = z.infer<typeof StatusReplySchema>;

export const PrepareReplySchema = z
  .strictObject({ phase: PhaseSchema, report: PrepareReportSchema })
  .meta({
    id: "PrepareReply",
    description: "`prepared` when ready; `preparing` with blockers when the deadline came first.",
    example: {
      phase: "prepared",
      report: { ready: true, blockers: [], blocker_count: 0, counts: {}, restarts: [] },
    },
  });
export type PrepareReply = z.infer<typeof PrepareReplySchema>;

export const RenewReplySchema = z
  .strictObject({ lease_expires_at: z.number() })
  .meta({ id: "RenewReply", example: { lease_expires_at: 1_767_000_600 } });
export type RenewReply = z.infer<typeof RenewReplySchema>;

export const RetireReplySchema = z
  .strictObject({ retired_count: z.number().int().min(0) })
  .meta({ id: "RetireReply", example: { retired_count: 1 } });
export type RetireReply = z.infer<typeof RetireReplySchema>;

export const ForgetReplySchema = z
  .strictObject({ forgotten_count: z.number().int().min(0) })
  .meta({ id: "ForgetReply", example: { forgotten_count: 1 } });
export type ForgetReply = z.infer<typeof ForgetReplySchema>;

export const ResumeReplySchema = z
  .strictObject({ phase: z.literal("idle"), idempotent: z.boolean() })
  .meta({ id: "ResumeReply", example: { phase: "idle", idempotent: false } });
export type ResumeReply = z.infer<typeof ResumeReplySchema>;
