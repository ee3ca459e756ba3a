/**
 * gym-participant-sdk: write the HTTP servers of an RL rollout deployment so that a training
 * controller can checkpoint them with rollouts in flight and continue each rollout after a
 * crash.
 *
 * This entry point is what authors of servers use: the four server kinds and the types of
 * their hooks, data routes, errors, episode identity, JSON values, calls to peer servers and
 * the serve entry. The controller side is `gym-participant-sdk/controller`, worker-side token
 * capture `gym-participant-sdk/capture` (experimental), the test kit
 * `gym-participant-sdk/testing`. Everything else is internal.
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
export { TOKEN_CAPTURE_SEGMENT } from "./server/rollout-prefix.js";

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

// JSON values
export { NotJsonError, assertJsonValue, encodeJson } from "./json/json-value.js";
export { JsonSyntaxError, decodeJson } from "./json/json-decode.js";
export { frozenJson } from "./json/frozen-json.js";
export { JsonPayloadSchema } from "./json/json-payload-schema.js";
export type { JsonValue } from "./json/json-value.js";

// Servers and data routes
export { Server, resolveCheckpointSettings, resolveTelemetrySettings } from "./server/server.js";
export type { ListeningAddress, ServerOptions } from "./server/server.js";
export { CheckpointSettingsSchema, TelemetrySettingsSchema } from "./wire/settings.js";
export type {
  CheckpointSettings,
  CheckpointSettingsInput,
  TelemetrySettings,
  TelemetrySettingsInput,
} from "./wire/settings.js";

// Telemetry (docs/observability.md)
export {
  metricsHandler,
  startTelemetry,
  stopTelemetry,
  telemetryStarted,
} from "./telemetry/setup.js";
export type { TelemetryOptions } from "./telemetry/setup.js";
export { ATTR as TELEMETRY_ATTRIBUTES, METRIC as TELEMETRY_METRICS } from "./telemetry/names.js";
export { dataRoute } from "./server/data-route.js";
export type { DataRoute, RouteInput } from "./server/data-route.js";
export type { RouteDoc, RouteExamples } from "./wire/route-doc.js";
export { rolloutOf } from "./server/rollout-prefix.js";
export type { RolloutContext } from "./server/rollout-prefix.js";
export { buildOpenApiDocument } from "./openapi/build-document.js";
export type { OpenApiOptions } from "./openapi/build-document.js";

export type { Operation } from "./wire/control.js";

// Serving (the `gym` command uses these too)
export { isMainModule, serveMain } from "./cli/run-server.js";
export type {
  RunningServer,
  ServerClass,
  ServerFactory,
  ServerModuleExport,
  StartableServer,
} from "./server/serve.js";

// Calls to peer servers (an agent calls its model and resources servers)
export { ServerClient } from "./client/server-client.js";
export type {
  CallOptions,
  CallReply,
  ServerClientOptions,
  TextReply,
} from "./client/server-client.js";
export { ServerReplyError, ServerUnreachableError, UnknownServerError } from "./client/errors.js";
export type { UnreachableReason } from "./client/errors.js";
export { ResolvedDeploymentSchema, ResolvedServerSchema, SERVER_KINDS } from "./wire/deployment.js";
export type { ResolvedDeployment, ResolvedServer, ServerKind } from "./wire/deployment.js";
export { cookieHeader, parseCookieHeader, setCookieJar, setCookieLines } from "./util/cookies.js";
export type { CookieJar } from "./util/cookies.js";
export type { BySession } from "./util/by-session.js";

// Episode steps (environments and agents park episodes at their boundaries)
export type { BoundaryState, EpisodeState, StepMode } from "./steps/episode-steps.js";
export {
  EpisodeAlreadyRunningError,
  EpisodeDeadlineError,
  EpisodeRetiredError,
} from "./steps/episode-errors.js";

// ---- Resources servers --------------------------------------------------------------------
export { ResourcesServer, resourcesSession } from "./server/resources-server.js";
export type {
  CloseSessionInput,
  ExportSessionStatesInput,
  RestoreSessionStatesInput,
  RetireSessionStateInput,
  SeedInput,
  SessionRouteInput,
  VerifyInput,
  VerifyResult,
} from "./server/resources-server.js";
export {
  ResourcesCloseSessionReplySchema,
  ResourcesCloseSessionRequestSchema,
  ResourcesSeedSessionReplySchema,
  ResourcesSeedSessionRequestSchema,
  VerifyReplySchema,
  VerifyRequestSchema,
} from "./wire/resources.js";
export type {
  ResourcesCloseSessionRequest,
  ResourcesSeedSessionRequest,
  VerifyReply,
} from "./wire/resources.js";
export type { ResourcesSession } from "./server/resources/session-cookie.js";
export { SessionStateServer } from "./server/resources/session-state-server.js";
export type { StateTool, StateToolInput } from "./server/resources/session-state-server.js";
export {
  AggregateMetricsReplySchema,
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
  CHECKPOINT_MODES,
  CHECKPOINT_VERIFY_MODES,
} from "./participants/resources/declarations.js";
export type { CheckpointMode, CheckpointVerify } from "./participants/resources/declarations.js";

// ---- Environment servers (@experimental) ------------------------------------------------
export { EnvironmentConfigSchema, EnvironmentServer } from "./server/environment-server.js";
export type {
  EnvironmentConfig,
  EpisodeFailure,
  EpisodeOutcome,
  RunEpisodeInput,
  RunReply,
} from "./server/environment-server.js";
export {
  EpisodeFailureSchema,
  RunReplySchema,
  RunRequestSchema,
  TaskIdSchema,
} from "./wire/environment.js";
export type { RunRequest, TaskId } from "./wire/environment.js";
export type { EpisodeHandle } from "./participants/environment/environment-participant.js";
export { isRestartReply, verifyModeOf } from "./participants/environment/checkpoint-headers.js";
export type { ReplyHeaders } from "./participants/environment/checkpoint-headers.js";

// ---- Agent servers ----------------------------------------------------------------------
export { AgentConfigSchema, AgentServer } from "./server/agent-server.js";
export type {
  AgentConfig,
  AgentParticipant,
  AgentSessionsExport,
  AgentSessionsRestore,
} from "./server/agent-server.js";
export { PartialSessionSetupError } from "./server/agent/agent-hooks.js";
export type {
  ActivationContext,
  AgentCloseResult,
  AgentSessionView,
  CloseSessionStateInput,
  CreateSessionStateInput,
  ExportAgentSessionsInput,
  LegacyRunInput,
  LegacyRunSteps,
  RebuiltAgentSession,
  RespondInput,
  RespondResult,
  RestoreAgentSessionsInput,
  RetireAgentSessionInput,
} from "./server/agent/agent-hooks.js";
export type { StoredActivationReply } from "./participants/agent/agent-session-table.js";
export {
  ACTIVATION_HEADER,
  AgentCloseReplySchema,
  AgentCloseRequestSchema,
  AgentRunReplySchema,
  AgentRunRequestSchema,
  AgentSeedReplySchema,
  AgentSeedRequestSchema,
  DirectHttpToolAccessSchema,
  McpToolAccessSchema,
  ResponsesCreateRequestSchema,
  ResponsesReplySchema,
  ToolAccessSchema,
  parseActivationIndex,
} from "./wire/agent.js";
export type {
  AgentCloseReply,
  AgentCloseRequest,
  AgentRunRequest,
  AgentSeedRequest,
  DirectHttpToolAccess,
  McpToolAccess,
  ResponsesCreateRequest,
  ToolAccess,
} from "./wire/agent.js";
export { ActivationCancelledError } from "./participants/agent/session-phase.js";
export type { BoundarySnapshot } from "./participants/agent/session-phase.js";
export {
  LEGACY_SESSION_PREFIX,
  isLegacySessionKey,
  legacySessionKey,
} from "./participants/agent/agent-records.js";
export type { RestoredAgentSession } from "./participants/agent/agent-records.js";

// ---- Policy model servers ---------------------------------------------------------------
export {
  BackendError,
  PolicyModelConfigSchema,
  PolicyModelServer,
} from "./server/policy-model-server.js";
export type { GenerateInput, PolicyModelConfig } from "./server/policy-model-server.js";
export {
  chatRequestOf,
  inputItems,
  itemsToMessages,
  outputItems,
  responseOf,
  toolsToChat,
} from "./server/model/responses-chat.js";
export type {
  ChatCompletionLike,
  ChatMessage,
  ChatToolCall,
  ResponsesRequestLike,
} from "./server/model/responses-chat.js";
