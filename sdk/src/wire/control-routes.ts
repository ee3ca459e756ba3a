/**
 * The control routes as data: method, path, operation, schemas, the error codes each can
 * return, and their documentation. The express router and the OpenAPI document both read this
 * table, so a route cannot be served one way and documented another.
 */
import type { z } from "zod";
import type { ErrorCode } from "../errors.js";
import {
  CONTROL_PREFIX,
  type Operation,
  CheckpointRequestSchema,
  ForgetReplySchema,
  ForgetRequestSchema,
  PrepareReplySchema,
  PrepareRequestSchema,
  RenewReplySchema,
  ResumeReplySchema,
  RetireReplySchema,
  RetireRequestSchema,
  RestoreRequestSchema,
  CommitRequestSchema,
  StatusReplySchema,
} from "./control.js";
import { CommitReplySchema, RestoreReplySchema } from "./storage.js";

/** One control route. */
export interface ControlRoute {
  readonly operation: Operation;
  readonly method: "get" | "post";
  /** Full path, under {@link CONTROL_PREFIX}. */
  readonly path: string;
  readonly summary: string;
  readonly description: string;
  readonly request: z.ZodType | null;
  readonly reply: z.ZodType;
  /** Error codes this route can answer with (besides 401 and 422, common to all). */
  readonly errors: readonly ErrorCode[];
}

const fencing: ErrorCode[] = ["stale_checkpoint", "checkpoint_conflict", "invalid_phase"];

/** Every control route, in the order the OpenAPI document lists them. */
export const CONTROL_ROUTES: readonly ControlRoute[] = [
  {
    operation: "status",
    method: "get",
    path: `${CONTROL_PREFIX}/status`,
    summary: "Participant state",
    description:
      "Kind, instance, phase, active checkpoint, lease, retired rollouts and the current " +
      "prepare report. Answers in every phase; never renews the lease.",
    request: null,
    reply: StatusReplySchema,
    errors: [],
  },
  {
    operation: "prepare",
    method: "post",
    path: `${CONTROL_PREFIX}/prepare`,
    summary: "Close admission and park in-flight work",
    description:
      "Closes admission and waits until every live execution is at a committable boundary or " +
      "the deadline passes. `prepared` when ready; `preparing` with blockers otherwise " +
      "(admission stays closed, the lease runs). A completed prepare is replayed verbatim.",
    request: PrepareRequestSchema,
    reply: PrepareReplySchema,
    errors: [...fencing, "worker_lost"],
  },
  {
    operation: "renew",
    method: "post",
    path: `${CONTROL_PREFIX}/renew`,
    summary: "Extend the lease",
    description:
      "Extends the lease to `deadline_ts + lease_grace_seconds`; the lease never shrinks. " +
      "A quiet participant resumes on its own when its lease expires.",
    request: CheckpointRequestSchema,
    reply: RenewReplySchema,
    errors: fencing,
  },
  {
    operation: "retire",
    method: "post",
    path: `${CONTROL_PREFIX}/retire`,
    summary: "Stop attempts for good",
    description:
      "Marks the attempts (and earlier attempts of their rollouts) retired, then stops and frees " +
      "their work. Only outside a checkpoint (idle, or restored under the restore's ID).",
    request: RetireRequestSchema,
    reply: RetireReplySchema,
    errors: ["checkpoint_conflict", "invalid_phase", "deadline_exceeded"],
  },
  {
    operation: "forget",
    method: "post",
    path: `${CONTROL_PREFIX}/forget`,
    summary: "Drop retired marks of finished rollouts",
    description:
      "Drops the retired marks of rollouts finished for good. Only outside a checkpoint.",
    request: ForgetRequestSchema,
    reply: ForgetReplySchema,
    errors: ["checkpoint_conflict", "invalid_phase", "deadline_exceeded", "retire_incomplete"],
  },
  {
    operation: "commit",
    method: "post",
    path: `${CONTROL_PREFIX}/commit`,
    summary: "Write records, then the manifest",
    description:
      "Exports the prepared state once, streams it to `records-<sha256>.jsonl`, publishes " +
      "`manifest.json` last, and frees restored state the scope leaves out. A retry with the " +
      "same directory and scope joins or replays; other arguments conflict.",
    request: CommitRequestSchema,
    reply: CommitReplySchema,
    errors: [
      ...fencing,
      "export_failed",
      "worker_lost",
      "restart_in_scope",
      "checkpoint_error",
      "deadline_exceeded",
      "invalid_checkpoint_state",
    ],
  },
  {
    operation: "restore",
    method: "post",
    path: `${CONTROL_PREFIX}/restore`,
    summary: "Install checkpointed state as the next attempts",
    description:
      "In a fresh process: marks the checkpointed attempts retired, verifies and reads the " +
      "records in scope, closes admission and installs each as its next attempt. Admission " +
      "stays closed until resume.",
    request: RestoreRequestSchema,
    reply: RestoreReplySchema,
    errors: [
      ...fencing,
      "checkpoint_error",
      "worker_lost",
      "deadline_exceeded",
      "invalid_checkpoint_state",
    ],
  },
  {
    operation: "resume",
    method: "post",
    path: `${CONTROL_PREFIX}/resume`,
    summary: "Reopen admission (also the abort)",
    description:
      "Stops the write (no manifest appears after this returns), reopens admission and lets " +
      "parked work continue. Idempotent: a resumed ID answers `idempotent: true`.",
    request: CheckpointRequestSchema,
    reply: ResumeReplySchema,
    errors: ["checkpoint_conflict", "deadline_exceeded"],
  },
];
