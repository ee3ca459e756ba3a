/**
 * The hot request of `/mcp`: a plain 2025-era `tools/call`, recognised so the endpoint can
 * answer it without building a protocol server and a transport for it.
 *
 * The test is narrow on purpose: a request passes only when the MCP SDK would take it to the
 * stateless transport and on to the `tools/call` handler unchanged, i.e. a POST with a JSON
 * content type, an `Accept` naming both JSON and SSE, no protocol-version header or one of the
 * 2025 revisions, none of the 2026 routing headers, and a body that is one JSON-RPC request
 * with exactly `jsonrpc`, `id`, `method` and `params`, whose params are a tool name and an
 * optional arguments object (no `_meta`). Anything else is the SDK's to answer, with the SDK's
 * own errors. The answer is written as the SDK writes a JSON response (the JSON-RPC result,
 * `content-type: application/json`), which test/integration/resources/mcp-plain-call.test.ts
 * holds byte for byte against the SDK's.
 *
 * @see docs/mcp.md
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import {
  SUPPORTED_PROTOCOL_VERSIONS,
  isJsonContentType,
  type CallToolResult,
} from "@modelcontextprotocol/server";
import { isPlainRecord } from "../../util/plain-record.js";

/** A `tools/call` the endpoint answers itself. */
export interface PlainToolCall {
  readonly id: string | number;
  readonly name: string;
  readonly arguments: Record<string, unknown>;
}

/** The 2025 revisions: a header naming one keeps the request on the stateless transport. */
const LEGACY_VERSIONS: ReadonlySet<string> = new Set(SUPPORTED_PROTOCOL_VERSIONS);

/** The `tools/call` in `req`, when it is plain (see the module comment), else null. */
export function plainToolCall(req: IncomingMessage, body: unknown): PlainToolCall | null {
  const { headers } = req;
  if (req.method !== "POST" || !isJsonContentType(headers["content-type"])) return null;
  const accept = headers.accept;
  if (accept === undefined || !accept.includes("application/json")) return null;
  if (!accept.includes("text/event-stream")) return null;
  const version = headers["mcp-protocol-version"];
  if (version !== undefined && (typeof version !== "string" || !LEGACY_VERSIONS.has(version))) {
    return null;
  }
  if (headers["mcp-method"] !== undefined || headers["mcp-name"] !== undefined) return null;
  if (!isPlainRecord(body) || body.jsonrpc !== "2.0" || body.method !== "tools/call") return null;
  const { id, params } = body;
  if (typeof id !== "string" && !Number.isSafeInteger(id)) return null;
  if (Object.keys(body).length !== 4 || !isPlainRecord(params)) return null;
  const { name, arguments: args } = params;
  if (typeof name !== "string") return null;
  if (args !== undefined && !isPlainRecord(args)) return null;
  if (Object.keys(params).length !== (args === undefined ? 1 : 2)) return null;
  return { id: id as string | number, name, arguments: args ?? {} };
}

/** Writes the JSON-RPC answer to `call` carrying `result`, as the SDK's JSON response does. */
export function sendToolResult(
  res: ServerResponse,
  call: PlainToolCall,
  result: CallToolResult,
): void {
  const text = JSON.stringify({ result, jsonrpc: "2.0", id: call.id });
  res.writeHead(200, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text),
  });
  res.end(text);
}
