/**
 * Constrained decoding: a call whose decoder keeps structured state
 * cannot be continued from a token prefix, so it is never cut and never continues a cut.
 *
 * @module
 */

const GUIDED_FIELDS = [
  "guided_choice",
  "guided_grammar",
  "guided_json",
  "guided_regex",
  "guided_whitespace_pattern",
  "structural_tag",
  "structured_outputs",
] as const;

/**
 * Why a generation request can never be cut, or null when it can: the first of a forcing
 * `tool_choice`, a non-text `response_format` (or Responses `text.format`), or a guided or
 * structured-output field.
 */
export function restartReason(body: Readonly<Record<string, unknown>>): string | null {
  const toolChoice = body.tool_choice;
  if (typeof toolChoice === "string") {
    if (toolChoice !== "auto" && toolChoice !== "none") return `tool_choice:${toolChoice}`;
  } else if (toolChoice !== undefined && toolChoice !== null) {
    return "tool_choice:constrained";
  }
  const format = body.response_format ?? (body.text as { format?: unknown } | undefined)?.format;
  if (format !== undefined && format !== null) {
    const type =
      typeof format === "object" && !Array.isArray(format)
        ? (format as { type?: unknown }).type
        : undefined;
    if (type !== "text") return `response_format:${typeof type === "string" ? type : "unknown"}`;
  }
  for (const field of GUIDED_FIELDS) {
    if (body[field] !== undefined && body[field] !== null) return field;
  }
  return null;
}
