/**
 * gym-participant-sdk: write the HTTP servers of an RL rollout deployment so that a training
 * controller can checkpoint them with rollouts in flight and continue each rollout after a
 * crash.
 *
 * @see docs/concepts.md
 * @packageDocumentation
 */

// Identity
export {
  EpisodeIdSchema,
  InvalidEpisodeIdError,
  captureKey,
  episodeId,
  fromCaptureKey,
  nextAttempt,
  parseEpisodeId,
  sameEpisode,
} from "./identity/episode-id.js";
export type { EpisodeId } from "./identity/episode-id.js";
export { ROLLOUT_SEGMENT, rolloutPath } from "./identity/rollout-prefix.js";
export {
  InvalidRunRolloutError,
  captureKeyFromRunBody,
  episodeFromRunBody,
} from "./identity/run-body.js";
export type { RunRolloutFields } from "./identity/run-body.js";

// Errors
export {
  CheckpointError,
  CheckpointStateError,
  ConfigError,
  DetailError,
  ERROR_CATALOGUE,
  EpisodeError,
  GymError,
  InvalidRequestError,
  UnauthorizedError,
} from "./errors.js";
export type { ErrorCode, ErrorEnvelope, RequestIssue } from "./errors.js";

// Wire
export {
  CONTROL_PREFIX,
  CheckpointRequestSchema,
  CommitRequestSchema,
  ForgetRequestSchema,
  MAX_LISTED_BLOCKERS,
  PARTICIPANT_KINDS,
  PHASES,
  PrepareReportSchema,
  PrepareRequestSchema,
  RestoreRequestSchema,
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
export { ManifestSchema, recordSchema } from "./wire/storage.js";
export type { CommitReply, Manifest, RecordBase, RestoreReply } from "./wire/storage.js";
export { CheckpointSettingsSchema } from "./wire/settings.js";
export type { CheckpointSettings, CheckpointSettingsInput } from "./wire/settings.js";
export {
  JsonPayloadSchema,
  JsonSyntaxError,
  NotJsonError,
  assertJsonValue,
  decodeJson,
  encodeJson,
} from "./wire/json-value.js";
export type { JsonValue } from "./wire/json-value.js";
export type { RouteDoc } from "./wire/route-doc.js";

// Control plane and storage
export { Participant } from "./control/participant.js";
export type { CloseAdmissionRequest } from "./control/participant.js";
export { RetiredAttempts } from "./control/retired-attempts.js";
export { ControlPlane } from "./control/control-plane.js";
export type { ControlPlaneOptions } from "./control/control-plane.js";
export { readCheckpoint } from "./store/records-reader.js";
export type { ReadRequest, ReadResult } from "./store/records-reader.js";
export { RecordsWriter } from "./store/records-writer.js";
export type { WriteTarget } from "./store/records-writer.js";

// Servers
export { Server, resolveCheckpointSettings } from "./server/server.js";
export type { ListeningAddress, ServerOptions } from "./server/server.js";
export { dataRoute } from "./server/data-route.js";
export type { DataRoute, RouteInput } from "./server/data-route.js";
export { rolloutOf } from "./server/rollout-prefix.js";
export type { RolloutContext } from "./server/rollout-prefix.js";

// OpenAPI
export { buildOpenApiDocument } from "./openapi/build-document.js";
export type { OpenApiOptions } from "./openapi/build-document.js";

// Deployment and the controller side
export { DeploymentFileSchema, ResolvedDeploymentSchema, SERVER_KINDS } from "./wire/deployment.js";
export type {
  DeploymentFile,
  DeploymentServer,
  ResolvedDeployment,
  ResolvedServer,
  ServerKind,
} from "./wire/deployment.js";
export { ServerClient } from "./client/server-client.js";
export type { CallOptions, CallReply, ServerClientOptions } from "./client/server-client.js";
export { ServerReplyError, ServerUnreachableError, UnknownServerError } from "./client/errors.js";
export type { UnreachableReason } from "./client/errors.js";
export {
  CoordinationError,
  PREPARE_ORDER,
  PrepareResult,
  RETIRE_ORDER,
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

// Running servers (the `gym` command uses these too)
export { isMainModule, serveMain } from "./cli/run-server.js";
export type {
  RunningServer,
  ServerClass,
  ServerFactory,
  ServerModuleExport,
  StartableServer,
} from "./cli/run-server.js";
export { DeploymentFileError, loadDeploymentFile } from "./cli/deployment-file.js";

// Episode steps (the runner environment and agent participants build on)
export { EpisodeSteps } from "./steps/episode-steps.js";
export type {
  BeginOptions,
  BeginRunOptions,
  BoundaryState,
  EpisodeState,
  StepMode,
} from "./steps/episode-steps.js";
export {
  EpisodeAlreadyRunningError,
  EpisodeDeadlineError,
  EpisodeRetiredError,
} from "./steps/episode-errors.js";

// Resources servers
export {
  ResourcesServer,
  ResourcesSeedSessionRequestSchema,
  ResourcesCloseSessionRequestSchema,
  VerifyRequestSchema,
  resourcesSession,
} from "./server/resources-server.js";
export type {
  ResourcesSeedSessionRequest,
  SessionRouteInput,
  VerifyResult,
} from "./server/resources-server.js";
export type { ResourcesSession } from "./server/resources/session-cookie.js";
export {
  AggregateMetricsRequestSchema,
  aggregateMetrics,
} from "./server/resources/aggregate-metrics.js";
export type {
  AggregateMetrics,
  AggregateMetricsRequest,
} from "./server/resources/aggregate-metrics.js";
export {
  CLOSE_FOLLOWS_HEADER,
  RESTART_HEADER,
  VERIFY_HEADER,
} from "./server/resources/checkpoint-middleware.js";
export {
  ResourcesParticipant,
  ResourcesRecordSchema,
} from "./participants/resources/resources-participant.js";
export type {
  AdmitRequest,
  AdmittedRequest,
  ResourcesParticipantOptions,
  ResourcesRecord,
  SessionHooks,
} from "./participants/resources/resources-participant.js";
export {
  CHECKPOINT_MODES,
  CHECKPOINT_VERIFY_MODES,
} from "./participants/resources/declarations.js";
export type { CheckpointMode, CheckpointVerify } from "./participants/resources/declarations.js";

// ---- Environment servers (@experimental) ------------------------------------------------
export { EnvironmentServer, RunRequestSchema, TaskIdSchema } from "./server/environment-server.js";
export type {
  EpisodeFailure,
  EpisodeOutcome,
  RunEpisodeInput,
  RunReply,
  RunRequest,
  TaskId,
} from "./server/environment-server.js";
export {
  EnvironmentParticipant,
  EnvironmentRecordSchema,
} from "./participants/environment/environment-participant.js";
export type {
  AdmittedEpisode,
  BeginEpisodeInput,
  EnvironmentRecord,
  EpisodeHandle,
} from "./participants/environment/environment-participant.js";
export { taskDigest } from "./participants/environment/task-digest.js";
export { EnvironmentConfigSchema } from "./server/environment-server.js";
export type { EnvironmentConfig } from "./server/environment-server.js";
export { isRestartReply, verifyModeOf } from "./participants/environment/checkpoint-headers.js";
export type { ReplyHeaders } from "./participants/environment/checkpoint-headers.js";

// ---- Agent servers ----------------------------------------------------------------------
export { AgentConfigSchema, AgentServer, PartialSessionSetupError } from "./server/agent-server.js";
export type {
  ActivationContext,
  AgentCloseResult,
  AgentConfig,
  AgentSessionView,
  LegacyRunInput,
  LegacyRunSteps,
  RespondInput,
  RespondResult,
  StoredActivationReply,
} from "./server/agent-server.js";
export {
  ACTIVATION_HEADER,
  AgentCloseReplySchema,
  AgentCloseRequestSchema,
  AgentRunRequestSchema,
  AgentSeedReplySchema,
  AgentSeedRequestSchema,
  DirectHttpToolAccessSchema,
  McpToolAccessSchema,
  ResponsesCreateRequestSchema,
  ToolAccessSchema,
  parseActivationIndex,
} from "./server/agent/agent-wire.js";
export type {
  AgentCloseReply,
  AgentCloseRequest,
  AgentRunRequest,
  AgentSeedRequest,
  DirectHttpToolAccess,
  McpToolAccess,
  ResponsesCreateRequest,
  ToolAccess,
} from "./server/agent/agent-wire.js";
export {
  ActivationCancelledError,
  AgentSessionParticipant,
} from "./participants/agent/agent-session-participant.js";
export type {
  AgentActivation,
  AgentSessionParticipantOptions,
  AgentSessionState,
  BoundarySnapshot,
  DirectCall,
  LegacyRunHandle,
  SeedTicket as AgentSeedTicket,
} from "./participants/agent/agent-session-participant.js";
export { RestartOnlyAgentParticipant } from "./participants/agent/restart-only-participant.js";
export {
  AGENT_KIND,
  AgentSessionRecordSchema,
  LEGACY_SESSION_PREFIX,
  isLegacySessionKey,
  legacySessionKey,
} from "./participants/agent/agent-records.js";
export type {
  AgentSessionHooks,
  AgentSessionRecord,
  RestoredAgentSession,
} from "./participants/agent/agent-records.js";
export { cookieHeader, parseCookieHeader, setCookieJar, setCookieLines } from "./util/cookies.js";
export type { CookieJar } from "./util/cookies.js";
export type { TextReply } from "./client/server-client.js";
export { TOKEN_CAPTURE_SEGMENT } from "./server/rollout-prefix.js";

// ---- Policy model servers and token capture ---------------------------------------------
export {
  BackendError,
  LEDGER_CONTROL_PREFIX,
  PolicyModelConfigSchema,
  PolicyModelServer,
} from "./server/policy-model-server.js";
export type { PolicyModelConfig } from "./server/policy-model-server.js";
export {
  ModelRecordSchema,
  PolicyParticipant,
  UNTAGGED_BLOCKER,
} from "./participants/model/policy-participant.js";
export type {
  ModelRecord,
  PolicyParticipantOptions,
} from "./participants/model/policy-participant.js";
export { CallRetiredError, PolicyGate, Ticket } from "./participants/model/policy-gate.js";
export type {
  CallCapture,
  GateReport,
  PolicyGateOptions,
} from "./participants/model/policy-gate.js";
export { RestoredCuts } from "./participants/model/restored-cuts.js";
export type { CutClaim, CutRecord } from "./participants/model/restored-cuts.js";
export { restartReason } from "./server/model/constrained-decoding.js";
export { CutRequester, controlRootOf } from "./server/model/cut-round.js";
export { resolveLineage, custodyRow, UNRESOLVED_PARENT } from "./server/model/capture-lineage.js";
export type { Lineage } from "./server/model/capture-lineage.js";
export {
  chatRequestOf,
  inputItems,
  itemsToMessages,
  outputItems,
  responseOf,
  toolsToChat,
} from "./server/model/responses-chat.js";
export type { ChatMessage, ChatToolCall } from "./server/model/responses-chat.js";
export { CaptureLedger } from "./capture/ledger/capture-ledger.js";
export type {
  CaptureLedgerOptions,
  LedgerImport,
  LedgerImportResult,
  LedgerRemoval,
  RecordOutcome,
} from "./capture/ledger/capture-ledger.js";
export {
  CorruptLedgerError,
  InvalidLedgerKeyError,
  InvalidLedgerRowError,
  LedgerConflictError,
  LedgerImportError,
  RolloutRetiredError,
} from "./capture/ledger/errors.js";
export {
  LEDGER_ROW_MISSING_CHAIN_HASH,
  LEDGER_ROW_MISSING_RESPONSE_ID,
  callRecordFromRow,
  manifestFromRows,
} from "./capture/ledger/manifest.js";
export type { LedgerManifest, ManifestFailure, RowCallRecord } from "./capture/ledger/manifest.js";
export { stampRows } from "./capture/ledger/stamp.js";
export type { LedgerRow, LedgerRowInput } from "./capture/ledger/row-codec.js";

// ---- Worker-side token capture (@experimental) ------------------------------------------
export { CaptureError, RECORD_FAILURE_REASONS } from "./capture/capture-error.js";
export type { CaptureErrorReason } from "./capture/capture-error.js";
export { CaptureAdmissionSchema } from "./capture/admission.js";
export type { CaptureAdmission, CaptureAdmissionInput } from "./capture/admission.js";
export {
  CallRecordSchema,
  CommitCoordsSchema,
  StageResultSchema,
  StagedCallBaseSnapshotSchema,
  StagedCallRecordSchema,
  stagingKey,
} from "./capture/records.js";
export type {
  CallRecord,
  CommitCoords,
  StageResult,
  StagedCallBaseSnapshot,
  StagedCallRecord,
} from "./capture/records.js";
export {
  EpisodeCutSchema,
  GenerationCutContinuationSchema,
  GenerationCutRecordSchema,
  generationCutRecordFromAck,
  remainingOutputLimit,
} from "./capture/continuation.js";
export type {
  EpisodeCut,
  GenerationCutContinuation,
  GenerationCutRecord,
} from "./capture/continuation.js";
export {
  GENERATION_CUT_ROUTE,
  GenerationCutInventorySchema,
  GenerationCutPrefixAckSchema,
  GenerationCutPrefixSchema,
  GenerationCutReceiptSchema,
  buildGenerationCutInventory,
  generationCutFailureAck,
  generationCutInventoryFromWire,
  inventoryDigest,
  validateReceiptFor,
} from "./capture/generation-cut.js";
export type {
  GenerationCutInventory,
  GenerationCutPrefix,
  GenerationCutPrefixAck,
  GenerationCutReceipt,
} from "./capture/generation-cut.js";
export {
  FINGERPRINT_VERSION,
  assistantFingerprint,
  conversationDigest,
} from "./capture/fingerprints.js";
export {
  EMPTY_EXTRAS_DIGEST,
  chainHash,
  extrasDigest,
  hashTokenIds,
  stagingDigest,
} from "./capture/digests.js";
export { PyFloat, pyFloat, pythonJson } from "./capture/python-json.js";
export { RolloutTokenCapture } from "./capture/worker-capture.js";
export type {
  ActiveCall,
  BeginCallOptions,
  CallTokens,
  RolloutTokenCaptureOptions,
  StagingSink,
  WeightVersionProvider,
} from "./capture/worker-capture.js";
