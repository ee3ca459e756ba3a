/**
 * `/mcp` on a resources server: its tool routes served as MCP tools over Streamable HTTP,
 * stateless, answered with JSON. Built on the official MCP TypeScript SDK (v2): 2025-era
 * requests (an `initialize`, then one POST per call, no MCP session) are served by a stateless
 * transport with JSON responses; 2026-07-28 requests (the per-request envelope) by the SDK's
 * per-request handler. One protocol server is built per HTTP request, holding only the tools the
 * request's session token allows, except for the hot request: a plain 2025-era `tools/call` of
 * an allowed tool is answered directly, as the SDK would answer it (mcp-plain-call.ts), since
 * building a server and a transport for each call cost more than half the call.
 *
 * A tool call runs the route's own handler with the route's own schema: nothing is declared
 * twice. The HTTP request carrying the call is what the checkpoint middleware admits, counts and
 * fences, like any request of the session the token names.
 *
 * @see docs/mcp.md
 */
import { once } from "node:events";
import type { Logger } from "pino";
import { z } from "zod";
import {
  Server as ProtocolServer,
  createMcpHandler,
  isLegacyRequest,
  type CallToolResult,
  type Tool,
} from "@modelcontextprotocol/server";
import {
  NodeStreamableHTTPServerTransport,
  toNodeHandler,
  toWebRequest,
} from "@modelcontextprotocol/node";
import { captureKey } from "../../identity/episode-id.js";
import { DetailError, GymError, McpToolError, type ErrorCode } from "../../errors.js";
import { isPlainRecord } from "../../util/plain-record.js";
import { McpMessageSchema, McpReplySchema } from "../../wire/resources.js";
import { parseBody } from "../../wire/parse.js";
import { dataRoute, type DataRoute, type RouteInput } from "../data-route.js";
import { plainToolCall, sendToolResult } from "./mcp-plain-call.js";
import type { RolloutContext } from "../rollout-prefix.js";
import {
  MCP_PATH,
  MCP_SESSION_TOKEN_HEADER,
  type McpSessionTokens,
  type McpTokenClaims,
} from "./mcp-session-token.js";

/** Names that are never tools: the base routes, the endpoint itself, sandbox access. */
export const RESERVED_MCP_TOOL_NAMES: ReadonlySet<string> = new Set([
  "verify",
  "seed_session",
  "close_session",
  "aggregate_metrics",
  "mcp",
  "sandbox_access",
]);

const TOOL_NAME = /^[A-Za-z0-9_-]+$/;

/** One tool route as MCP serves it. */
export interface McpTool {
  readonly name: string;
  readonly route: DataRoute;
  /** The route's request schema as JSON Schema (input side), computed once at startup. */
  readonly inputSchema: Tool["inputSchema"];
}

/**
 * The MCP tools of a server's routes: every `POST` route with a plain path except the reserved
 * names, control routes and routes that set `mcp: false`, in declaration order.
 *
 * @throws McpToolError naming the route: a name outside `^[A-Za-z0-9_-]+$`, `before`
 *   middleware (an MCP call would skip it), a request schema that is no JSON object
 */
