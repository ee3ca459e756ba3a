/**
 * The MCP grants of a session, as one activation uses them: the tools each granted server lists
 * (`tools/list`) are offered to the model as function tools, and a `function_call` naming one
 * is sent to its server (`tools/call`), through the official MCP client over Streamable HTTP
 * with the grant's headers (a resources server's session token).
 *
 * Nothing here outlives its activation: a session keeps only its grants (URL and headers), so a
 * restored session connects exactly as the seeded one did.
 *
 * @module
 */
import {
  Client,
  SdkHttpError,
  StreamableHTTPClientTransport,
  type CallToolResult,
  type Tool,
} from "@modelcontextprotocol/client";
import { EpisodeError, GymError } from "gym-participant-sdk";
import type { McpToolAccess } from "gym-participant-sdk/protocol";
import type { Item } from "./trajectory.js";
import type { ToolReply } from "./turn-loop.js";

/** How the agent names itself to MCP servers. */
const CLIENT_INFO = { name: "simple-agent", version: "0.1.0" } as const;

/** One granted server, connected, with the tools it listed. */
interface Connection {
  readonly grant: McpToolAccess;
  readonly client: Client;
  readonly tools: readonly Tool[];
}

/** What {@link McpToolbox} needs. */
export interface McpToolboxOptions {
  readonly grants: readonly McpToolAccess[];
  /** Where to reach a grant's server (its URL, with the activation's rollout prefix when due). */
  readonly urlOf: (grant: McpToolAccess) => URL;
  /** Told when an optional grant cannot be reached (its tools are left out). */
  readonly optionalFailed: (grant: McpToolAccess, error: unknown) => void;
}

/**
 * One activation's MCP tools. Connects on first use, lists every granted server's tools once,
 * and calls each tool on the server that listed it (the first grant, in grant order, when two
 * list the same name). A required grant that cannot be reached fails the activation; an
 * optional one is left out.
 */
export class McpToolbox {
  readonly #options: McpToolboxOptions;
  #connections: Promise<Connection[]> | null = null;

  constructor(options: McpToolboxOptions) {
    this.#options = options;
  }

  /** `body` with the granted tools added to its `tools` (a tool the body names is kept as is). */
  async offer(body: Item, signal: AbortSignal): Promise<Item> {
    const connections = await this.#connect(signal);
    const offered = Array.isArray(body.tools) ? (body.tools as Item[]) : [];
    const names = new Set(offered.map((tool) => tool.name));
    const added: Item[] = [];
    for (const { tools } of connections) {
      for (const tool of tools) {
        if (names.has(tool.name)) continue;
        names.add(tool.name);
        added.push(functionTool(tool));
      }
    }
    return added.length === 0 ? body : { ...body, tools: [...offered, ...added] };
  }

  /**
   * Calls `name` on the server that listed it, or answers null when no grant lists it. Every
   * reply is an answer: a tool error, or an HTTP refusal of the MCP request (a retired
   * attempt's 409, say), goes to the model as text, as a direct HTTP tool's reply does.
   */
  async call(name: string, args: unknown, signal: AbortSignal): Promise<ToolReply | null> {
    const connections = await this.#connect(signal);
    const owner = connections.find(({ tools }) => tools.some((tool) => tool.name === name));
    if (owner === undefined) return null;
    if (args === null || typeof args !== "object" || Array.isArray(args)) {
      return {
        status: 200,
        body: JSON.stringify({
          error: "Invalid tool call arguments: an MCP tool takes a JSON object",
        }),
        cookies: {},
        errorType: "invalid_arguments",
      };
    }
    try {
      const result = (await owner.client.callTool(
        { name, arguments: args as Record<string, unknown> },
        { signal },
      )) as CallToolResult;
      return {
        status: 200,
        body: resultText(result),
        cookies: {},
        errorType: result.isError === true ? "mcp_tool_error" : null,
      };
    } catch (error) {
      const status = httpStatusOf(error);
      if (status === null) throw error;
      const text = (error as SdkHttpError).data as { text?: unknown } | undefined;
      return {
        status,
        body: typeof text?.text === "string" ? text.text : (error as Error).message,
        cookies: {},
      };
    }
  }

  /** Closes every connection (a no-op when none was made). */
  async close(): Promise<void> {
    const pending = this.#connections;
    this.#connections = null;
    if (pending === null) return;
    const connections = await pending.catch(() => [] as Connection[]);
    await Promise.allSettled(connections.map(({ client }) => client.close()));
  }

