/**
 * gym-participant-sdk/controller: the training controller's side. The checkpoint coordination
 * across participants (discover, prepare, commit, resume, restore, retire, forget), rollout
 * collection over a dataset ({@link collect}), the deployment file, telemetry for the
 * controller's process, and the shapes of control requests, replies and checkpoint manifests.
 *
 * What both sides use is exported once, from the root entry `gym-participant-sdk`: calls to
 * servers (`ServerClient` and its errors), episode identity (`episodeId`, `parseEpisodeId`,
 * `nextAttempt`...) and the error envelope (`GymError`, `ERROR_CATALOGUE`).
 *
 * @see docs/controller.md
 * @packageDocumentation
 */

// Coordination
export {
  ClockSkewError,
  CoordinationError,
  PREPARE_ORDER,
  PrepareResult,
  RETIRE_ORDER,
  UnreachableParticipantsError,
  commit,
  discover,
  forget,
  prepare,
  renew,
  restore,
  resume,
  retire,
  status,
} from "./client/coordination.js";
export type {
  CommitOptions,
  DiscoverOptions,
  Member,
  MemberTiming,
  Participants,
  RestoreOptions,
} from "./client/coordination.js";
export type { ServerLocation, UnreachableParticipant } from "./client/host-loss.js";
export { CommitScopeRequiredError, commitEverywhere } from "./client/commit-everywhere.js";
export { checkCommitShared, checkRestoreShared, writersOf } from "./client/shared-storage.js";
export type { Writers } from "./client/shared-storage.js";
export { CheckpointNotSharedError } from "./errors.js";
export type { UnsharedState } from "./errors.js";
export { DEFAULT_MAX_CLOCK_SKEW_MS } from "./client/clock.js";
export type { CommitStep } from "./client/commit-everywhere.js";

// Rollout collection (what `gym collect` runs)
export { Collection, collect } from "./collect/collector.js";
export { CollectError } from "./collect/collect-options.js";
export type { CollectOptions } from "./collect/collect-options.js";
export { EXIT_FAILING, EXIT_PREEMPTED } from "./collect/collect-report.js";
export type {
  CheckpointOutcome,
  CollectEvent,
  CollectProgress,
  CollectSummary,
} from "./collect/collect-report.js";
export type { FailureKind, RolloutRow, RowFailure } from "./collect/rollout-row.js";
export { DEFAULT_MAX_FAILURES } from "./collect/failure-streak.js";
export type { FailureStreak } from "./collect/failure-streak.js";
export { TaskFileError } from "./collect/task-rows.js";
export { JournalCorruptError } from "./collect/jsonl-journal.js";
export {
  CollectionDirError,
  CollectionManifestSchema,
  RowEpisodeSchema,
  RunFileSchema,
} from "./collect/collection-dir.js";
export type { CollectionManifest, RowEpisode, RunFile } from "./collect/collection-dir.js";

// The deployment file
export {
  DeploymentFileError,
  loadDeploymentFile,
  resolveDeployment,
  serverUrl,
} from "./deployment/index.js";
export type {
  DeploymentProblem,
  LoadOptions,
  LoadedDeployment,
  LoadedServer,
} from "./deployment/index.js";
export {
  DeploymentFileSchema,
  DeploymentServerSchema,
  ResolvedDeploymentSchema,
  ResolvedServerSchema,
  SERVER_KINDS,
} from "./wire/deployment.js";
export type {
  DeploymentFile,
  DeploymentServer,
  ResolvedDeployment,
  ResolvedServer,
  ServerKind,
} from "./wire/deployment.js";

// Control requests and replies
export {
  CONTROL_PREFIX,
  CheckpointRequestSchema,
  CommitRequestSchema,
  ForgetReplySchema,
  ForgetRequestSchema,
  MAX_LISTED_BLOCKERS,
  OPERATIONS,
  PARTICIPANT_KINDS,
  PHASES,
  PrepareReplySchema,
  PrepareReportSchema,
  PrepareRequestSchema,
  RenewReplySchema,
  RestoreRequestSchema,
  ResumeReplySchema,
  RetireReplySchema,
  RetireRequestSchema,
  StatusReplySchema,
  prepareReport,
} from "./wire/control.js";
export type {
  CheckpointRequest,
  CommitRequest,
  ForgetReply,
  ForgetRequest,
  Operation,
  ParticipantKind,
  Phase,
  PrepareReply,
  PrepareReport,
  PrepareRequest,
  RenewReply,
  RestoreRequest,
  ResumeReply,
  RetireReply,
  RetireRequest,
  StatusReply,
} from "./wire/control.js";

// Checkpoints on disk
export {
  CommitReplySchema,
  ManifestSchema,
  RestoreReplySchema,
  recordSchema,
} from "./wire/storage.js";
export type { CommitReply, Manifest, RecordBase, RestoreReply } from "./wire/storage.js";
export { readCheckpoint } from "./store/records-reader.js";
export type { ReadRequest, ReadResult } from "./store/records-reader.js";
export type { ParticipantLocation } from "./store/paths.js";

export type { CheckpointSettings, TelemetrySettings } from "./wire/settings.js";
export { startTelemetry, stopTelemetry } from "./telemetry/setup.js";
export type { TelemetryOptions } from "./telemetry/setup.js";