export function mcpTools(routes: readonly DataRoute[]): McpTool[] {
  const tools: McpTool[] = [];
  for (const route of routes) {
    if (route.method !== "post" || route.mcp === false) continue;
    if (route.path.startsWith("/ng-control/")) continue;
    // A parameterized path is no single tool.
    if (/[:*?(]/.test(route.path)) continue;
    const name = route.path.slice(1);
    if (RESERVED_MCP_TOOL_NAMES.has(name)) continue;
    const what = `POST ${route.path}`;
    if (!TOOL_NAME.test(name)) throw McpToolError.badName(what, name);
    if ((route.before ?? []).length > 0) throw McpToolError.skippedMiddleware(what);
    tools.push({ name, route, inputSchema: inputJsonSchema(route.request ?? null, what) });
  }
  return tools;
}

/** A tool's `inputSchema`: the route's zod schema converted once, its input side. */
function inputJsonSchema(schema: z.ZodType | null, what: string): Tool["inputSchema"] {
  if (schema === null) return { type: "object" };
  const json = z.toJSONSchema(schema, { io: "input", unrepresentable: "any" }) as Record<
    string,
    unknown
  >;
  if (json.type === "object") return json as Tool["inputSchema"];
  // A union of object shapes has no `type` of its own; anything else is no object.
  if (json.type === undefined && ("anyOf" in json || "oneOf" in json || "allOf" in json)) {
    return { ...json, type: "object" } as Tool["inputSchema"];
  }
  if (json.type === undefined && Object.keys(json).every((key) => key === "$schema")) {
    return { type: "object" };
  }
  throw McpToolError.notAnObject(what);
}

/** The MCP access a `/seed_session` reply hands out. */
export interface McpAccess {
  readonly server_name: string;
  readonly url_path: typeof MCP_PATH;
  readonly transport: "http";
  readonly headers: { readonly [MCP_SESSION_TOKEN_HEADER]: string };
}

/** The access metadata naming `token`, for the server named `serverName`. */
export function mcpAccess(serverName: string, token: string): McpAccess {
  return {
    server_name: serverName,
    url_path: MCP_PATH,
    transport: "http",
    headers: { [MCP_SESSION_TOKEN_HEADER]: token },
  };
}

/**
 * A seed reply carrying `access`: a native reply (it names `resources_session_id`) in its
 * `resources_tools` when that is null or absent; another object under `mcp` unless it has one.
 * Anything else, or a reply that already says, is returned as it is.
 */
export function withMcpAccess(reply: unknown, access: McpAccess): unknown {
  if (!isPlainRecord(reply)) return reply;
  if (typeof reply.resources_session_id === "string") {
    const tools = reply.resources_tools;
    return tools === null || tools === undefined ? { ...reply, resources_tools: access } : reply;
  }
  return "mcp" in reply ? reply : { ...reply, mcp: access };
}

/** What {@link mcpRoutes} serves from. */
export interface McpEndpointOptions {
  /** The server's name (the MCP server's name too). */
  readonly serverName: string;
  /** The version the MCP server reports. */
  readonly version: string;
  readonly tools: readonly McpTool[];
  readonly tokens: McpSessionTokens;
  /** The errors the checkpoint middleware can answer `/mcp` with (before any JSON-RPC). */
  readonly errors: readonly ErrorCode[];
  readonly logger: Logger;
  /**
   * Whether a plain 2025-era `tools/call` is answered without the SDK's server and transport;
   * false sends every request through the SDK (what the answers are held against).
   * @default true
   */
  readonly plainCalls?: boolean;
}

/** `POST /mcp` (the endpoint), and `GET`/`DELETE /mcp` answered 405: nothing is kept between requests. */
export function mcpRoutes(options: McpEndpointOptions): DataRoute[] {
  const notServed = (method: "get" | "delete"): DataRoute =>
    dataRoute({
      method,
      path: MCP_PATH,
      summary: "Not served: the MCP endpoint is stateless (405)",
      rolloutPrefixed: false,
      mcp: false,
      handler: ({ res }) => {
        res.status(405).setHeader("Allow", "POST");
        return {
          jsonrpc: "2.0",
          error: { code: -32000, message: "Method not allowed." },
          id: null,
        };
      },
    });
  return [
    dataRoute({
      method: "post",
      path: MCP_PATH,
      summary: "Call this server's tools over MCP (Streamable HTTP, stateless, JSON responses)",
      description:
        `JSON-RPC of the Model Context Protocol: \`tools/list\` and \`tools/call\` over this server's tool routes. ` +
        `A call names its session with the \`${MCP_SESSION_TOKEN_HEADER}\` header a \`/seed_session\` reply hands out ` +
        "(without a valid one, `tools/list` lists every tool and `tools/call` fails). " +
        "With checkpointing on, the request waits out an open checkpoint and is refused with the error envelope " +
        "(not a JSON-RPC result) when its attempt was retired or replaced by a restore. See docs/mcp.md.",
      request: McpMessageSchema,
      reply: McpReplySchema,
      errors: options.errors,
      rolloutPrefixed: false,
      mcp: false,
      handler: (input) => serve(input, options),
    }),
    notServed("get"),
    notServed("delete"),
  ];
}

/** Serves one JSON-RPC request; resolves once the reply is sent (the call is in flight till then). */
async function serve(input: RouteInput<unknown>, options: McpEndpointOptions): Promise<undefined> {
  const { req, res } = input;
  const claims = options.tokens.claimsOf(req);
  const call =
    options.plainCalls === false || claims === null ? null : plainToolCall(req, req.body);
  // Only a call the session may make: every refusal is the SDK's to word.
  const tool =
    call === null
      ? undefined
      : visibleTools(options.tools, claims).find((t) => t.name === call.name);
  if (call !== null && claims !== null && tool !== undefined) {
    sendToolResult(res, call, await callTool(tool, call.arguments, input, claims, options.logger));
    return undefined;
  }
  const build = (): ProtocolServer => protocolServer(input, claims, options);
  const sent = res.writableFinished ? Promise.resolve() : once(res, "close").then(() => undefined);
  const onerror = (error: Error): void =>
    options.logger.warn({ err: error }, "MCP request failed inside the MCP SDK");
  const web = await toWebRequest(req, req.body, { signal: input.signal });
  if (await isLegacyRequest(web, req.body)) {
    // 2025 revisions: the stateless transport, one JSON body per POST.
    const server = build();
    const transport = new NodeStreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: true,
    });
    try {
      await server.connect(transport);
      await transport.handleRequest(req, res, req.body);
      await sent;
    } finally {
      await transport.close();
      await server.close();
    }
    return undefined;
  }
  // The 2026-07-28 revision; its per-request handler answers JSON unless a handler streams,
  // which ours never do.
  const handler = createMcpHandler(build, { legacy: "reject", onerror });
  try {
    await toNodeHandler(handler, { onerror })(req, res, req.body);
    await sent;
  } finally {
    await handler.close();
  }
  return undefined;
}