  #connect(signal: AbortSignal): Promise<Connection[]> {
    if (this.#connections === null) {
      const attempt = this.#connectAll(signal);
      // A failed connect (an abort, a required grant down) is tried again by the next use.
      attempt.catch(() => {
        if (this.#connections === attempt) this.#connections = null;
      });
      this.#connections = attempt;
    }
    return this.#connections;
  }

  async #connectAll(signal: AbortSignal): Promise<Connection[]> {
    const settled = await Promise.allSettled(
      this.#options.grants.map((grant) => this.#connectOne(grant, signal)),
    );
    const connections: Connection[] = [];
    const opened = settled.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
    for (const [i, outcome] of settled.entries()) {
      const grant = this.#options.grants[i] as McpToolAccess;
      if (outcome.status === "fulfilled") {
        connections.push(outcome.value);
      } else if (grant.required) {
        await Promise.allSettled(opened.map(({ client }) => client.close()));
        throw connectFailure(grant, outcome.reason);
      } else {
        this.#options.optionalFailed(grant, outcome.reason);
      }
    }
    return connections;
  }

  async #connectOne(grant: McpToolAccess, signal: AbortSignal): Promise<Connection> {
    // `auto`: the 2026-07-28 revision where the server serves it, else the 2025 handshake.
    const client = new Client(CLIENT_INFO, { versionNegotiation: { mode: "auto" } });
    const transport = new StreamableHTTPClientTransport(this.#options.urlOf(grant), {
      requestInit: { headers: { ...grant.connection.headers } },
    });
    try {
      await client.connect(transport, { signal });
      const tools: Tool[] = [];
      let cursor: string | undefined;
      do {
        const page = await client.listTools(cursor === undefined ? {} : { cursor }, { signal });
        tools.push(...page.tools);
        cursor = page.nextCursor;
      } while (cursor !== undefined);
      return { grant, client, tools };
    } catch (error) {
      await client.close().catch(() => undefined);
      throw error;
    }
  }
}

/** A listed MCP tool as a Responses function tool. */
function functionTool(tool: Tool): Item {
  // The dialect marker is no part of a function's parameters.
  const { $schema: _dialect, ...parameters } = tool.inputSchema as Record<string, unknown>;
  return {
    type: "function",
    name: tool.name,
    ...(tool.description === undefined ? {} : { description: tool.description }),
    parameters,
    strict: false,
  };
}

/** A tool result as the text the model reads: its text content, other content as JSON. */
function resultText(result: CallToolResult): string {
  const parts = (result.content ?? []).map((item) =>
    item.type === "text" ? item.text : JSON.stringify(item),
  );
  if (parts.length > 0) return parts.join("\n");
  return JSON.stringify(result.structuredContent ?? null);
}

/** The HTTP status of a refused MCP request, or null for any other failure. */
function httpStatusOf(error: unknown): number | null {
  if (!(error instanceof SdkHttpError)) return null;
  const status = (error.data as { status?: unknown } | undefined)?.status;
  return typeof status === "number" ? status : null;
}

/**
 * Why a required grant could not be used, typed: its server has this attempt retired or
 * replaced (409 `stale_attempt`, as the caller's attempt is stale here too), refused the
 * request otherwise (502 `upstream_error`), or could not be reached (502 `upstream_unreachable`).
 */
function connectFailure(grant: McpToolAccess, error: unknown): GymError {
  const what = `MCP grant ${grant.name} (${grant.connection.url})`;
  const status = httpStatusOf(error);
  if (status === null) {
    return new GymError("upstream_unreachable", `${what}: ${(error as Error).message}`, {
      cause: error,
    });
  }
  const text = ((error as SdkHttpError).data as { text?: unknown } | undefined)?.text;
  let code: unknown = null;
  try {
    code = (JSON.parse(String(text)) as { error?: { code?: unknown } }).error?.code;
  } catch {
    // not the error envelope
  }
  if (status === 409 && code === "stale_attempt") {
    return new EpisodeError("stale_attempt", `${what} refused it: ${String(text).slice(0, 500)}`);
  }
  return new GymError(
    "upstream_error",
    `${what} answered HTTP ${status}: ${String(text ?? "").slice(0, 500)}`,
    { cause: error },
  );
}
