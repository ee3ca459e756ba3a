/**
 * Which tool a resources check calls: the one `--tool` names, else the first tool route of the
 * server's `GET /openapi.json` (any language's server may serve one) that has a request example
 * or takes no body. Tools are server-defined; without one known, a check that needs a tool call
 * is skipped, saying so.
 */
import type { ToolCall } from "./requirement.js";
import type { Target } from "./target.js";

/** Routes a resources server serves that are not tools. */
const NOT_TOOLS = new Set([
  "/seed_session",
  "/verify",
  "/close_session",
  "/aggregate_metrics",
  "/mcp",
]);

interface Operation {
  readonly requestBody?: {
    readonly content?: Record<string, { readonly example?: unknown; readonly schema?: unknown }>;
  };
}

/** The first tool of `document` with a body the kit can send, or null. */
export function toolFromOpenApi(document: unknown): ToolCall | null {
  const paths = (document as { paths?: Record<string, { post?: Operation }> } | null)?.paths;
  if (paths === undefined || paths === null || typeof paths !== "object") return null;
  const candidates: ToolCall[] = [];
  for (const [path, item] of Object.entries(paths).sort(([a], [b]) => (a < b ? -1 : 1))) {
    if (item?.post === undefined || NOT_TOOLS.has(path)) continue;
    if (path.startsWith("/ng-control/") || path.startsWith("/ng-rollout/") || path.includes("{"))
      continue;
    const content = item.post.requestBody?.content?.["application/json"];
    if (content?.example !== undefined) return { path, body: content.example };
    if (item.post.requestBody === undefined) candidates.push({ path, body: {} });
  }
  return candidates[0] ?? null;
}

/** The tool named by `--tool PATH` and `--tool-body JSON`, or the one `target` documents. */
export async function resolveTool(
  target: Target,
  given: { readonly path: string; readonly body: unknown } | null,
): Promise<ToolCall | null> {
  if (given !== null) return given;
  try {
    const reply = await target.call("GET", "/openapi.json");
    return reply.status === 200 ? toolFromOpenApi(reply.json) : null;
  } catch {
    return null;
  }
}
