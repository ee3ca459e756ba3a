/**
 * gym-participant-sdk/protocol: the wire between servers, for code that calls a peer's routes
 * itself or reads what servers send: the request and reply schemas of the resources, agent and
 * environment routes and of the Responses API, the checkpoint headers and their readers, the
 * rollout path prefix, cookie codecs, and the Responses ↔ chat-completions converters a policy
 * model backend needs.
 *
 * A server written with the root entry's base classes needs none of it: they parse and answer
 * these shapes for their own routes. The reference environment (which calls its agent and
 * resources server) and Simple Agent (which calls its tools and model) use it.
 *
 * @see docs/protocol.md
 * @packageDocumentation
 */

// The rollout path prefix (`/<rollout segment>/<id>/...`) and the token-capture segment
export { ROLLOUT_SEGMENT, rolloutPath } from "./identity/rollout-prefix.js";
export { TOKEN_CAPTURE_SEGMENT } from "./server/rollout-prefix.js";

// Cookies a server sets and its callers send back
export { cookieHeader, parseCookieHeader, setCookieJar, setCookieLines } from "./util/cookies.js";
export type { CookieJar } from "./util/cookies.js";

// Resources routes
export {
  ResourcesCloseSessionReplySchema,
  ResourcesCloseSessionRequestSchema,
  ResourcesSeedSessionReplySchema,
  ResourcesSeedSessionRequestSchema,
  VerifyReplySchema,
} from "./wire/resources.js";
export type {
  ResourcesCloseSessionRequest,
  ResourcesSeedSessionRequest,
  VerifyReply,
} from "./wire/resources.js";
export {
  AggregateMetricsReplySchema,
  AggregateMetricsRequestSchema,
} from "./server/resources/aggregate-metrics.js";
export type { AggregateMetricsRequest } from "./server/resources/aggregate-metrics.js";

// MCP access: the header a harness sends its session token in (docs/mcp.md)
export { MCP_SESSION_TOKEN_HEADER } from "./server/resources/mcp-session-token.js";

// Checkpoint headers on data replies
export {
  CLOSE_FOLLOWS_HEADER,
  RESTART_HEADER,
  VERIFY_HEADER,
} from "./server/resources/checkpoint-middleware.js";
export { isRestartReply, verifyModeOf } from "./participants/environment/checkpoint-headers.js";
export type { ReplyHeaders } from "./participants/environment/checkpoint-headers.js";

// Environment routes
export { EpisodeFailureSchema, RunReplySchema } from "./wire/environment.js";

// Agent routes and the Responses API
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
  DirectHttpToolAccess,
  McpToolAccess,
  ResponsesCreateRequest,
  ToolAccess,
} from "./wire/agent.js";

// Responses ↔ chat completions (a policy model over a chat backend)
export {
  chatRequestOf,
  inputItems,
  itemsToMessages,
  outputItems,
  outputText,
  responseOf,
  toolsToChat,
} from "./server/model/responses-chat.js";
export type {
  ChatCompletionLike,
  ChatMessage,
  ChatToolCall,
  ResponsesRequestLike,
} from "./server/model/responses-chat.js";
