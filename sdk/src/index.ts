/**
 * gym-participant-sdk: write the HTTP servers of an RL rollout deployment so that a training
 * controller can checkpoint them with rollouts in flight and continue each rollout after a
 * crash.
 *
 * This entry point is what authors of servers use: the four server kinds and the types of
 * their hooks, data routes, errors, episode identity, JSON values, calls to peer servers and
 * the serve entry. The controller side is `gym-participant-sdk/controller`, the wire between
 * servers (schemas, headers, cookies) `gym-participant-sdk/protocol`, worker-side token capture
 * `gym-participant-sdk/capture` (experimental), the test kit `gym-participant-sdk/testing`.
 * Everything else is internal.
 *
 * @see docs/concepts.md
 * @packageDocumentation
 */

// Episode identity
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

// Errors (throw one from a hook or route: it answers with its status and code)
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

// JSON values a checkpoint keeps
export { frozenJson } from "./json/frozen-json.js";
export { JsonPayloadSchema } from "./json/json-payload-schema.js";
export type { JsonValue } from "./json/json-value.js";

// Servers, data routes, serving
export { Server } from "./server/server.js";
export type { ServerOptions } from "./server/server.js";
export { dataRoute } from "./server/data-route.js";
export type { DataRoute, RouteInput } from "./server/data-route.js";
export type { RouteDoc, RouteExamples } from "./wire/route-doc.js";
export { rolloutOf } from "./server/rollout-prefix.js";
export type { RolloutContext } from "./server/rollout-prefix.js";
export type { BySession } from "./util/by-session.js";
export { isMainModule, serveMain } from "./cli/run-server.js";

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

// Episode steps (environments and agents park episodes at their boundaries)
export type { BoundaryState, EpisodeState, StepMode } from "./steps/episode-steps.js";
export {
  EpisodeAlreadyRunningError,
  EpisodeDeadlineError,
  EpisodeRetiredError,
} from "./steps/episode-errors.js";

// ---- Resources servers --------------------------------------------------------------------
export {
  ResourcesConfigSchema,
  ResourcesServer,
  resourcesSession,
} from "./server/resources-server.js";
export type {
  CloseSessionInput,
  ResourcesConfig,
  ExportSessionStatesInput,
  RestoreSessionStatesInput,
  RetireSessionStateInput,
  SeedInput,
  SessionRouteInput,
  VerifyInput,
  VerifyResult,
} from "./server/resources-server.js";
export { VerifyRequestSchema } from "./wire/resources.js";
export type { ResourcesSession } from "./server/resources/session-cookie.js";
export { SessionStateServer } from "./server/resources/session-state-server.js";
export type { StateTool, StateToolInput } from "./server/resources/session-state-server.js";
export { aggregateMetrics } from "./server/resources/aggregate-metrics.js";
export type { AggregateMetrics } from "./server/resources/aggregate-metrics.js";
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
export { RunRequestSchema, TaskIdSchema } from "./wire/environment.js";
export type { RunRequest, TaskId } from "./wire/environment.js";
export type { EpisodeHandle } from "./participants/environment/environment-participant.js";

// ---- Agent servers ----------------------------------------------------------------------
export { AgentConfigSchema, AgentServer } from "./server/agent-server.js";
export type {
  AgentConfig,
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
export type { AgentSeedRequest } from "./wire/agent.js";
export { ActivationCancelledError } from "./participants/agent/session-phase.js";
export type { BoundarySnapshot } from "./participants/agent/session-phase.js";

// ---- Policy model servers ---------------------------------------------------------------
export {
  BackendError,
  PolicyModelConfigSchema,
  PolicyModelServer,
} from "./server/policy-model-server.js";
export type { GenerateInput, PolicyModelConfig } from "./server/policy-model-server.js";