/** The protocol server of one request: the tools its token allows, each calling its route. */
function protocolServer(
  input: RouteInput<unknown>,
  claims: McpTokenClaims | null,
  options: McpEndpointOptions,
): ProtocolServer {
  const visible = visibleTools(options.tools, claims);
  const byName = new Map(visible.map((tool) => [tool.name, tool]));
  const server = new ProtocolServer(
    { name: options.serverName, version: options.version },
    { capabilities: { tools: {} } },
  );
  server.setRequestHandler("tools/list", () => ({
    tools: visible.map((tool): Tool => ({
      name: tool.name,
      description: describe(tool.route),
      inputSchema: tool.inputSchema,
    })),
  }));
  server.setRequestHandler("tools/call", async (request) => {
    const { name, arguments: args } = request.params;
    if (claims === null) {
      return toolError(
        `no valid ${MCP_SESSION_TOKEN_HEADER} header: send the one the /seed_session reply gave this session`,
      );
    }
    const tool = byName.get(name);
    if (tool === undefined) {
      const known = options.tools.some((t) => t.name === name);
      return toolError(
        known
          ? `tool '${name}' is not allowed for this session`
          : `unknown tool '${name}'; tools/list names the tools`,
      );
    }
    return callTool(tool, args ?? {}, input, claims, options.logger);
  });
  return server;
}

/** The tools a session's token allows (all of them without a token: `tools/list` shows them). */
function visibleTools(
  tools: readonly McpTool[],
  claims: McpTokenClaims | null,
): readonly McpTool[] {
  const allowed = claims?.tools ?? null;
  return allowed === null ? tools : tools.filter((tool) => allowed.includes(tool.name));
}

/** A tool's description: the route's summary, and its description when it has one. */
function describe(route: DataRoute): string {
  return route.description === undefined
    ? route.summary
    : `${route.summary}\n\n${route.description}`;
}

async function callTool(
  tool: McpTool,
  args: Record<string, unknown>,
  input: RouteInput<unknown>,
  claims: McpTokenClaims,
  logger: Logger,
): Promise<CallToolResult> {
  try {
    const schema = tool.route.request ?? null;
    const body = schema === null ? undefined : parseBody(schema, args, `${tool.name} tool`);
    // The prefix's attempt when the call has one (the checkpoint middleware checked it
    // continues the token's), else the token's.
    const rollout: RolloutContext | null =
      input.rollout !== null || claims.episode === null
        ? input.rollout
        : {
            captureKey: captureKey(claims.episode),
            episodeId: claims.episode,
            tokenCapture: false,
          };
    const result: unknown = await tool.route.handler({
      body: body as never,
      rollout,
      signal: input.signal,
      req: input.req,
      res: input.res,
    });
    const text = result === undefined ? "null" : JSON.stringify(result);
    return {
      content: [{ type: "text", text }],
      ...(isPlainRecord(result) ? { structuredContent: result } : {}),
    };
  } catch (error) {
    // A refusal is the model's to read (as the HTTP route's envelope); a bug stays in the log.
    if (error instanceof GymError) return toolError(JSON.stringify(error.toEnvelope()));
    if (error instanceof DetailError) return toolError(error.detail);
    logger.error({ err: error, tool: tool.name }, "MCP tool call failed");
    return toolError(`tool '${tool.name}' failed (internal_error); the server log has the details`);
  }
}

function toolError(text: string): CallToolResult {
  return { content: [{ type: "text", text }], isError: true };
}
